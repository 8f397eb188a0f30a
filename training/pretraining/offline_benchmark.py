"""The offline pretraining-data MIA benchmark: a tiny GPT-NeoX pretrained on chitchat conversations with known
members, HF checkpoints after several epochs, a reference model, and the evaluation text sets as JSONL.

Splits (by a seeded permutation of the usable conversations, each cut to its first `max_words` words and deduplicated
after cutting): evaluated non-members (held out), the reference model's corpus, and the target corpus (everything else,
all trained on); evaluated members are drawn from the target documents that packing keeps whole. The
distribution-shift split pairs the same members with English paragraphs from the docstrings of a fixed list of Python
standard-library modules (real text, nothing downloaded, but clearly another distribution: MIMIR's pitfall, Duan et
al. 2024). Every text set is disjoint from every other (tests/training/pretraining/test_offline_benchmark.py).

Pretraining is one run that saves a Hugging Face folder after each checkpoint epoch, plus the parameters and AdamW
state of the latest one: a killed run resumes from its last saved epoch (the epochs in flight are lost), and the
example order depends only on (seed, epoch), so a resumed run takes the same steps as an uninterrupted one.
"""

import ast
import io
import json
import os
import re
import sys
import sysconfig
import time

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

import models
import run_folder
from lira.errors import InputError
from training import data as data_lib
from training import trainer

# Standard-library modules whose docstrings make the shifted non-members; pure-Python modules present on every
# CPython >= 3.11 install (no tkinter, curses or modules that print on import). Docstrings change between Python
# versions, so the shift texts are deterministic for a given Python version (recorded in splits.json).
STDLIB_MODULES = (
    "argparse", "asyncio", "calendar", "collections", "concurrent.futures", "configparser", "contextlib", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "fractions", "functools", "gettext",
    "glob", "gzip", "heapq", "hmac", "html.parser", "http.client", "http.server", "imaplib", "inspect", "ipaddress",
    "json", "logging", "mailbox", "multiprocessing", "optparse", "os", "pathlib", "pickle", "pdb", "platform",
    "pprint", "queue", "random", "re", "shutil", "smtplib", "socket", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "traceback", "typing", "unittest",
    "urllib.parse", "urllib.request", "uuid", "warnings", "weakref", "zipfile")

SPLIT_FILES = {"main": "eval_main.jsonl", "shift": "eval_shift.jsonl"}


def cut_words(text, max_words):
  """`text` up to the end of its max_words-th whitespace-separated word (line breaks inside are kept)."""
  ends = [m.end() for m in re.finditer(r"\S+", text)]
  return text if len(ends) <= max_words else text[:ends[max_words - 1]]


def _word_count(text):
  return len(text.split())


def chitchat_documents(conversations, min_words, max_words):
  """Conversation texts with at least min_words words, cut to max_words, deduplicated (first kept), in input order."""
  seen, docs = set(), []
  for text in data_lib.conversation_texts(conversations):
    if _word_count(text) >= min_words:
      doc = cut_words(text, max_words)
      if doc not in seen:
        seen.add(doc)
        docs.append(doc)
  return docs


def _rst_clean(paragraph):
  """One line of plain English from a reStructuredText paragraph (roles, literals and emphasis marks dropped)."""
  text = re.sub(r":[\w:]+:`~?([^`]*)`", r"\1", paragraph)
  text = re.sub(r"[`*]", "", text)
  return " ".join(text.split())


def _docstrings(name):
  """Docstrings of a module's source file: the module's, then its classes' and functions' in name order (each class
  followed by its methods'). Read with `ast` from the file, never imported, so they do not depend on what else the
  process has imported or patched (an imported module's attributes do)."""
  base = os.path.join(sysconfig.get_paths()["stdlib"], *name.split("."))  # frozen modules (os) have a file too
  path = next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)
  if path is None:
    raise InputError(f"the standard-library module {name} has no Python source in {sysconfig.get_paths()['stdlib']}")
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  defs = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
  docs = [ast.get_docstring(tree)]
  for node in sorted((n for n in tree.body if isinstance(n, defs)), key=lambda n: n.name):
    docs.append(ast.get_docstring(node))
    if isinstance(node, ast.ClassDef):
      docs += [ast.get_docstring(m) for m in sorted((m for m in node.body if isinstance(m, defs[1:])),
                                                    key=lambda m: m.name)]
  return [d for d in docs if d]


def stdlib_paragraphs(modules=STDLIB_MODULES, min_words=8):
  """English paragraphs of the docstrings of `modules`: sentences only (capital first, full stop last, >= 80% plain
  words, no doctest or literal blocks), deduplicated, in module order."""
  seen, out = set(), []
  for name in modules:
    for doc in _docstrings(name):
      for raw in re.split(r"\n\s*\n", doc):
        if ">>>" in raw or "::" in raw:
          continue
        p = _rst_clean(raw)
        words = p.split()
        if (len(words) < min_words or not p[0].isupper() or not p.endswith(".")
            or sum(w.strip(".,;:()'\"").isalpha() for w in words) < 0.8 * len(words) or p in seen):
          continue
        seen.add(p)
        out.append(p)
  return out


def shift_texts(paragraphs, word_counts, seed):
  """One text per entry of word_counts: consecutive paragraphs (seeded order, each used once) joined by newlines
  until the count is reached, cut to exactly that many words (the members' lengths)."""
  order = np.random.default_rng([seed, 1]).permutation(len(paragraphs))
  texts, i = [], 0
  for count in word_counts:
    parts = []
    while sum(map(_word_count, parts)) < count:
      if i == len(order):
        raise InputError(f"the stdlib docstrings give {len(paragraphs)} paragraphs, too few for "
                         f"{len(word_counts)} shifted texts; lower data.num_eval")
      parts.append(paragraphs[order[i]])
      i += 1
    texts.append(cut_words("\n".join(parts), count))
  return texts


def split_documents(docs, num_eval, num_reference, max_target, seed):
  """(target, nonmembers, reference) document lists from a seeded permutation: non-members first, then the
  reference corpus, then the target corpus (the rest, at most max_target if > 0)."""
  if num_eval < 1 or num_reference < 1:
    raise InputError(f"data.num_eval and data.num_reference must be >= 1, got {num_eval} and {num_reference}")
  need = 2 * num_eval + num_reference
  if len(docs) < need:
    raise InputError(f"{len(docs)} usable conversations, fewer than the {need} that data.num_eval={num_eval} and "
                     f"data.num_reference={num_reference} need (plus a target corpus)")
  perm = np.random.default_rng([seed, 0]).permutation(len(docs))
  nonmembers = [docs[i] for i in perm[:num_eval]]
  reference = [docs[i] for i in perm[num_eval:num_eval + num_reference]]
  rest = perm[num_eval + num_reference:]
  target = [docs[i] for i in (rest[:max_target] if max_target else rest)]
  return target, nonmembers, reference


def whole_after_packing(texts, tokenizer, seq_len):
  """bool [len(texts)]: the text's tokens all lie in the chunks data.pack_sequences keeps (it drops the tail)."""
  lengths = np.array([len(e.ids) for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)])
  ends = np.cumsum(np.where(lengths > 0, lengths + 1, 0)) - 1  # each text's exclusive end, before its BOS separator
  stream = int(ends.max(initial=0))  # the stream has no BOS after its last text
  kept = stream // seq_len * seq_len
  return (lengths > 0) & (ends <= kept)


def write_jsonl(path, texts, labels):
  """{"text", "label"} per line (label 1 member, 0 non-member), written atomically."""
  lines = [json.dumps({"text": t, "label": int(y)}, ensure_ascii=False) for t, y in zip(texts, labels, strict=True)]
  run_folder.save_text(path, "".join(line + "\n" for line in lines))


def read_jsonl(path):
  """(texts, labels int8) of a file written by write_jsonl."""
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r["text"] for r in rows], np.array([r["label"] for r in rows], np.int8)


def prepare_data(cfg, out_dir, conversations=None, progress=True):
  """Splits, tokenizer and evaluation JSONL files in out_dir (each written once; a rerun checks they agree)."""
  t0 = time.perf_counter()
  d = cfg.data
  conversations = data_lib.load_chitchat() if conversations is None else conversations
  docs = chitchat_documents(conversations, d.min_words, d.max_words)
  target, nonmembers, reference = split_documents(docs, d.num_eval, d.num_reference, d.max_target, cfg.seed)
  tok_path = os.path.join(out_dir, run_folder.names.TOKENIZER)
  if not os.path.exists(tok_path):
    data_lib.train_bpe_tokenizer(target, cfg.tokenizer.vocab_size, tok_path)  # the target corpus only
  tokenizer = data_lib.load_tokenizer(tok_path)
  whole = np.flatnonzero(whole_after_packing(target, tokenizer, d.seq_len))
  if len(whole) < d.num_eval:
    raise InputError(f"only {len(whole)} target documents survive packing, fewer than data.num_eval={d.num_eval}")
  members = [target[i] for i in np.sort(np.random.default_rng([cfg.seed, 2]).choice(whole, d.num_eval, False))]
  shifted = shift_texts(stdlib_paragraphs(), [_word_count(t) for t in members], cfg.seed)
  sets = {"target_corpus": target, "reference_corpus": reference, "members": members, "nonmembers": nonmembers,
          "shift_nonmembers": shifted}
  for name in ("target_corpus", "reference_corpus"):
    path = os.path.join(out_dir, "corpus", f"{name}.jsonl")
    if not os.path.exists(path):
      write_jsonl(path, sets[name], np.ones(len(sets[name])) if name == "target_corpus" else np.zeros(len(sets[name])))
  evals = {"main": (members + nonmembers, [1] * len(members) + [0] * len(nonmembers)),
           "shift": (members + shifted, [1] * len(members) + [0] * len(shifted))}
  for split, (texts, labels) in evals.items():
    path = os.path.join(out_dir, SPLIT_FILES[split])
    if os.path.exists(path):
      if read_jsonl(path)[0] != texts:
        raise InputError(f"{path} differs from what this config produces (another corpus or Python version?)")
    else:
      write_jsonl(path, texts, labels)
  summary = {name: {"count": len(v), "words_mean": float(np.mean([_word_count(t) for t in v]))}
             for name, v in sets.items()}
  summary["python"] = sys.version.split()[0]
  summary["shift_source"] = {"kind": "Python standard-library docstrings (DISTRIBUTION SHIFT)",
                             "modules": list(STDLIB_MODULES)}
  run_folder.save_json(os.path.join(out_dir, "splits.json"), summary)
  if progress:
    print(f"data: {len(target)} target documents, {len(reference)} reference documents, {len(members)} members "
          f"and {len(nonmembers)} non-members evaluated, {len(shifted)} shifted non-members; vocabulary "
          f"{data_lib.vocab_size(tokenizer)} ({time.perf_counter() - t0:.1f} s)")
  return sets, tokenizer


# ---- pretraining with epoch checkpoints -------------------------------------------------------------------------

def checkpoint_dir(folder, epoch):
  return os.path.join(folder, f"epoch_{epoch}")


def _complete(hf_dir):
  return os.path.exists(os.path.join(hf_dir, run_folder.names.MODEL_CONFIG))  # save_hf_folder writes it last


def _state_path(folder, epoch):
  return os.path.join(folder, "train_state", f"epoch_{epoch}.npz")


def _save_state(folder, epoch, tree):
  """Parameters and AdamW state after `epoch` as one npz of numbered leaves; older states are removed."""
  buf = io.BytesIO()
  np.savez(buf, **{f"leaf_{i:05d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(tree))})
  run_folder.save_bytes(_state_path(folder, epoch), buf.getvalue())
  state_dir = os.path.dirname(_state_path(folder, epoch))
  for name in os.listdir(state_dir):
    if name.endswith(".npz") and name != f"epoch_{epoch}.npz":
      os.remove(os.path.join(state_dir, name))


def _load_state(folder, epoch, like):
  with np.load(_state_path(folder, epoch), allow_pickle=False) as f:
    leaves = [f[f"leaf_{i:05d}"] for i in range(len(f.files))]
  treedef = jax.tree.structure(like)
  if treedef.num_leaves != len(leaves):
    raise InputError(f"{_state_path(folder, epoch)} holds {len(leaves)} arrays, the model needs {treedef.num_leaves}")
  return jax.tree.unflatten(treedef, leaves)


def pretrain(sequences_SxT, folder, *, arch, vocab_size, bos_id, epochs, batch_size, learning_rate, weight_decay,
             seed, tokenizer_file, dtype="float32", progress=True, desc="pretrain"):
  """Train one GPT-NeoX on sequences_SxT for max(epochs) epochs, saving FOLDER/epoch_<e> (a Hugging Face folder)
  after each e in `epochs`; finished checkpoints are kept, and training resumes from the latest saved state."""
  epochs = sorted(set(int(e) for e in epochs))
  if not epochs or epochs[0] < 1:
    raise InputError(f"checkpoint epochs must be >= 1, got {epochs}")
  if len(sequences_SxT) < batch_size:
    raise InputError(f"{len(sequences_SxT)} training sequences, fewer than one batch of {batch_size}")
  paths = [checkpoint_dir(folder, e) for e in epochs]
  if all(_complete(p) for p in paths):
    return paths
  model = models.get_model("gpt_neox", vocab_size=vocab_size, bos_token_id=bos_id, eos_token_id=bos_id, dtype=dtype,
                           **arch)
  params = trainer.init_stack(model, jax.numpy.stack([trainer.model_key(seed, 0)]))
  opt_state = jax.jit(jax.vmap(trainer.make_optimizer(learning_rate, weight_decay).init))(params)
  start = max([e for e in epochs if _complete(checkpoint_dir(folder, e)) and os.path.exists(_state_path(folder, e))],
              default=0)
  if start:
    params, opt_state = _load_state(folder, start, (params, opt_state))
  step = trainer.make_step(model, learning_rate, weight_decay, bos_id, single=True)
  S = len(sequences_SxT)
  steps = -(-S // batch_size)
  bar = tqdm(total=(epochs[-1] - start) * steps, desc=desc, disable=not progress, leave=False, unit="step")
  for epoch in range(start, epochs[-1]):
    slots_SxB = trainer.epoch_slots(np.arange(S), S, batch_size, seed, 0, epoch)
    losses = []
    for slot_B in slots_SxB:
      tokens = sequences_SxT[np.maximum(slot_B, 0)][None]
      weight = (slot_B >= 0).astype(np.float32)[None]
      params, opt_state, loss = step(params, opt_state, tokens, weight)
      if losses:  # one step in flight at most (as trainer.train_group): the bar shows finished steps
        jax.block_until_ready(losses[-1])
      losses.append(loss)
      bar.update(1)
    epoch_loss = float(np.mean(jax.device_get(losses)))
    bar.set_postfix(epoch=epoch + 1, loss=f"{epoch_loss:.3f}")
    if not np.isfinite(epoch_loss):
      raise trainer.TrainingDiverged(f"{desc}: non-finite training loss in epoch {epoch + 1}; lower the learning rate")
    if epoch + 1 in epochs:
      module = nnx.merge(model.graphdef, jax.tree.map(lambda x: x[0], params))
      from models import hf_convert
      hf_convert.save_pretrained(module, checkpoint_dir(folder, epoch + 1), tokenizer_file=tokenizer_file)
      _save_state(folder, epoch + 1, (params, opt_state))
      if progress:
        bar.write(f"{desc}: epoch {epoch + 1} saved (training loss {epoch_loss:.3f})")
  bar.close()
  return paths


def pretrain_models(cfg, out_dir, sets, tokenizer, progress=True):
  """The target (checkpoints at cfg.pretrain.checkpoint_epochs) and the reference model; {name: seconds}."""
  tok_path = os.path.join(out_dir, run_folder.names.TOKENIZER)
  common = dict(arch=dict(cfg.model.arch), vocab_size=data_lib.vocab_size(tokenizer), bos_id=data_lib.bos_id(tokenizer),
                batch_size=cfg.pretrain.batch_size, learning_rate=cfg.pretrain.learning_rate,
                weight_decay=cfg.pretrain.weight_decay, seed=cfg.seed, tokenizer_file=tok_path, dtype=cfg.model.dtype,
                progress=progress)
  seconds = {}
  for name, corpus, epochs in (("target", sets["target_corpus"], cfg.pretrain.checkpoint_epochs),
                               ("reference", sets["reference_corpus"], (cfg.reference.epochs,))):
    t0 = time.perf_counter()
    seq_SxT = data_lib.pack_sequences(corpus, tokenizer, cfg.data.seq_len)
    pretrain(seq_SxT, os.path.join(out_dir, "models", name), epochs=epochs, desc=name, **common)
    seconds[name] = time.perf_counter() - t0
    if progress:
      print(f"{name} model: {len(seq_SxT)} sequences of {cfg.data.seq_len} tokens, epochs {list(epochs)} "
            f"({seconds[name]:.1f} s)")
  return seconds


def target_checkpoint(out_dir, epoch):
  return checkpoint_dir(os.path.join(out_dir, "models", "target"), epoch)


def reference_checkpoint(cfg, out_dir):
  return checkpoint_dir(os.path.join(out_dir, "models", "reference"), cfg.reference.epochs)
