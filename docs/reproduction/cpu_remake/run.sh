#!/usr/bin/env bash
# A worst-case run re-made on a 2-core CPU (default: the LSTM, lstm.py:reproduce_worst: 64 models, 5,000 canaries,
# T = 128; the GPT-NeoX: CONFIG=experiments/configs/pythia.py:reproduce_worst NAME=reproduce_pythia_worst_cpu N=2500
# SETTING=pythia_worst OUT=docs/reproduction/cpu_remake_pythia), then, on that run: the six-variant evaluation and
# paper_table; membership_structure with the IN-OUT gap scaled x1, x1.5, x2, x4, one draw per cell (experiment 1 of
# the central question); the pre-registered kappa rule (REPRODUCTION.md, "The kappa exclusion, pre-registered").
# Tables and figures go to $OUT (default docs/reproduction/cpu_remake), the run folders to $RUNS (default runs).
# Resumable: training resumes from its folder, membership_structure from its cells.
# Run from the project root: bash docs/reproduction/cpu_remake/run.sh
set -eu
# (CONFIG, NAME, N (the canary count of the random control) and SETTING (paper_table's column) choose the run.)
OUT=${OUT:-docs/reproduction/cpu_remake}; RUNS=${RUNS:-runs}; PY=${PY:-python}
CONFIG=${CONFIG:-experiments/configs/lstm.py:reproduce_worst}; N=${N:-5000}; SETTING=${SETTING:-lstm_worst}
R=$RUNS/${NAME:-reproduce_lstm_worst_cpu}
mkdir -p "$OUT"
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }
log "train (resumes)"
$PY -m experiments.train_shadows --config="$CONFIG" --config.population.size=0 \
  --run_dir="$R" --noevaluate --noprogress > /dev/null
cp "$R/config.json" "$OUT/train_config.json"
log "evaluate"
$PY -m experiments.evaluate --run_dir="$R" --noprogress > /dev/null
cp "$R/results.md" "$OUT/results.md"; cp "$R/roc.png" "$OUT/roc.png"
$PY -m experiments.paper_table --run_dir="$R" --setting="$SETTING" --noprogress > /dev/null
cp "$R/paper_table_$SETTING.md" "$OUT/paper_table.md"
log "the kappa rule (gaps 1, one draw, as written)"
$PY -m experiments.membership_structure --run_dir="$R" --gaps=1 --draws=1 --out_dir="${R}_structure" --noprogress \
  > /dev/null
C=${R}_structure/membership_structure_gaps-1_draws-1.csv
cp "$C" "$OUT/kappa_structure.csv"
TOP=$(tail -n +2 "$C" | sort -t, -k5 -g -r | head -10 | cut -d, -f1 | paste -sd,)
RANDOM10=$($PY -c "import numpy as np; print(','.join(map(str, np.random.default_rng(0).choice($N, 10, replace=False))))")
echo "top 10 kappa: $TOP" > "$OUT/kappa_dropped.txt"; echo "random 10: $RANDOM10" >> "$OUT/kappa_dropped.txt"
part() {  # part NAME [FLAGS]: R as a run of its own (kept where it was made before)
  [ -f "${R}_$1/losses.npy" ] || $PY -m experiments.partial_run --run_dir="$R" --out_run_dir="${R}_$1" "${@:2}" > /dev/null
}
cp "$OUT/paper_table.md" "$OUT/paper_table_all.md"  # R itself: all canaries
part no_kappa10 --drop_canaries="$TOP"
part no_random10 --drop_canaries="$RANDOM10"
for d in no_kappa10 no_random10; do
  $PY -m experiments.evaluate --run_dir="${R}_$d" --noprogress > /dev/null
  $PY -m experiments.paper_table --run_dir="${R}_$d" --setting="$SETTING" --noprogress > /dev/null
  cp "${R}_$d/paper_table_$SETTING.md" "$OUT/paper_table_$d.md"
  log "kappa rule: $d"
done
log "membership_structure, gaps x1, x1.5, x2, x4, one draw per cell"
$PY -m experiments.membership_structure --run_dir="$R" --gaps=1,1.5,2,4 --draws=1 --noprogress > /dev/null
for f in md png; do cp "$R/membership_structure/membership_structure_gaps-1+1.5+2+4_draws-1.$f" "$OUT/membership_structure.$f"; done
log "done"
