#!/usr/bin/env bash
# The worst-case LSTM (lstm.py:reproduce_worst, T = 128, 5,000 canaries) with 512 shadow models on one GPU, evaluated
# there on all 512 and its first m = 448, 64, 256, 128 models (each model scored leave-one-out among the m; a partial
# run takes whole groups of 64, so 448 and 512 stand beside the paper's 484), with the paired comparisons of
# paper_table; then membership_structure on the first 64. Outputs (tables, JSON, figures, logs)
# go to $OUT/m<m>/; the run folders stay in $RUNS (1.3 GB of losses at 512 models).
# Run from the project root: OUT=out RUNS=/tmp/runs bash docs/reproduction/worst512/run.sh
# (CONFIG, MODELS, GROUP and COUNTS override the setting for a dry run on a CPU.) All 512 models have one IN count
# per canary and are scored by the jax backend on the GPU; a subset's canaries have tens of counts (27 at m = 448),
# each a program the jax backend compiles, so the subsets are scored by the numpy backend on the machine's cores
# (SUBSET_BACKEND overrides it).
set -u
OUT=${OUT:?set OUT}; RUNS=${RUNS:-/tmp/runs}
CONFIG=${CONFIG:-experiments/configs/lstm.py:reproduce_worst}; MODELS=${MODELS:-512}; GROUP=${GROUP:-64}
COUNTS=${COUNTS:-448 64 256 128}
PY=${PY:-python3}
mkdir -p "$OUT" "$RUNS"
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }
save() { mkdir -p "$OUT/m$1"; cp "$2"/*.md "$2"/*.json "$2"/*.png "$OUT/m$1/" 2>/dev/null; }
RUN=$RUNS/worst$MODELS
log "train $MODELS models ($CONFIG, groups of $GROUP)"
$PY -m experiments.train_shadows --config="$CONFIG" --config.shadow.num_models="$MODELS" \
  --config.shadow.group_size="$GROUP" --config.population.size=0 --run_dir="$RUN" --noevaluate --noprogress \
  2>&1 | grep -v -i warn | tail -20 > "$OUT/train.txt"
cp "$RUN/config.json" "$OUT/train_config.json"
log "trained"
for m in "$MODELS" $COUNTS; do
  D=$RUN
  if [ "$m" != "$MODELS" ]; then
    D=${RUN}_m$m
    $PY -m experiments.partial_run --run_dir="$RUN" --out_run_dir="$D" --num_models="$m" > /dev/null || continue
  fi
  BACKEND=jax
  [ "$m" != "$MODELS" ] && BACKEND=${SUBSET_BACKEND:-numpy}
  $PY -m experiments.evaluate --run_dir="$D" --backend=$BACKEND --noprogress > "$OUT/evaluate_m$m.txt" 2>&1
  $PY -m experiments.paper_table --run_dir="$D" --setting=lstm_worst --noprogress > "$OUT/paper_table_m$m.txt" 2>&1
  save "$m" "$D"
  log "m = $m evaluated"
done
FIRST=$(echo $COUNTS | tr ' ' '\n' | sort -n | head -1)
$PY -m experiments.membership_structure --run_dir="${RUN}_m$FIRST" --gaps=1,1.5,2,4 --noprogress \
  --out_dir="$OUT/membership_structure_m$FIRST" > "$OUT/membership_structure_m$FIRST.txt" 2>&1
log "membership_structure done"
