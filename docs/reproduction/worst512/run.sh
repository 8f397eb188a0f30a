#!/usr/bin/env bash
# The worst-case LSTM (lstm.py:reproduce_worst, T = 128, 5,000 canaries) with 512 shadow models on one GPU: trained,
# then the paired model-count sweep (shadow_sweep on one random subset of each m = 64, 128, 256, 448 and all 512,
# every model scored leave-one-out among the m, independent shared - univariate shared and OAS shared - univariate
# shared with paired canary-bootstrap intervals at 0.1% and 0.01% FPR), then evaluate and paper_table on all 512 and
# membership_structure on the first 64. Everything is scored on the GPU (--backend=jax: every IN count of a subset in
# one traced-count program). Outputs (tables, JSON, figures, logs) go to $OUT; the run folders stay in $RUNS (1.3 GB
# of losses at 512 models). Run again after a stop (the same $RUNS), it resumes: training at the first unfinished
# group, the sweep at the first unfinished subset.
# Run from the project root: OUT=out RUNS=/tmp/runs bash docs/reproduction/worst512/run.sh
# (CONFIG, MODELS, GROUP, SWEEP_COUNTS, N_BOOT and BACKEND override the setting for a dry run on a CPU.)
set -u
OUT=${OUT:?set OUT}; RUNS=${RUNS:-/tmp/runs}
CONFIG=${CONFIG:-experiments/configs/lstm.py:reproduce_worst}; MODELS=${MODELS:-512}; GROUP=${GROUP:-64}
SWEEP_COUNTS=${SWEEP_COUNTS:-64,128,256,448,512}; N_BOOT=${N_BOOT:-1000}; BACKEND=${BACKEND:-jax}
PY=${PY:-python3}
mkdir -p "$OUT" "$RUNS"
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }
RUN=$RUNS/worst$MODELS
log "train $MODELS models ($CONFIG, groups of $GROUP)"
$PY -m experiments.train_shadows --config="$CONFIG" --config.shadow.num_models="$MODELS" \
  --config.shadow.group_size="$GROUP" --config.population.size=0 --run_dir="$RUN" --noevaluate --noprogress \
  2>&1 | grep -v -i warn | tail -20 > "$OUT/train.txt"
cp "$RUN/config.json" "$OUT/train_config.json"
log "trained"
# the sweep's files in $RUNS first: run again after a stop, it reads back the subsets it had finished
$PY -m experiments.shadow_sweep --run_dir="$RUN" --out_dir="$RUN/sweep" --backend="$BACKEND" --counts="$SWEEP_COUNTS" \
  --draws=1 --fpr=1e-3 --variants=univariate-shared,independent-shared,oas-shared \
  --pairs=independent-shared:univariate-shared,oas-shared:univariate-shared --pair_fprs=0.001,0.0001 \
  --n_boot="$N_BOOT" --noprogress > "$OUT/shadow_sweep.txt" 2>&1
log "paired sweep done (rc $?)"
cp -r "$RUN/sweep/." "$OUT/"
$PY -m experiments.evaluate --run_dir="$RUN" --backend="$BACKEND" --noprogress > "$OUT/evaluate_m$MODELS.txt" 2>&1
$PY -m experiments.paper_table --run_dir="$RUN" --setting=lstm_worst --noprogress > "$OUT/paper_table_m$MODELS.txt" 2>&1
mkdir -p "$OUT/m$MODELS"; cp "$RUN"/*.md "$RUN"/*.json "$RUN"/*.png "$OUT/m$MODELS/" 2>/dev/null
log "m = $MODELS evaluated"
FIRST=$(( MODELS < 64 ? MODELS / 2 : 64 ))
$PY -m experiments.partial_run --run_dir="$RUN" --out_run_dir="${RUN}_m$FIRST" --num_models=$FIRST > /dev/null \
  && $PY -m experiments.membership_structure --run_dir="${RUN}_m$FIRST" --gaps=1,1.5,2,4 --noprogress \
    --out_dir="$OUT/membership_structure_m$FIRST" > "$OUT/membership_structure_m$FIRST.txt" 2>&1
log "membership_structure done"
