"""Which tokens of a shadow run's canaries carry the leakage: token-level InfoRMIA per token, the top canaries' tokens
coloured by their score.

python -m experiments.token_map --run_dir=DIR [--top=8] [--out_dir=DIR]
Scores every (model, canary, token) leave-one-out with token-level InfoRMIA (attacks/informia.py: model m the target,
the other M - 1 its reference models, the run's population as the reference sample; online, balanced counts, every
position its own unit), then per canary the mean token score over its IN target models and over its OUT ones
(lira/reports/token_map_report.py). Writes token_map_informia.{json,md,png} and token_scores_informia.npy [M, N, U]
float64 (bits; NaN where a unit is not scored), and prints the table. The top canaries are those whose IN models score
their tokens highest above their OUT models (the mean gap over their tokens).
"""

import os

from absl import flags

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "A shadow run folder with its population (losses.npy, keep.npy, "
                    "population_losses.npy).")
flags.DEFINE_integer("top", 8, "How many canaries the figure and the table show (those that leak most).")
cli.check_range("top", 1)
flags.DEFINE_string("out_dir", None, "Where token_map_informia.* and token_scores_informia.npy go; default the run "
                    "folder.")
flags.DEFINE_bool("progress", True, "Accepted, as by every command (nothing to show).")
flags.mark_flag_as_required("run_dir")

ATTACK = "informia_tokens"


def main(argv):
  del argv
  from attacks import informia
  from attacks import shadow
  from lira import rmia
  from lira.reports import provenance
  from lira.reports import token_map_report as token_map
  import run_folder

  run = shadow.ShadowRun.load(FLAGS.run_dir)
  options = rmia.RMIA.named("rmia_tokens", run.scoring)  # the scoring's defaults: no reduction, balanced counts
  pop_MxZxT, pop_mask_ZxT = run.population()  # a run without one is refused here, saying how to add it
  s_MxNxU, valid_NxU = informia.token_scores(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, options, mask_NxT=run.mask_NxT,
                                             pop_mask_ZxT=pop_mask_ZxT, on_undefined="nan")
  N, U = valid_NxU.shape
  texts = _tokens(FLAGS.run_dir, N, U)
  config = run_folder.load_config(FLAGS.run_dir)
  settings = {"reduction": options.reduction, "balance_counts": options.balance_counts, "top": FLAGS.top}
  report = token_map.build(s_MxNxU, run.keep_MxN, valid_NxU, texts, FLAGS.top, ATTACK,
                           provenance.run_description(FLAGS.run_dir, config), settings)
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir, "choose another --out_dir")
  paths = {ext: os.path.join(out_dir, f"token_map_informia.{ext}") for ext in ("json", "md", "png")}
  scores_path = os.path.join(out_dir, "token_scores_informia.npy")
  run_folder.save_npy(scores_path, s_MxNxU)
  run_folder.save_json(paths["json"], report)
  run_folder.save_text(paths["md"], token_map.markdown(report))
  M = s_MxNxU.shape[0]
  title = (f"{report['run']}: token-level InfoRMIA of the {len(report['top'])} canaries that leak most (M = {M} "
           f"models, leave-one-out)\ncell colour: the token's gap, mean score over the canary's IN models - over "
           "its OUT models, bits")
  run_folder.save_figure(paths["png"], token_map.figure(report, title))
  print(token_map.markdown(report))
  print(provenance.wrote([scores_path] + list(paths.values())))


def _tokens(run_dir, N, U):
  """Each canary's tokens as strings (canaries.npy decoded token by token with tokenizer.json), or None when the
  run has no tokenizer or its units are not its positions (a group:K reduction)."""
  import numpy as np
  import run_folder
  paths = [os.path.join(run_dir, n) for n in (run_folder.names.CANARIES, run_folder.names.TOKENIZER)]
  if not all(os.path.exists(p) for p in paths):
    return None
  ids_NxT = run_folder.load_npy(paths[0])
  if ids_NxT.ndim != 2 or ids_NxT.shape != (N, U):
    return None
  import tokenizers
  tokenizer = tokenizers.Tokenizer.from_file(paths[1])
  vocabulary = {int(i): _readable(tokenizer, int(i)) for i in np.unique(ids_NxT)}
  return [[vocabulary[int(i)] for i in row] for row in ids_NxT]


def _readable(tokenizer, token_id):
  """A token as text: its decoded string, or, where that is part of a character or a control character (a byte-level
  BPE piece), its vocabulary entry; what is still not printable is escaped ('\\x08')."""
  text = tokenizer.decode([token_id])
  if "\ufffd" in text or not text.replace(" ", "").isprintable() or not text:
    text = tokenizer.id_to_token(token_id) or text
  return text if text.replace(" ", "").isprintable() else text.encode("unicode_escape").decode("ascii")


if __name__ == "__main__":
  cli.run(main)
