"""Per-token statistics of a causal LM on a set of texts, for the pretraining-data attacks.

python -m experiments.extract_tokens --model=RUN_DIR/base_model --texts=texts.jsonl --out_dir=DIR
--model is a Hugging Face GPT-NeoX folder or hub id; --texts a JSONL file of {"text": ...} rows or a plain text
file (one text per line). Writes token_ids.npy [B, T] int32, mask.npy [B, T] bool, lp.npy, mu.npy, sigma.npy
[B, T] float32 (lp = ln p(t_i | t_<i); position 0 and padding are NaN) and texts.json.
"""

import json
import os

from absl import app
from absl import flags

from experiments import cli
from lira.errors import InputError

FLAGS = flags.FLAGS
flags.DEFINE_string("model", None, "Hugging Face GPT-NeoX folder or hub id.")
flags.DEFINE_string("tokenizer", None, "tokenizer.json, a folder holding one, or a hub id (default: --model's).")
flags.DEFINE_string("texts", None, "JSONL file with a 'text' field per row, or a text file with one text per line.")
flags.DEFINE_string("out_dir", None, "Folder for the arrays.")
flags.DEFINE_integer("max_length", 128, "Texts are truncated to this many tokens.")
flags.DEFINE_integer("batch_size", 16, "Texts per forward pass.")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.mark_flags_as_required(["model", "texts", "out_dir"])


def read_texts(path):
  with open(path) as f:
    lines = [line.rstrip("\n") for line in f if line.strip()]
  if not path.endswith(".jsonl"):
    return lines
  texts = []
  for i, line in enumerate(lines):
    row = json.loads(line)
    if "text" not in row:
      raise InputError(f"{path}: row {i} has no 'text' field")
    texts.append(row["text"])
  return texts


def main(argv):
  del argv
  from lira import rundir
  from models import gpt_neox
  from training import data as data_lib
  from training import extract
  texts = read_texts(FLAGS.texts)
  if not texts:
    raise app.UsageError(f"--texts={FLAGS.texts} holds no texts")
  tokenizer = data_lib.load_tokenizer(FLAGS.tokenizer or FLAGS.model)  # before the (possibly long) model load
  ids_BxT, mask_BxT = extract.encode_batch(tokenizer, texts, FLAGS.max_length)
  module = gpt_neox.from_pretrained(FLAGS.model, dtype=FLAGS.dtype)
  if ids_BxT.max() >= module.config.vocab_size:
    raise InputError(f"the tokenizer gives id {ids_BxT.max()} but {FLAGS.model} embeds {module.config.vocab_size}")
  lp, mu, sigma = extract.causal_lm_statistics(module, ids_BxT, mask_BxT, FLAGS.batch_size)
  os.makedirs(FLAGS.out_dir, exist_ok=True)
  for name, array in (("token_ids", ids_BxT), ("mask", mask_BxT), ("lp", lp), ("mu", mu), ("sigma", sigma)):
    rundir.save_npy(os.path.join(FLAGS.out_dir, f"{name}.npy"), array)
  rundir.save_json(os.path.join(FLAGS.out_dir, "texts.json"), {"model": FLAGS.model, "texts": texts})
  print(f"{len(texts)} texts, up to {ids_BxT.shape[1]} tokens: lp, mu, sigma written to {FLAGS.out_dir}")


if __name__ == "__main__":
  cli.run(main)
