"""Features folder for the pretraining-data attacks: every per-token array they read, computed once with the model.

python -m experiments.extract_features --model=FOLDER_OR_HUB_ID --texts=SOURCE --out_dir=DIR
    [--shots=S [--ensemble=G]] [--prefix_texts=FILE] [--pairs] [--reference_model=...] [--neighbours=...]
A shadow run's model (--model=RUN_DIR --model_id=M) reads BOS first, as in training, so position 0 is scored too.
SOURCE: a JSONL file of {"text": ..., "label": 1 | 0} rows ("input" is read as "text"; no label = unknown), a plain
text file (one text per line, labels unknown), wikimia:32|64|128|256 (Hugging Face), or mimir:DOMAIN[:SPLIT].
--shots draws S known non-members (and S members, Con-ReCall's member prefix) from the texts as ReCaLL prefixes and
removes them from the evaluated set; --prefix_texts gives the non-member shots instead (evaluated copies removed).
--neighbours: offline (words swapped for words drawn from the texts' own word frequencies, nothing downloaded),
fill-mask:MODEL (a local masked LM or hub id, MIMIR's recipe), mimir (the neighbours MIMIR publishes with
--texts=mimir:...), or a JSON file holding one list of neighbour texts per input text.
Then: python -m experiments.pretrain_attacks --features=DIR. Killed half-way, the same command resumes.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from experiments import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("model", None, "Causal LM: a Hugging Face GPT-NeoX folder or hub id, or a shadow run folder "
                    "(LSTM or GPT-NeoX) with --model_id.")
flags.DEFINE_integer("model_id", None, "With a shadow run folder as --model: which of its models.")
cli.check_range("model_id", 0)
flags.DEFINE_string("tokenizer", None, "tokenizer.json, a folder holding one, or a hub id (default: the model's).")
flags.DEFINE_string("texts", None, "JSONL / text file, wikimia:LENGTH or mimir:DOMAIN[:SPLIT].")
flags.DEFINE_string("out_dir", None, "The features folder.")
flags.DEFINE_integer("max_length", 128, "Texts are truncated to this many tokens.")
cli.check_range("max_length", 1)
flags.DEFINE_integer("batch_size", 16, "Texts per forward pass.")
cli.check_range("batch_size", 1)
flags.DEFINE_integer("shots", 0, "ReCaLL prefix shots (known non-members), drawn from the labelled texts unless "
                     "--prefix_texts is given; 0 = no ReCaLL / Con-ReCall features.")
cli.check_range("shots", 0)
flags.DEFINE_string("prefix_texts", None, "File of known non-member texts to use as the ReCaLL prefix.")
flags.DEFINE_integer("ensemble", 0, "Split the shots into this many disjoint prefixes (ReCaLL's ensemble; 0 = none).")
cli.check_range("ensemble", 0)
flags.DEFINE_string("separator", "", "Text between shots and before the evaluated text (token level).")
flags.DEFINE_bool("pairs", False, "EM-MIA's N x N conditional lp (every evaluated text as a prefix of every other).")
flags.DEFINE_string("reference_model", None, "Reference model (folder or hub id) for the Reference attack.")
flags.DEFINE_string("neighbours", None, "offline, fill-mask:MODEL, mimir, or a JSON file of neighbour lists.")
flags.DEFINE_integer("neighbour_count", 25, "Neighbours per text (J; MIMIR publishes 25).")
cli.check_range("neighbour_count", 1)
flags.DEFINE_float("neighbour_fraction", 0.05, "Fraction of words a neighbour swaps (MIMIR: 0.05).")
cli.check_range("neighbour_fraction", 0, 1, low_open=True)
flags.DEFINE_integer("seed", 0, "Seed of the prefix draw and the neighbours.")
cli.check_range("seed", 0)
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.DEFINE_bool("overwrite", False, "Rebuild a folder that holds features made with other settings.")
flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["model", "texts", "out_dir"])


def neighbours_of(texts, source_neighbours):
  """(neighbour lists, method name) for --neighbours, or (None, None)."""
  import json
  import os
  from lira.errors import InputError
  from training.pretraining import neighbours as neighbours_lib
  spec = FLAGS.neighbours
  if not spec:
    return None, None
  if spec == "mimir":
    if source_neighbours is None:
      raise InputError("--neighbours=mimir needs --texts=mimir:DOMAIN[:SPLIT] with MIMIR's neighbour files")
    return source_neighbours, neighbours_lib.MIMIR
  if os.path.isfile(spec):
    with open(spec) as f:
      lists = json.load(f)
    return neighbours_lib.check_neighbours(lists, len(texts), FLAGS.neighbour_count), f"file:{os.path.basename(spec)}"
  return neighbours_lib.neighbours_for(spec, texts, FLAGS.neighbour_count, FLAGS.neighbour_fraction, FLAGS.seed)


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:  # jax's INFO lines (its TPU probe on every run) are noise here; -v 0 shows them
    logging.set_verbosity(logging.WARNING)
  from training.pretraining import feature_extraction
  from training.pretraining import mia_data
  texts, labels, source_neighbours = mia_data.load_source(FLAGS.texts)
  prefix_texts = mia_data.load_source(FLAGS.prefix_texts)[0] if FLAGS.prefix_texts else None
  if FLAGS.ensemble and not (FLAGS.shots or prefix_texts):
    raise app.UsageError("--ensemble needs --shots or --prefix_texts")
  neighbours, method = neighbours_of(texts, source_neighbours)
  module = bos_id = None
  model, tokenizer = FLAGS.model, FLAGS.tokenizer
  if FLAGS.model_id is not None:  # a shadow run's model: its own tokenizer, and BOS first as in training
    from training import shadow_model
    module, _, bos_id = shadow_model.load_shadow_model(FLAGS.model, FLAGS.model_id)
    model, tokenizer = f"{FLAGS.model} (shadow model {FLAGS.model_id})", tokenizer or FLAGS.model
  out = feature_extraction.build_features(
      FLAGS.out_dir, model, texts, labels, tokenizer=tokenizer, max_length=FLAGS.max_length,
      batch_size=FLAGS.batch_size, prefix_shots=FLAGS.shots, prefix_texts=prefix_texts, ensemble=FLAGS.ensemble,
      separator=FLAGS.separator, pairs=FLAGS.pairs, reference_model=FLAGS.reference_model, neighbours=neighbours,
      neighbour_method=method, seed=FLAGS.seed, dtype=FLAGS.dtype, overwrite=FLAGS.overwrite,
      progress=FLAGS.progress, argv=sys.argv, module=module, bos_id=bos_id)
  print(feature_extraction.summary(out))


if __name__ == "__main__":
  cli.run(main, resumes=True)
