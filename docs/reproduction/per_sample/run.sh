#!/usr/bin/env bash
# Which canaries leak, on the README's CPU default run and an independent copy of it, and on a synthetic run whose
# leaking canaries are planted (docs/per_sample.md discusses the numbers). The copy differs in shadow.model_seed alone:
# the same 1,000 canaries, another membership (keep.npy) and another training randomness. Tables, CSVs and figures go
# to $OUT (default docs/reproduction/per_sample), the run folders to $RUNS (default runs). Training resumes.
# Run from the project root: bash docs/reproduction/per_sample/run.sh
set -eu
OUT=${OUT:-docs/reproduction/per_sample}; RUNS=${RUNS:-runs}; PY=${PY:-python}
$PY -m experiments.train_shadows --run_dir="$RUNS/lstm_worst" --noevaluate --noprogress > /dev/null
$PY -m experiments.train_shadows --run_dir="$RUNS/lstm_worst_model_seed1" --config.shadow.model_seed=1 --noevaluate \
  --noprogress > /dev/null
$PY -m experiments.per_sample --run_dir="$RUNS/lstm_worst" --compare_run_dir="$RUNS/lstm_worst_model_seed1" \
  --out_dir="$OUT/lstm_worst" --noprogress > "$OUT/lstm_worst.txt"
$PY -m experiments.make_synthetic --run_dir="$RUNS/synthetic_planted" --num_models=32 --num_canaries=2000 \
  --frac_canaries=0.05 --shift=2 --population_size=0 --overwrite > /dev/null
$PY -m experiments.per_sample --run_dir="$RUNS/synthetic_planted" --out_dir="$OUT/synthetic_planted" --noprogress \
  > "$OUT/synthetic_planted.txt"
