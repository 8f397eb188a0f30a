"""Tests for training.pretraining.neighbours: offline-unigram, fill-mask (a tiny local BERT) and MIMIR neighbours."""

import collections
import re

import pytest

from lira.errors import InputError
from training.pretraining import neighbours
from test_mia_data import write_mimir

WORD = re.compile(r"\w+")
CORPUS = ["The cat sat on the mat, and the dog sat too.",
          "A quick brown fox jumps over the lazy dog!",
          "Birds sing in the morning; rain falls on green fields.",
          "Paris is the capital of France and Rome is the capital of Italy."]


def changed_positions(text, neighbour):
  """Word positions where neighbour differs from text (ignoring case); the word count must agree."""
  a, b = WORD.findall(text), WORD.findall(neighbour)
  assert len(a) == len(b)
  return [i for i, (x, y) in enumerate(zip(a, b)) if x.lower() != y.lower()]


def non_words(text):
  """Everything between the words: spaces and punctuation, which a neighbour keeps."""
  return WORD.split(text)


# --- offline-unigram -------------------------------------------------------------------------------

@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.5])
def test_offline_replaces_the_fraction_of_words_and_keeps_the_rest(fraction):
  nb = neighbours.offline_neighbours(CORPUS, count=6, fraction=fraction, seed=1)
  vocab = {w for t in CORPUS for w in WORD.findall(t)}
  assert len(nb) == len(CORPUS) and all(len(row) == 6 for row in nb)
  for text, row in zip(CORPUS, nb):
    k = max(1, int(fraction * len(WORD.findall(text))))  # MIMIR's int(pct * n), at least one word
    for n in row:
      assert n != text and len(changed_positions(text, n)) == k
      assert non_words(n) == non_words(text)
      assert set(WORD.findall(n)) <= vocab


def test_offline_is_deterministic_by_seed_and_per_text():
  a = neighbours.offline_neighbours(CORPUS, count=5, seed=3)
  assert neighbours.offline_neighbours(CORPUS, count=5, seed=3) == a
  assert neighbours.offline_neighbours(CORPUS, count=5, seed=4) != a
  # Text i's draws depend on (seed, i) and the vocabulary, not on the other texts of the call.
  assert neighbours.offline_neighbours(CORPUS[:2], count=5, seed=3, vocabulary_texts=CORPUS) == a[:2]


def test_offline_draws_replacements_by_corpus_frequency():
  vocab = ["a"] * 9 + ["b"]  # unigram probabilities 0.9 and 0.1
  texts = ["x y z w v u t s r q"] * 20
  nb = neighbours.offline_neighbours(texts, count=50, fraction=0.2, seed=0, vocabulary_texts=vocab)
  drawn = collections.Counter(w for row in nb for n in row for w in WORD.findall(n) if w in "ab")
  total = 20 * 50 * 2
  assert sum(drawn.values()) == total
  # Binomial(2000, 0.9): standard deviation 0.0067, so 0.03 is 4.5 of them.
  assert abs(drawn["a"] / total - 0.9) < 0.03


def test_offline_never_draws_the_original_word_ignoring_case():
  nb = neighbours.offline_neighbours(["The the THE"], count=20, fraction=1.0, seed=0,
                                     vocabulary_texts=["the The tHe other"])
  assert all(n == "other other other" for n in nb[0])


def test_offline_bad_input():
  with pytest.raises(InputError, match="count"):
    neighbours.offline_neighbours(CORPUS, count=0)
  with pytest.raises(InputError, match="fraction"):
    neighbours.offline_neighbours(CORPUS, fraction=0.0)
  with pytest.raises(InputError, match="fraction"):
    neighbours.offline_neighbours(CORPUS, fraction=1.5)
  with pytest.raises(InputError, match="text 1 has no word"):
    neighbours.offline_neighbours(["fine text", "?! ..."])
  with pytest.raises(InputError, match="fewer than 2 distinct words"):
    neighbours.offline_neighbours(["the The"])


# --- fill-mask with a tiny randomly initialised BERT ----------------------------------------------

@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
  """A randomly initialised 1-layer BERT with a WordPiece tokenizer trained on CORPUS, saved locally."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

  tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.decoder = decoders.WordPiece()
  tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
      vocab_size=150, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
  tok.post_processor = processors.TemplateProcessing(
      single="[CLS] $A [SEP]", special_tokens=[(t, tok.token_to_id(t)) for t in ("[CLS]", "[SEP]")])
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                              cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
  torch.manual_seed(0)
  config = transformers.BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
  folder = str(tmp_path_factory.mktemp("tiny_bert"))
  transformers.BertForMaskedLM(config).save_pretrained(folder)
  fast.save_pretrained(folder)
  return folder


def reference_candidates(folder, text, top_k=6):
  """Per word: (best replacement, p / (1 - p_original)) straight from BertForMaskedLM's softmax."""
  import torch
  import transformers

  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  model = transformers.BertForMaskedLM.from_pretrained(folder).eval()
  spans = [m.span() for m in WORD.finditer(text)]
  best = {}
  for j, (s, e) in enumerate(spans):
    enc = tokenizer(text[:s] + "[MASK]" + text[e:], return_tensors="pt")
    at = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0]
    with torch.no_grad():
      probs = torch.softmax(model(**enc).logits[0, at], -1)
    top = torch.topk(probs, top_k)
    cands = [(tokenizer.decode([i]).replace("##", "").strip(), p, i)
             for p, i in zip(top.values.tolist(), top.indices.tolist())
             if i not in tokenizer.all_special_ids]
    original = text[s:e].lower()
    p_orig = next((p for w, p, _ in cands if w.lower() == original), 0.0)  # as read from the top k
    for w, p, _ in cands:
      if re.fullmatch(r"\w+", w) and w.lower() != original:
        best[j] = (w, p / (1 - p_orig))
        break
  return best


def test_fill_mask_one_word_neighbours_are_the_top_scored_swaps(tiny_bert):
  text = CORPUS[1]  # 9 words: int(0.05 * 9) = 0, so one word per neighbour
  ref = reference_candidates(tiny_bert, text)
  nb = neighbours.fill_mask_neighbours([text], tiny_bert, count=4, seed=0)[0]
  # 1,000 draws of one position out of at most 9 reach every position, so the 4 best are kept.
  want = sorted(ref, key=lambda j: ref[j][1], reverse=True)[:4]
  assert [changed_positions(text, n) for n in nb] == [[j] for j in want]
  for n, j in zip(nb, want):
    assert WORD.findall(n)[j] == ref[j][0] and non_words(n) == non_words(text)


def test_fill_mask_replaces_the_fraction_with_best_candidates_deterministically(tiny_bert):
  text = CORPUS[3]  # 13 words: int(0.25 * 13) = 3 per neighbour
  ref = reference_candidates(tiny_bert, text)
  nb = neighbours.fill_mask_neighbours([text, CORPUS[0]], tiny_bert, count=5, fraction=0.25, seed=7)
  assert neighbours.fill_mask_neighbours([text, CORPUS[0]], tiny_bert, count=5, fraction=0.25, seed=7) == nb
  scores = []
  for n in nb[0]:
    pos = changed_positions(text, n)
    assert len(pos) == 3 and set(pos) <= set(ref)
    assert [WORD.findall(n)[j] for j in pos] == [ref[j][0] for j in pos]
    scores.append(sum(ref[j][1] for j in pos))
  assert len(set(nb[0])) == 5
  # Ranked by MIMIR's summed score; 1e-6 relative: float32 softmax read by two code paths.
  assert all(a >= b * (1 - 1e-6) for a, b in zip(scores, scores[1:]))
  for n in nb[1]:
    assert len(changed_positions(CORPUS[0], n)) == max(1, int(0.25 * 11))


def test_fill_mask_method_name_spec_ready_pipeline_and_short_context(tiny_bert):
  nb, method = neighbours.neighbours_for(f"fill-mask:{tiny_bert}", CORPUS[:1], count=2)
  assert method == f"fill-mask:{tiny_bert}" and len(nb) == 1 and len(nb[0]) == 2
  pipe = neighbours.fill_mask_pipeline(tiny_bert)
  assert neighbours.fill_mask_neighbours(CORPUS[:1], pipe, count=2) == nb
  # A 4-word window around each mask (how long texts stay within the model's context).
  short = neighbours.fill_mask_neighbours(CORPUS[3:], pipe, count=3, fraction=0.2, context_words=4)[0]
  assert all(len(changed_positions(CORPUS[3], n)) == 2 for n in short)


# --- MIMIR's precomputed neighbours and the spec -----------------------------------------------------

def test_mimir_neighbours_match_texts_by_content(tmp_path):
  write_mimir(tmp_path, domain="hackernews", split="ngram_13_0.2", neighbours=4)
  nb = neighbours.mimir_neighbours(["n two", "m one"], "hackernews", "ngram_13_0.2", path=str(tmp_path), count=3)
  assert nb == [["n two nb0", "n two nb1", "n two nb2"], ["m one nb0", "m one nb1", "m one nb2"]]
  nb, method = neighbours.neighbours_for("mimir:hackernews:ngram_13_0.2", ["m two"], count=2,
                                         mimir_path=str(tmp_path))
  assert method == "mimir" and nb == [["m two nb0", "m two nb1"]]
  with pytest.raises(InputError, match="fewer than the 5 asked"):
    neighbours.mimir_neighbours(["m one"], "hackernews", "ngram_13_0.2", path=str(tmp_path), count=5)
  with pytest.raises(InputError, match="not MIMIR hackernews"):
    neighbours.mimir_neighbours(["m one", "elsewhere"], "hackernews", "ngram_13_0.2", path=str(tmp_path))


def test_spec_names_and_errors():
  nb, method = neighbours.neighbours_for("offline", CORPUS, count=3, seed=2)
  assert method == "offline-unigram" and nb == neighbours.offline_neighbours(CORPUS, 3, seed=2)
  for bad in ("bert", "fill-mask:", "mimir:a:b:c"):
    with pytest.raises(InputError, match="spec"):
      neighbours.neighbours_for(bad, CORPUS)
  with pytest.raises(InputError, match="2 neighbour lists for 3 texts"):
    neighbours.check_neighbours([["a"], ["b"]], 3)
