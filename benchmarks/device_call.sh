#!/usr/bin/env bash
# The open GPU measurements as two prepared device calls, each inside one 10-minute call; together (about 16-17
# minutes with one machine start) they exceed a 15-minute device budget, so a session runs one of them. Here, first,
# run the pip download line of BENCHMARKS.md ("The jax backend's device pipeline") to fill .whl/ with the wheels a
# GPU image lacks. On the device, from the project root:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD || exit 1; PART=checks bash benchmarks/device_call.sh
#
# PART=checks (about 10 minutes; at most 8 files in $OUT, of the 8 a call brings back): the six balanced variants at
# M = 484 (float32 against float64 since the residual vectors and QR eigh; the numpy backend on the machine's cores),
# the parts of the GPT-NeoX step in bf16 (AdamW's share), GPT-NeoX in float32 with G = auto at M = 32 (against the
# bf16 auto row of BENCHMARKS.md: bf16 against float32 at each one's own G), then the first 448 of 512 models against
# all 512 (5,000 canaries, T = 128, benchmarks/many_counts.py: one traced-count program, its compile and its calls).
# PART=sweep (about 9-10 minutes; its outputs come back as worst512.tar.gz): the worst-case LSTM with 512 models
# trained, the paired model-count sweep on the GPU (shadow_sweep --backend=jax at m = 64, 128, 256, 448, 512 with
# paired intervals at 0.1% and 0.01%), evaluate and paper_table on all 512, then membership_structure
# (docs/reproduction/worst512/run.sh).
# PART=lora (about 8 minutes; peft and transformers from .whl/ too): G LoRA copies of GPT-2 small and of the ~1B Llama
# shape against PyTorch + PEFT on the GPU (benchmarks/lora_throughput.py, G up to --plan's), and their memory per
# added copy from the GPU's compiled memory analysis.
# Every step has its own time limit and writes what it measured under $OUT as it goes.
# PART=sweep at tiny size on a CPU (tests/e2e/test_device_call_sweep.py): CONFIG, MODELS, GROUP, SWEEP_COUNTS, N_BOOT
# and BACKEND as docs/reproduction/worst512/run.sh reads them; RUNS for its run folders (default /tmp/runs).
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
  # without the HLO XLA's GPU autotuner prints for a candidate group that runs out of memory while compiling
  local noise='cuda_timer|^\s*(%|ROOT %|}|\(.*\) -> )|^[WE][0-9]{4} |external/xla|Source Location|EXECUTION FAILED|^\)'
  timeout "$limit" "$@" 2>&1 | grep -Ev "$noise" >> "$OUT/log.txt"
  local rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/steps.txt" 2>&1
case $PART in
  checks)
    step loo484 140 $PY benchmarks/loo_device.py --Ms 484 --counts balanced --noevaluate --out "$OUT/loo484.json"
    step neox_parts 120 $PY benchmarks/neox_step_parts.py --dtypes bfloat16 --budget_s 100 --out "$OUT/neox_parts.json"
    step neox_f32_auto 150 $PY benchmarks/train_device.py --shapes neox_160m --notorch --notrain_shadows \
      --dtypes float32 --rules auto --grid none --M 32 --budget_s 5 --out "$OUT/train_device_neox_f32_auto.json"
    step many_counts 140 $PY benchmarks/many_counts.py --N 5000 --counts balanced --nonumpy \
      --out "$OUT/many_counts.json"
    ;;
  sweep)
    # training, then the paired sweep (its tables first), then the reports of all 512
    step worst512 550 env OUT="$OUT/worst512" RUNS="${RUNS:-/tmp/runs}" PY="$PY" bash docs/reproduction/worst512/run.sh
    # one archive: a device call brings back at most 8 files, no deeper than two folders
    tar -czf "$OUT/worst512.tar.gz" -C "$OUT" worst512 && rm -rf "$OUT/worst512"
    ;;
  lora)
    step lora_memory 150 $PY benchmarks/lora_throughput.py --memory --sizes gpt2,llama1b --out "$OUT/lora_memory.json"
    step lora_speed 330 $PY benchmarks/lora_throughput.py --sizes gpt2,llama1b --groups plan --reps 3 \
      --out "$OUT/lora_throughput.json"
    ;;
  *)
    echo "PART must be checks, sweep or lora, got $PART" >&2
    exit 2
    ;;
esac
rm -f "$OUT"/*.tmp  # a row file cut off between its write and its rename: not one of the 8 files
