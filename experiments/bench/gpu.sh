#!/usr/bin/env bash
# The GPU benchmark in one go on one GPU, nothing downloaded (random weights at real shapes, bf16):
#   1. a smoke run of every section at a tiny shape (stops here when the stack is broken), then the
#      tests of decoding replayed as captured CUDA graphs against the bridge on every family, of the
#      captured training step and of activation checkpointing (fp32);
#   2. `performance.py` at the Llama-3.1-8B shape first, then Qwen2.5-0.5B and -1.5B: removal sweep,
#      batched evaluation, mask-training steps, library vs plain `transformers` (and the library's
#      sweep and evaluation with eager decoding steps, and its training step run eagerly: what the
#      CUDA graphs win; its training step with packed loss passes, the CPU's lever),
#      and peak memory of mask training with and without activation checkpointing (tables written
#      after every section);
#   3. `proxies.py` at the 0.5B shape: host synchronisations per decoding pass and per training step,
#      counted by CUDA itself (`torch.cuda.set_sync_debug_mode`) beside the wrapped calls (WHERE=true:
#      and where each comes from);
#   4. a lever at the 0.5B shape: the sweep with the decoding step compiled.
# Usage: bash experiments/bench/gpu.sh [OUT_DIR]   (default figures/bench/performance_gpu)
#        MODELS="llama8b" DEVICE=cuda REPEATS=2 bash experiments/bench/gpu.sh /tmp/gpu
#        DEVICE=cpu MODELS=tiny SMALL=tiny REPEATS=1 bash experiments/bench/gpu.sh /tmp/gpu-dry  # the script's dry run on a CPU
set -uo pipefail
out="$(realpath -m "${1:-figures/bench/performance_gpu}")"
repository="$(realpath "$(dirname "$0")/../..")"
cd "$(dirname "$0")"
device="${DEVICE:-cuda}"
models="${MODELS:-llama8b qwen0.5b qwen1.5b}"
repeats="${REPEATS:-2}"
small="${SMALL:-qwen0.5b}"  # the shape of steps 3 and 4
mkdir -p "$out"
# Random weights are saved and loaded back once per model (16 GB at the 8B shape): in memory when there is room.
if [ -d /dev/shm ] && [ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 40 ]; then export TMPDIR=/dev/shm; fi
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
python3 performance.py --models tiny --device "$device" --task reverse --repeats 1 --sweep-steps 4 --new-tokens 3 \
    --eval-examples 8 --train-steps 1 || { echo "the smoke run failed: stopping"; exit 1; }
status=0
(cd "$repository" && python3 -m pytest -p no:cacheprovider --no-cov -n 0 tests/gates/test_static.py tests/gates/test_native.py \
    tests/training/test_graphed.py -k gpu) || status=1
# shellcheck disable=SC2086
python3 performance.py --models $models --device "$device" --task reverse --repeats "$repeats" --threads 8 \
    --prefix-sharing off --eager-steps true --eager-train true --packed-train true --out "$out" || status=1
python3 proxies.py --models "$small" --device "$device" --task reverse --gpu-path true --where "${WHERE:-false}" \
    --out "$out/proxies" || status=1
# A lever: the fixed-shape decoding step compiled by `torch.compile` (and replayed as a CUDA graph)
# in the sweep at the 0.5B shape; compilation gets 120 s, and falls back to eager steps with a
# warning when it fails.
timeout 120 python3 performance.py --models "$small" --device "$device" --sections sweep --repeats "$repeats" \
    --prefix-sharing off --compile true --out "$out/compiled" || echo "the compiled run did not finish"
exit $status
