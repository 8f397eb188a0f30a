#!/usr/bin/env bash
# The open GPU measurements as two prepared device calls, each inside one 10-minute call; together (about 16-17
# minutes with one machine start) they exceed a 15-minute device budget, so a session runs the sweep first (the
# science of REPRODUCTION.md) and the checks with what is left, or the checks alone. Here, first, the pip download line of BENCHMARKS.md ("The jax
# backend's device pipeline") fills .whl/ with the wheels a GPU image lacks. On the device, from the project root:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD || exit 1; PART=checks bash benchmarks/device_call.sh
#
# PART=checks (about 9 minutes): the leave-one-out pipeline at M = 64 in both precisions (float32 with QR eigh beside
# jax's default Jacobi: is float32 within 1e-3 of float64?), the paper-shape LSTM step in bf16 with G = auto and
# G = fastest (no out-of-memory candidate, the plan's estimate against the measured step, train_shadows' first
# group), one many-IN-count evaluation (the first 448 of 512 models: 27 counts, 11 bucketed programs), the parts of
# the LSTM step, and GPT-NeoX at G = 4 and 8 in both dtypes.
# PART=sweep (about 9-10 minutes): the worst-case LSTM with 512 models trained and evaluated at m = 512, 64, 128,
# 256, 448 with paper_table's paired differences, then membership_structure (docs/reproduction/worst512/run.sh).
# Every step has its own time limit and writes what it measured under $OUT as it goes.
set -u
OUT=${OUT:?set OUT}
PART=${PART:-checks}
PY=${PY:-python3}
mkdir -p "$OUT"
step() {  # step NAME LIMIT_S COMMAND...: the command's output in $OUT/NAME.txt, its time and status in $OUT/steps.txt
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
case $PART in
  checks)
    step loo64 110 $PY benchmarks/loo_device.py --Ms 64 --noevaluate --out "$OUT/loo64.json"
    step train_lstm_bf16 180 $PY benchmarks/train_device.py --shapes lstm_paper --notorch --dtypes bfloat16 \
      --budget_s 150 --out "$OUT/train_device.json"
    step many_counts 90 $PY benchmarks/loo_device.py --Ms 448 --keep_of 512 --N 5000 --counts balanced --noevaluate \
      --out "$OUT/many_counts.json"
    step lstm_parts 70 $PY benchmarks/lstm_step_parts.py --dtypes bfloat16 --budget_s 50 --out "$OUT/lstm_parts.json"
    step neox_g8 100 $PY benchmarks/train_device.py --shapes neox_160m --notorch --rules "" --notrain_shadows \
      --grid 4,8 --dtypes bfloat16,float32 --budget_s 75 --out "$OUT/train_device_neox.json"
    ;;
  sweep)
    # all 512 first (one IN count, the jax backend), then the subsets smallest first, so a cut-off call loses 448
    step worst512 570 env OUT="$OUT/worst512" RUNS=/tmp/runs PY="$PY" COUNTS="64 128 256 448" \
      bash docs/reproduction/worst512/run.sh
    ;;
  *)
    echo "PART must be checks or sweep, got $PART" >&2
    exit 2
    ;;
esac
