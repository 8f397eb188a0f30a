"""Per-token statistics of causal LMs on a set of texts: for the pretraining-data attacks, or as a run folder.

python -m experiments.extract_tokens --model=RUN_DIR/base_model --texts=texts.jsonl --out_dir=DIR
--model is a Hugging Face GPT-NeoX folder or hub id; --texts a JSONL file of {"text": ...} rows or a plain text
file (one text per line). Writes token_ids.npy [N, T] int32, mask.npy [N, T] bool (the attention mask: True at every
token), lp.npy, mu.npy, sigma.npy [N, T] float32 (lp = ln p(t_i | t_<i); position 0 and padding are NaN), top1.npy [N, T]
bool (the model's top-1 token is t_i; False where lp is NaN) and texts.json.

python -m experiments.extract_tokens --run_arrays --model=M0,M1,... --texts=canaries.jsonl --out_dir=RUN [--keep=K.npy]
writes run-folder arrays instead: losses.npy [M, N, T] float32 (-lp, one row per model), mask.npy [N, T] bool (True
only where a loss is scored: position 0 and padding are False), top1.npy [M, N, T], canaries.npy, config.json, and
with --keep the membership matrix keep.npy [M, N]: a run folder for `experiments.evaluate`, or target losses for an attack.
"""

import os

from absl import app
from absl import flags
from absl import logging

from experiments import cli
from lira.errors import InputError

FLAGS = flags.FLAGS
flags.DEFINE_list("model", None, "Hugging Face GPT-NeoX folder or hub id; several (comma-separated) with --run_arrays.")
flags.DEFINE_string("tokenizer", None, "tokenizer.json, a folder holding one, or a hub id (default: the first model's).")
flags.DEFINE_string("texts", None, "JSONL file with a 'text' field per row, or a text file with one text per line "
                    "(or wikimia:LENGTH, mimir:DOMAIN).")
flags.DEFINE_string("out_dir", None, "Folder for the arrays.")
flags.DEFINE_integer("max_length", 128, "Texts are truncated to this many tokens.")
cli.check_range("max_length", 2)  # position 0 has no loss (nothing before it): one token scores nothing
flags.DEFINE_integer("batch_size", 16, "Texts per forward pass.")
cli.check_range("batch_size", 1)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.DEFINE_bool("run_arrays", False, "Write run-folder arrays (losses [M, N, T], scored mask) instead of lp/mu/sigma.")
flags.DEFINE_string("keep", None, "With --run_arrays: keep.npy [M, N] (True = text n was in model m's training data).")
flags.DEFINE_bool("overwrite", False, "With --run_arrays: replace a run already in --out_dir.")
flags.DEFINE_bool("progress", True, "Show a progress bar over the models (with several --model values).")
flags.mark_flags_as_required(["model", "texts", "out_dir"])


def check_flags(num_texts):
  """Everything that can be checked before a model is loaded; returns keep_MxN or None."""
  import numpy as np
  import run_folder
  models = FLAGS.model
  if not FLAGS.run_arrays and (len(models) != 1 or FLAGS.keep):
    raise app.UsageError("several --model values and --keep need --run_arrays (lp/mu/sigma are written per model)")
  keep_MxN = None
  if FLAGS.keep:
    keep_MxN = run_folder.load_npy(FLAGS.keep)
    if keep_MxN.shape != (len(models), num_texts) or keep_MxN.dtype != bool:
      raise InputError(f"--keep={FLAGS.keep}: expected bool [M, N] = [{len(models)}, {num_texts}] (one row per "
                       f"--model, one column per text), got {keep_MxN.dtype} {list(keep_MxN.shape)}")
  if FLAGS.run_arrays and not FLAGS.overwrite:
    run_folder.check_no_run(FLAGS.out_dir)
  run_folder.check_writable(FLAGS.out_dir, "choose another --out_dir")
  return None if keep_MxN is None else np.asarray(keep_MxN, bool)


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:  # jax's INFO lines (its TPU probe on every run) are noise here; -v 0 shows them
    logging.set_verbosity(logging.WARNING)
  import numpy as np
  from tqdm import tqdm
  import run_folder
  from run_folder import names
  from models import hf_convert
  from training import data as data_lib
  from training import per_token
  from training.pretraining import mia_data
  texts = mia_data.load_source(FLAGS.texts)[0]  # the texts reader every command shares
  keep_MxN = check_flags(len(texts))
  tokenizer = data_lib.load_tokenizer(FLAGS.tokenizer or FLAGS.model[0])  # before the (possibly long) model load
  ids_NxT, mask_NxT = per_token.encode_batch(tokenizer, texts, FLAGS.max_length)
  out = FLAGS.out_dir
  lp_MxNxT, top1_MxNxT = [], []
  for name in tqdm(FLAGS.model, desc="models", unit="model", disable=not FLAGS.progress or len(FLAGS.model) == 1):
    module = hf_convert.from_pretrained(name, dtype=FLAGS.dtype)
    if ids_NxT.max() >= module.config.vocab_size:
      raise InputError(f"the tokenizer gives id {ids_NxT.max()} but {name} embeds {module.config.vocab_size}")
    lp, mu, sigma, top1 = per_token.causal_lm_statistics(module, ids_NxT, mask_NxT, FLAGS.batch_size)
    lp_MxNxT.append(lp)
    top1_MxNxT.append(top1)
  if not FLAGS.run_arrays:
    for name, array in ((names.TOKEN_IDS, ids_NxT), (names.MASK, mask_NxT), (names.FEATURE_FILES["lp"], lp),
                        (names.MU, mu), (names.SIGMA, sigma), (names.TOP1, top1)):
      run_folder.save_npy(os.path.join(out, name), array)
    run_folder.save_json(os.path.join(out, names.TEXTS), {"model": FLAGS.model[0], "texts": texts})
    print(f"{len(texts)} texts, up to {ids_NxT.shape[1]} tokens: lp, mu, sigma, top1 written to {out}")
    return
  scored_NxT = np.isfinite(lp_MxNxT[0])  # position 0 and padding are NaN: not scored
  loss_MxNxT = -np.stack(lp_MxNxT).astype(np.float32)  # NaN where not scored
  config = {"source": "experiments.extract_tokens", "models": FLAGS.model, "texts": os.path.abspath(FLAGS.texts),
            "tokenizer": FLAGS.tokenizer or FLAGS.model[0], "max_length": FLAGS.max_length, "dtype": FLAGS.dtype}
  # Without --keep a replaced run's keep.npy is removed: it would claim a membership of the new losses.
  run_folder.save_run(out, {names.CANARIES: ids_NxT, names.MASK: scored_NxT, names.KEEP: keep_MxN,
                            names.TOP1: np.stack(top1_MxNxT), names.LOSSES: loss_MxNxT}, config)
  M, N, T = loss_MxNxT.shape
  print(f"{N} texts, up to {T} tokens, {M} model(s): losses.npy [M, N, T], mask.npy (scored positions)"
        f"{', keep.npy' if keep_MxN is not None else ''} written to {out}")


if __name__ == "__main__":
  cli.run(main)
