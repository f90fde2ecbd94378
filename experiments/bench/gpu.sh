#!/usr/bin/env bash
# The GPU benchmark in one go on one GPU, nothing downloaded (random weights at real shapes, bf16),
# within a time budget (BUDGET seconds from the start, default 330), the decisive shape first:
#   1. a smoke run of every section at a tiny shape (stops here when the stack is broken), then the
#      tests that need a GPU: decoding replayed as captured CUDA graphs against the bridge on every
#      family (and captures reused across calls), the captured training step, its bf16 mask gradient
#      and plain transformers' both against an fp32 reference, activation checkpointing;
#   2. `performance.py` at the Llama-3.1-8B shape: removal sweep, batched evaluation and mask-training
#      steps, the library against plain transformers at its best (`plain-static-compiled`: generate on a
#      static cache with its decoding step compiled; `plain-compiled`: a fixed-shape training step under
#      torch.compile(mode="reduce-overhead")) and eager (`plain-eager`), and the library's step packed to
#      a token budget (`library-packed-train`); every loop over CALLS synchronised calls, its first call
#      (compilation, capture) apart; peak memory of mask training with and without activation
#      checkpointing over the weights;
#   3. EXTRA, when set: one more command, run from the repository root with OUT set to the output
#      folder, for at most EXTRA_SECONDS (default 60), e.g.
#      EXTRA='python3 experiments/rebuttal.py ... --out "$OUT/extra"' bash experiments/bench/gpu.sh;
#   4. `performance.py` at the Qwen2.5-0.5B and -1.5B shapes with the time left (a loop that would
#      start after the deadline is skipped, a running one stops its calls: `calls` in the table);
#   5. `proxies.py` at the 0.5B shape if time is left: host synchronisations per decoding pass and per
#      training step, counted by CUDA itself (WHERE=true: and where each comes from).
# Usage: bash experiments/bench/gpu.sh [OUT_DIR]   (default figures/bench/performance_gpu)
#        MODELS="llama8b" CALLS=20 bash experiments/bench/gpu.sh /tmp/gpu
#        VERSUS="plain-static-compiled plain-compiled plain-captured plain-eager library-eager-steps" ...
#        DEVICE=cpu FIRST=tiny MODELS=tiny SMALL=tiny CALLS=3 BUDGET=3000 bash experiments/bench/gpu.sh /tmp/gpu-dry  # dry run, CPU
set -uo pipefail
out="$(realpath -m "${1:-figures/bench/performance_gpu}")"
repository="$(realpath "$(dirname "$0")/../..")"
cd "$(dirname "$0")"
start=$(date +%s)
deadline=$((start + ${BUDGET:-330}))
device="${DEVICE:-cuda}"
first="${FIRST:-llama8b}"        # the decisive shape, timed first
models="${MODELS:-qwen0.5b qwen1.5b}"  # then these, with the time left
small="${SMALL:-qwen0.5b}"       # the shape of step 5
calls="${CALLS:-50}"
versus="${VERSUS:-plain-static-compiled plain-compiled plain-eager library-packed-train}"
extra_seconds="${EXTRA_SECONDS:-60}"
# On the CPU inductor compiles C++ for minutes per graph (2 cores); aot_eager traces the same graphs
# (dynamo, the hooks, the backward) and compiles nothing: the dry run checks the compiled loops run.
backend="${COMPILE_BACKEND:-$([ "$device" = cpu ] && echo aot_eager || echo inductor)}"
mkdir -p "$out"
# Random weights are saved and loaded back once per model (16 GB at the 8B shape): in memory when there is room.
if [ -d /dev/shm ] && [ "$(df --output=avail -B1G /dev/shm | tail -1)" -gt 40 ]; then export TMPDIR=/dev/shm; fi
export PYTHONUNBUFFERED=1
left() { local n=$((deadline - $(date +%s))); echo $((n > 10 ? n : 10)); }
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
python3 performance.py --models tiny --device "$device" --task reverse --calls 2 --sweep-steps 4 --new-tokens 3 \
    --eval-examples 8 --versus plain-eager || { echo "the smoke run failed: stopping"; exit 1; }
status=0
(cd "$repository" && timeout 120 python3 -m pytest -p no:cacheprovider --no-cov -n 0 tests/gates/test_static.py \
    tests/gates/test_native.py tests/training/test_graphed.py -k gpu) || status=1
echo "[gpu.sh] $(left) s left before $first"
# The decisive shape gets the time but what the others and EXTRA keep (90 s and EXTRA_SECONDS); 30 s
# more let a loop running at its deadline finish its call and the tables be written.
reserve=90
if [ -n "${EXTRA:-}" ]; then reserve=$((reserve + extra_seconds)); fi
# shellcheck disable=SC2086
timeout $(($(left) - reserve + 30)) python3 performance.py --models "$first" --device "$device" --task reverse \
    --threads 8 --prefix-sharing off --calls "$calls" --eval-examples "${EVAL_EXAMPLES:-16}" --versus $versus \
    --compile-backend "$backend" --deadline $((deadline - reserve)) --out "$out" || status=1
if [ -n "${EXTRA:-}" ]; then
    echo "[gpu.sh] EXTRA: $EXTRA"
    (cd "$repository" && OUT="$out" timeout "$extra_seconds" bash -c "$EXTRA") || status=1
fi
if [ "$(left)" -gt 20 ] && [ -n "$models" ]; then  # in their own table: smaller/performance.csv
    echo "[gpu.sh] $(left) s left for $models"
    # shellcheck disable=SC2086
    timeout "$(left)" python3 performance.py --models $models --device "$device" --task reverse --threads 8 \
        --prefix-sharing off --calls "$calls" --eval-examples "${EVAL_EXAMPLES:-16}" --versus $versus \
        --compile-backend "$backend" --deadline "$deadline" --out "$out/smaller" || status=1
fi
if [ "$(left)" -gt 20 ]; then
    timeout "$(left)" python3 proxies.py --models "$small" --device "$device" --task reverse --gpu-path true \
        --where "${WHERE:-false}" --out "$out/proxies" || status=1
else
    echo "[gpu.sh] no time left for proxies.py"
fi
echo "[gpu.sh] done in $(($(date +%s) - start)) s"
exit $status
