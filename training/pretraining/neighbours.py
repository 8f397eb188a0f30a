"""Neighbour texts for the Neighbourhood attack (Mattern et al. 2023; MIMIR, Duan et al. 2024).

Each generator returns N lists of J strings, deterministic given `seed` (text i draws from
np.random.default_rng([seed, i]), so a text's neighbours do not depend on the batch it came in).
A "word" is a maximal run of \\w characters; a neighbour replaces whole words in place, so the
spaces and punctuation around them are kept and the word count does not change. Both generators
replace k = max(1, int(fraction * n_words)) words per neighbour; fraction = 0.05 is MIMIR's
pct_swap_bert (its paper: "masking percentage 5%").

Three sources, each with the name features.json records under "neighbours.method":
- "mimir": MIMIR's precomputed neighbours (25 per text, BERT, in-place swap), read by
  training.pretraining.mia_data.load_mimir.
- "fill-mask:<model>": any local masked LM through transformers' fill-mask pipeline, following
  MIMIR's BERT recipe (mimir/attacks/neighborhood.py, BertModel with neighbor_strategy "random", the
  one configs/neighbor_gen_new.json uses): for every position, the best of the model's top 6
  candidates that differs from the original, scored p / (1 - p_original) (p_original = 1 taken as
  0.9); 1,000 random draws of k positions, each taking its position's best candidate; the J draws
  with the highest summed score become the neighbours. Departures, each said where it is made:
  MIMIR hides the position by dropout (p = 0.7) on its input embedding, where the pipeline puts the
  mask token in place of the whole word (so this works with any masked LM); MIMIR works on BERT
  word pieces, we on words (a multi-piece word becomes one predicted token); MIMIR reads
  p_original from the full softmax, the pipeline gives only the top 6 (p_original is 0 when the
  original is not among them); MIMIR can keep the same draw several times and gives k = 0 swaps
  (the text itself) when int(0.05 * tokens) = 0, where we keep distinct draws and swap at least one
  word; candidates that are special tokens or not a single word are skipped.
- "offline-unigram": needs nothing downloaded; see offline_neighbours. Weaker than a masked LM.
"""

import collections
import os
import re

import numpy as np

from lira.errors import InputError, MissingFileError, MissingPackageError
from training.pretraining import mia_data

MIMIR = "mimir"
OFFLINE = "offline-unigram"
MIMIR_FRACTION = 0.05  # MIMIR's NeighborhoodConfig.pct_swap_bert
MIMIR_COUNT = 25  # neighbours per text in MIMIR's published files
MIMIR_TOP_K = 6  # candidates per position, torch.topk(..., 6) in MIMIR's BertModel
MIMIR_TRIALS = 1000  # random draws of positions, num_trials in MIMIR's "random" strategy
_WORD = re.compile(r"\w+")


def fill_mask_method(model):
  """The features.json method name of fill-mask neighbours from `model` (a path or hub id)."""
  return f"fill-mask:{model}"


def word_spans(text):
  """(start, end) of every word (maximal run of \\w characters) of text."""
  return [m.span() for m in _WORD.finditer(text)]


def swap_count(n_words, fraction):
  """Words replaced per neighbour: max(1, int(fraction * n_words)), at most n_words."""
  return min(n_words, max(1, int(fraction * n_words)))


def _check_args(texts, count, fraction):
  """InputError for a bad count or fraction, or a text with no word to replace."""
  if not isinstance(count, (int, np.integer)) or count < 1:
    raise InputError(f"neighbour count must be a positive integer, got {count!r}")
  if not 0.0 < fraction <= 1.0:
    raise InputError(f"neighbour fraction must be in (0, 1], got {fraction!r}")
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise InputError(f"text {i} is a {type(t).__name__}, not a string")
    if not _WORD.search(t):
      raise InputError(f"text {i} has no word to replace, so it has no neighbours: {t[:40]!r}")


def _replace(text, spans, words):
  """text with span spans[m] replaced by words[m] (spans sorted and disjoint)."""
  out, prev = [], 0
  for (start, end), w in zip(spans, words):
    out += [text[prev:start], w]
    prev = end
  return "".join(out + [text[prev:]])


def check_neighbours(neighbours, n_texts, count=None):
  """Neighbour lists checked to be N lists of at least `count` strings, cut to the first `count`."""
  if len(neighbours) != n_texts:
    raise InputError(f"{len(neighbours)} neighbour lists for {n_texts} texts")
  lengths = [len(nb) for nb in neighbours]
  count = min(lengths) if count is None else count
  for i, nb in enumerate(neighbours):
    if len(nb) < max(count, 1):
      raise InputError(f"text {i} has {len(nb)} neighbours, fewer than the {max(count, 1)} asked")
    if not all(isinstance(s, str) for s in nb):
      raise InputError(f"text {i}'s neighbours are not all strings")
  return [list(nb[:count]) for nb in neighbours]


def mimir_neighbours(texts, domain, split="ngram_13_0.8", path=None, count=MIMIR_COUNT):
  """MIMIR's precomputed neighbours of each text, matched by the text itself (so any subset or order works)."""
  mimir_texts, _, nb = mia_data.load_mimir(domain, split, path)
  if nb is None:
    raise MissingFileError(f"the MIMIR copy at {path} has no neighbour files for {domain} {split}")
  by_text = dict(zip(mimir_texts, nb))
  missing = [i for i, t in enumerate(texts) if t not in by_text]
  if missing:
    raise InputError(f"{len(missing)} texts (first: text {missing[0]}) are not MIMIR {domain} {split} texts")
  return check_neighbours([by_text[t] for t in texts], len(texts), count)


def _vocabulary(texts):
  """Sorted distinct words of texts, their lower-cased forms and the cumulative unigram distribution."""
  counts = collections.Counter(w for t in texts for w in _WORD.findall(t))
  words = sorted(counts)
  if len({w.lower() for w in words}) < 2:
    raise InputError("the vocabulary texts hold fewer than 2 distinct words, so no word can be replaced")
  cum = np.cumsum([counts[w] for w in words], dtype=np.float64)
  return words, [w.lower() for w in words], cum / cum[-1]  # last entry exactly 1: a draw in [0, 1) stays in range


def offline_neighbours(texts, count=MIMIR_COUNT, fraction=MIMIR_FRACTION, seed=0, vocabulary_texts=None):
  """Context-blind neighbours: k random words of each text replaced by words drawn by corpus frequency.

  Each neighbour picks k = max(1, int(fraction * n_words)) distinct word positions uniformly and
  replaces each by a word drawn from the unigram distribution of `vocabulary_texts` (default: the
  evaluated texts themselves, members and non-members alike, so neither side is favoured), redrawn
  until it differs from the original word ignoring case. So every neighbour differs from its text in
  exactly k words. Neighbours are independent draws and may coincide for very short texts.
  Weaker than a masked LM: a replacement ignores its context, so neighbours are less fluent and their
  likelihood drop mixes the damage of an out-of-place word with the memorisation signal.
  """
  _check_args(texts, count, fraction)
  words, lower, cdf = _vocabulary(texts if vocabulary_texts is None else vocabulary_texts)
  out = []
  for i, text in enumerate(texts):
    rng = np.random.default_rng([seed, i])
    spans = word_spans(text)
    k = swap_count(len(spans), fraction)
    neighbours = []
    for _ in range(count):
      pos = np.sort(rng.choice(len(spans), k, replace=False))
      original = [text[s:e].lower() for s, e in (spans[p] for p in pos)]
      pick = np.searchsorted(cdf, rng.random(k), side="right")
      for m in range(k):
        while lower[pick[m]] == original[m]:  # rejection: the original's own mass is never drawn
          pick[m] = np.searchsorted(cdf, rng.random(), side="right")
      neighbours.append(_replace(text, [spans[p] for p in pos], [words[j] for j in pick]))
    out.append(neighbours)
  return out


def fill_mask_pipeline(model, device=-1):
  """transformers' fill-mask pipeline on a local masked LM folder (or hub id, online only)."""
  try:
    import transformers
  except ImportError as e:
    raise MissingPackageError('fill-mask neighbours need transformers and torch: pip install -e ".[neighbours]"') from e
  from models import hub
  if not os.path.isdir(os.path.expanduser(str(model))):
    if not hub.is_hub_id(model):
      raise MissingFileError(f"masked LM {model} does not exist (a local folder, or a hub id like bert-base-uncased)")
    hub.prepare()  # no network: offline mode at once, not 24 s of retries
  try:
    return transformers.pipeline("fill-mask", model=model, tokenizer=model, device=device)
  except OSError as e:  # no such folder, and the hub not reachable or not holding it
    reason = hub.unreachable_reason() or str(e)
    raise MissingFileError(f"could not load the masked LM {model!r}: {reason}") from e


def _best_candidates(pipe, text, spans, top_k, context_words, batch_size):
  """{word position: (replacement, MIMIR score)} from one fill-mask call per word, whole word masked."""
  half = context_words // 2
  masked = []
  for j, (s, e) in enumerate(spans):
    # A window of words around the mask keeps long texts within the model's context.
    lo, hi = spans[max(0, j - half)][0], spans[min(len(spans), j + half + 1) - 1][1]
    masked.append(text[lo:s] + pipe.tokenizer.mask_token + text[e:hi])
  outputs = pipe(masked, top_k=top_k, batch_size=batch_size, tokenizer_kwargs={"truncation": True})
  special = set(pipe.tokenizer.all_special_ids)
  best = {}
  for j, cands in enumerate(outputs):
    original = text[spans[j][0]:spans[j][1]].lower()
    clean = [(c["token_str"].replace("##", "").strip(), c) for c in cands if c["token"] not in special]
    p_orig = next((c["score"] for w, c in clean if w.lower() == original), 0.0)
    for w, c in clean:  # highest probability first
      if _WORD.fullmatch(w) and w.lower() != original:
        best[j] = (w, c["score"] / (1.0 - p_orig if p_orig < 1.0 else 1.0 - 0.9))
        break
  return best


def fill_mask_neighbours(texts, model, count=MIMIR_COUNT, fraction=MIMIR_FRACTION, seed=0,
                         top_k=MIMIR_TOP_K, trials=MIMIR_TRIALS, context_words=200, batch_size=32, device=-1):
  """MIMIR's BERT neighbour recipe (module docstring) with any masked LM through the fill-mask pipeline.

  `model` is a folder (or hub id) that transformers.pipeline("fill-mask") loads, or a ready pipeline.
  Every neighbour replaces exactly k = max(1, int(fraction * n_words)) words (fewer only when fewer
  words have a candidate). With fewer distinct draws than `count`, the best ones repeat in order.
  """
  _check_args(texts, count, fraction)
  pipe = fill_mask_pipeline(model, device) if isinstance(model, str) else model
  out = []
  for i, text in enumerate(texts):
    spans = word_spans(text)
    best = _best_candidates(pipe, text, spans, top_k, context_words, batch_size)
    eligible = np.array(sorted(best))
    if len(eligible) == 0:
      raise InputError(f"text {i}: the masked LM proposes no replacement for any word: {text[:40]!r}")
    k = min(swap_count(len(spans), fraction), len(eligible))
    rng = np.random.default_rng([seed, i])
    draws = {}  # distinct position sets, in the order first drawn, with their summed score
    for _ in range(trials):
      pos = tuple(sorted(rng.choice(eligible, k, replace=False).tolist()))
      draws.setdefault(pos, sum(best[p][1] for p in pos))
    ranked = sorted(draws, key=draws.get, reverse=True)[:count]  # stable: ties keep draw order
    ranked = [ranked[m % len(ranked)] for m in range(count)]
    out.append([_replace(text, [spans[p] for p in pos], [best[p][0] for p in pos]) for pos in ranked])
  return out


def neighbours_for(spec, texts, count=MIMIR_COUNT, fraction=MIMIR_FRACTION, seed=0, mimir_path=None):
  """(neighbours, method name) from a spec: "offline", "fill-mask:<model>" or "mimir:<domain>[:<split>]"."""
  if spec == "offline" or spec == OFFLINE:
    return offline_neighbours(texts, count, fraction, seed), OFFLINE
  if spec.startswith("fill-mask:") and len(spec) > len("fill-mask:"):
    model = spec[len("fill-mask:"):]
    return fill_mask_neighbours(texts, model, count, fraction, seed), fill_mask_method(model)
  if spec.startswith("mimir:"):
    parts = spec.split(":")
    if len(parts) not in (2, 3):
      raise InputError(f"neighbour spec {spec!r}: expected mimir:<domain> or mimir:<domain>:<split>")
    return mimir_neighbours(texts, *parts[1:], path=mimir_path, count=count), MIMIR
  raise InputError(f"unknown neighbour spec {spec!r}; expected offline, fill-mask:<model> or mimir:<domain>[:<split>]")
