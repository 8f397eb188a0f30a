"""EM-MIA's pair features: each prefix run once and cached, against the full forward pass on every concatenation.

  python benchmarks/pair_features.py                        # N = 500 texts, 20 prefix rows timed, 3 rounds
  python benchmarks/pair_features.py --N 40 --rows 4 --reps 1 --out /tmp/p.json   # smoke test

pair_lp[p, x] is the lp of text x with text p alone as prefix (Kim et al. 2024); N texts give N x N pairs. Both
paths run in this process on the same randomly initialised pythia_tiny base architecture (vocab 512, hidden 128,
2 layers, 4 heads, MLP 512, rotary 0.25: experiments/configs/pythia.py; random init, as the cost does not depend
on the weights) and the same random texts of 32-64 tokens (right-padded to T = 64):
  * cached: training.pretraining.prefix_lp.pair_lp: each prefix once (KV cache), --prefix_batch prefixes x
    --batch_size texts per call, texts attending to the cache;
  * naive: one jitted forward pass on [prefix + text] for every pair, right-padded to the longest possible pair
    (2 T = 128 tokens) so the shape never changes; --prefix_batch x --batch_size pairs per call, the last batch
    padded; the same loss function (models.token_loss.token_loss) on the text positions.
Both are jitted with the parameters as arguments and compile once (a warm-up call of each, not timed). Only
--rows prefix rows (x all N texts) are timed and the time is extrapolated linearly to all N rows: every row costs
the same (the same N texts after a prefix padded to one length). The rounds alternate cached and naive, each
doing an untimed warm call before its timed one, so load from other processes hits both alike.
tokens/s counts the scored text tokens of the pairs (the same numerator for both paths).
"""

import argparse
import datetime
import functools
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.gpt_neox import GPTNeoXConfig, GPTNeoXForCausalLM  # noqa: E402
from models.token_loss import token_loss  # noqa: E402
from training.pretraining import prefix_lp  # noqa: E402

ARCH = dict(vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
            rotary_pct=0.25, max_position_embeddings=256)


def random_texts(N, T, low, high, vocab, seed=0):
  rng = np.random.default_rng(seed)
  lengths_N = rng.integers(low, high + 1, N)
  ids_NxT = rng.integers(0, vocab, (N, T)).astype(np.int32)
  return ids_NxT, np.arange(T) < lengths_N[:, None]


@functools.lru_cache(maxsize=4)
def naive_fn(graphdef, T):
  """jit of (state, pair_ids_BxL, pair_mask_BxL, start_B) -> lp_BxT of the text that starts at start_B."""
  def run(state, ids_BxL, mask_BxL, start_B):
    logits_BxLxV = nnx.merge(graphdef, state)(ids_BxL, attention_mask=mask_BxL)
    lp_BxL1 = -token_loss(logits_BxLxV[:, :-1], ids_BxL[:, 1:])  # lp of token l + 1
    index_BxT = start_B[:, None] - 1 + jnp.arange(T)  # text token i sits at start + i
    lp_BxT = jnp.take_along_axis(lp_BxL1, jnp.clip(index_BxT, 0, lp_BxL1.shape[1] - 1), axis=1)
    text_mask_BxT = jnp.take_along_axis(mask_BxL, jnp.clip(index_BxT + 1, 0, mask_BxL.shape[1] - 1), axis=1)
    return jnp.where(text_mask_BxT & (jnp.arange(T) < mask_BxL.sum(-1)[:, None] - start_B[:, None]), lp_BxT, jnp.nan)
  return jax.jit(run)


def naive_pair_lp(module, ids_NxT, mask_NxT, rows, pairs_per_call):
  """lp_RxNxT from a full forward pass on each [prefix + text], pairs_per_call pairs per call, L = 2 T."""
  graphdef, state = nnx.split(module)
  N, T = ids_NxT.shape
  L = 2 * T
  fn = naive_fn(graphdef, T)
  lengths_N = mask_NxT.sum(1)
  pairs = [(r, x) for r in rows for x in range(N)]
  out = np.empty((len(pairs), T), np.float32)
  for start in range(0, len(pairs), pairs_per_call):
    chunk = pairs[start:start + pairs_per_call]
    ids_BxL = np.zeros((pairs_per_call, L), np.int32)
    mask_BxL = np.zeros((pairs_per_call, L), bool)
    start_B = np.ones(pairs_per_call, np.int32)
    for b, (r, x) in enumerate(chunk):
      lp_, lx = lengths_N[r], lengths_N[x]
      ids_BxL[b, :lp_], ids_BxL[b, lp_:lp_ + lx] = ids_NxT[r, :lp_], ids_NxT[x, :lx]
      mask_BxL[b, :lp_ + lx] = True
      start_B[b] = lp_
    out[start:start + len(chunk)] = np.asarray(fn(state, ids_BxL, mask_BxL, start_B))[:len(chunk)]
  return out.reshape(len(rows), N, T)


def naive_recall_lp(module, prefix, ids_NxT, mask_NxT, per_call):
  """lp_NxT of every text after one prefix, from a full forward pass on each [prefix + text] (L = |P| + T)."""
  graphdef, state = nnx.split(module)
  N, T = ids_NxT.shape
  P = len(prefix)
  fn = naive_fn(graphdef, T)
  lengths_N = mask_NxT.sum(1)
  out = np.empty((N, T), np.float32)
  for start in range(0, N, per_call):
    ids_BxL = np.zeros((per_call, P + T), np.int32)
    mask_BxL = np.zeros((per_call, P + T), bool)
    ids_BxL[:, :P] = prefix
    for b, x in enumerate(range(start, min(N, start + per_call))):
      ids_BxL[b, P:P + lengths_N[x]] = ids_NxT[x, :lengths_N[x]]
      mask_BxL[b, :P + lengths_N[x]] = True
    mask_BxL[min(N, start + per_call) - start:, :P + 1] = True  # padded rows: any valid sequence
    n = min(N, start + per_call) - start
    out[start:start + n] = np.asarray(fn(state, ids_BxL, mask_BxL, np.full(per_call, P, np.int32)))[:n]
  return out


def _timed(fns, reps):
  """Rounds alternating the paths, each an untimed call then a timed one; (times, 1-minute loads)."""
  times, loads = {name: [] for name in fns}, [os.getloadavg()[0]]
  for _ in range(reps):
    for name, fn in fns.items():
      fn()
      t = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t)
    loads.append(os.getloadavg()[0])
  return times, loads


def recall_main(args, module, ids_NxT, mask_NxT):
  """ReCaLL: one prefix (the first --recall_shots texts) before the other texts, cached against naive."""
  S = args.recall_shots
  prefix = np.concatenate([ids_NxT[i, :mask_NxT[i].sum()] for i in range(S)])
  ids_NxT, mask_NxT = ids_NxT[S:], mask_NxT[S:]
  per_call = args.batch_size * args.prefix_batch
  fns = dict(cached=lambda: prefix_lp.conditional_lp(module, prefix, ids_NxT, mask_NxT, batch_size=per_call),
             naive=lambda: naive_recall_lp(module, prefix, ids_NxT, mask_NxT, per_call))
  outputs = {name: fn() for name, fn in fns.items()}
  diff = float(np.nanmax(np.abs(outputs["cached"] - outputs["naive"])))
  times, loads = _timed(fns, args.reps)
  scored = int(mask_NxT.sum())
  res = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
             cpus=os.cpu_count(), jax=jax.__version__, arch=ARCH, init="random (nnx.Rngs(0))", mode="recall",
             shots=S, prefix_tokens=len(prefix), texts=len(ids_NxT), T=args.max_len, texts_per_call=per_call,
             reps=args.reps, loadavg_1min=loads, max_abs_diff=diff, paths={})
  print(f"ReCaLL: a {S}-shot prefix of {len(prefix)} tokens before {len(ids_NxT)} texts ({scored:,} text tokens), "
        f"{args.reps} rounds; max |cached - naive| = {diff:.1e}; load {loads}")
  for name, ts in times.items():
    med = float(np.median(ts))
    res["paths"][name] = dict(times_s=ts, median_s=med, min_s=float(np.min(ts)), tokens_per_s=scored / med)
    print(f"{name:6} median {med:7.2f} s (min {np.min(ts):.2f})  {scored / med:>9,.0f} tokens/s")
  res["speedup"] = res["paths"]["naive"]["median_s"] / res["paths"]["cached"]["median_s"]
  print(f"cached / naive speed: {res['speedup']:.2f}x")
  _write(args.out, res)


def _write(path, res):
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(res, f, indent=2)
  os.replace(tmp, path)
  print(f"wrote {path}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--N", type=int, default=500, help="texts (N x N pairs)")
  ap.add_argument("--rows", type=int, default=20, help="prefix rows timed (x all N texts), extrapolated to N")
  ap.add_argument("--min_len", type=int, default=32)
  ap.add_argument("--max_len", type=int, default=64)
  ap.add_argument("--batch_size", type=int, default=16, help="texts per call (cached)")
  ap.add_argument("--prefix_batch", type=int, default=4, help="prefixes per call (cached); naive: the product, pairs")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--recall_shots", type=int, default=0, help="instead of pairs: ReCaLL, one prefix of this many "
                  "texts before all N texts (cached conditional_lp against a full pass on each concatenation)")
  ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pair_features_cpu.json"))
  args = ap.parse_args()

  module = GPTNeoXForCausalLM(GPTNeoXConfig(**ARCH), rngs=nnx.Rngs(0))
  ids_NxT, mask_NxT = random_texts(args.N, args.max_len, args.min_len, args.max_len, ARCH["vocab_size"])
  rows = np.arange(args.rows)
  per_call = args.batch_size * args.prefix_batch
  if args.recall_shots:
    return recall_main(args, module, ids_NxT, mask_NxT)
  fns = dict(
      cached=lambda: prefix_lp.pair_lp(module, ids_NxT, mask_NxT, rows=rows, batch_size=args.batch_size,
                                       prefix_batch=args.prefix_batch),
      naive=lambda: naive_pair_lp(module, ids_NxT, mask_NxT, rows, per_call))
  outputs = {name: fn() for name, fn in fns.items()}  # compile (warm-up), and the answers to compare
  diff = float(np.nanmax(np.abs(outputs["cached"] - outputs["naive"])))
  same_nan = bool((np.isnan(outputs["cached"]) == np.isnan(outputs["naive"])).all())
  graphdef = nnx.split(module)[0]
  compiles_before = (prefix_lp.compile_count(graphdef), naive_fn(graphdef, args.max_len)._cache_size())
  times, loads = _timed(fns, args.reps)
  compiles_after = (prefix_lp.compile_count(graphdef), naive_fn(graphdef, args.max_len)._cache_size())
  scored = int(mask_NxT.sum()) * len(rows)  # text tokens scored in the timed pairs
  scale = args.N / len(rows)
  res = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
             cpus=os.cpu_count(), jax=jax.__version__, arch=ARCH, init="random (nnx.Rngs(0))", N=args.N,
             rows_timed=args.rows, text_tokens=[args.min_len, args.max_len], T=args.max_len,
             batch_size=args.batch_size, prefix_batch=args.prefix_batch, naive_pairs_per_call=per_call,
             naive_pair_length=2 * args.max_len, reps=args.reps, loadavg_1min=loads,
             max_abs_diff=diff, same_nan=same_nan, recompiled=compiles_before != compiles_after, paths={})
  print(f"N = {args.N}, {args.rows} prefix rows x {args.N} texts timed ({scored:,} text tokens), {args.reps} rounds; "
        f"max |cached - naive| = {diff:.1e}; load {loads}")
  for name, ts in times.items():
    med = float(np.median(ts))
    res["paths"][name] = dict(times_s=ts, median_s=med, min_s=float(np.min(ts)), tokens_per_s=scored / med,
                              all_pairs_s_extrapolated=med * scale)
    print(f"{name:6} median {med:7.2f} s (min {np.min(ts):.2f})  {scored / med:>9,.0f} tokens/s  "
          f"all {args.N} x {args.N} pairs ~ {med * scale:,.0f} s")
  res["speedup"] = res["paths"]["naive"]["median_s"] / res["paths"]["cached"]["median_s"]
  print(f"cached / naive speed: {res['speedup']:.2f}x; recompiled while timing: {res['recompiled']}")
  _write(args.out, res)


if __name__ == "__main__":
  main()
