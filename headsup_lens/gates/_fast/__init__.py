"""Fast paths for one family of models, beside the passes every architecture gets (`gates._native`).

`_direct`: greedy decoding under the value gate on a Llama-family decoder (Llama, Qwen2 without
sliding windows) on the CPU, in a plain forward pass of the wrapped weights that computes rows with
the same tokens and the same gates once (a removal sweep's rows share everything below the first
head they remove). `objective.greedy_generate` takes it when the gate is one the stand-in passes
apply (`GateKind.stand_in`), no hook is attached to the model, prefix sharing is on
(`native_options(prefix_sharing=...)`: by default on the CPU only) and the model's decoder layers
are ones it knows; otherwise the native pass or the bridge decodes. `direct_path(False)` turns it
off with the native pass. Kept because it is measured faster than both on the CPU
(`experiments/bench/direct_path.py`, `figures/bench/direct_path.csv`).
"""
