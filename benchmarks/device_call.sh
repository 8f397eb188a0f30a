#!/usr/bin/env bash
# The open GPU measurements as two prepared device calls, each inside one 10-minute call; together (about 16-17
# minutes with one machine start) they exceed a 15-minute device budget, so a session runs one of them. Here, first,
# run the pip download line of BENCHMARKS.md ("The jax backend's device pipeline") to fill .whl/ with the wheels a
# GPU image lacks. On the device, from the project root:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD || exit 1; PART=checks bash benchmarks/device_call.sh
#
# PART=checks (about 10 minutes; eight files in $OUT, of the 8 a call brings back): the paper-shape LSTM step in
# bf16 with the accelerator's head chunks, G = auto and G = fastest against the hand grid (the plan's estimate against
# the measured step; train_shadows' first group first), the six balanced variants at M = 484 (float32 against float64
# since the residual vectors and QR eigh), GPT-NeoX at G = 8 and G = auto in bf16, then in float32 (bf16 against
# float32 in one run), the parts of the LSTM step, the parts of the GPT-NeoX step in bf16 (AdamW's share), then one
# many-IN-count evaluation with its progress bar (the first 448 of 512 models, 500 canaries: how long the 11
# bucketed programs take to compile, and the blocks' pace).
# PART=sweep (about 9-10 minutes; its outputs come back as worst512.tar.gz): the worst-case LSTM with 512 models
# trained and evaluated at m = 512, 64, 128, 256, 448 with paper_table's paired differences, then
# membership_structure (docs/reproduction/worst512/run.sh).
# Every step has its own time limit and writes what it measured under $OUT as it goes.
set -u
OUT=${OUT:?set OUT}
PART=${PART:-checks}
PY=${PY:-python3}
mkdir -p "$OUT"
step() {  # step NAME LIMIT_S COMMAND...: the command's output appended to $OUT/log.txt under a "== NAME" line, its
  # time and status in $OUT/steps.txt (one log: a device call brings back at most 8 files)
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name: $*" >> "$OUT/log.txt"
  timeout "$limit" "$@" 2>&1 | grep -v cuda_timer >> "$OUT/log.txt"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/steps.txt" 2>&1
case $PART in
  checks)
    step train_lstm_bf16 160 $PY benchmarks/train_device.py --shapes lstm_paper --notorch --dtypes bfloat16 \
      --budget_s 130 --out "$OUT/train_device.json"
    step loo484 90 $PY benchmarks/loo_device.py --Ms 484 --counts balanced --noevaluate --out "$OUT/loo484.json"
    step neox 120 $PY benchmarks/train_device.py --shapes neox_160m --notorch --rules auto --notrain_shadows \
      --grid 8 --dtypes bfloat16,float32 --budget_s 90 --out "$OUT/train_device_neox.json"
    step lstm_parts 40 $PY benchmarks/lstm_step_parts.py --dtypes bfloat16 --budget_s 25 --out "$OUT/lstm_parts.json"
    step neox_parts 100 $PY benchmarks/neox_step_parts.py --dtypes bfloat16 --budget_s 80 --out "$OUT/neox_parts.json"
    step many_counts 50 $PY benchmarks/loo_device.py --Ms 448 --keep_of 512 --N 500 --counts balanced --noevaluate \
      --progress --out "$OUT/many_counts.json"
    ;;
  sweep)
    # all 512 first (one IN count, the jax backend), then the subsets smallest first, so a cut-off call loses 448
    step worst512 550 env OUT="$OUT/worst512" RUNS=/tmp/runs PY="$PY" COUNTS="64 128 256 448" \
      bash docs/reproduction/worst512/run.sh
    # one archive: a device call brings back at most 8 files, no deeper than two folders
    tar -czf "$OUT/worst512.tar.gz" -C "$OUT" worst512 && rm -rf "$OUT/worst512"
    ;;
  *)
    echo "PART must be checks or sweep, got $PART" >&2
    exit 2
    ;;
esac
rm -f "$OUT"/*.tmp  # a row file cut off between its write and its rename: not one of the 8 files
