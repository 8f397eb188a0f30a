"""WBC of one text from its definition, a plain loop (the reference tests/attacks/test_wbc.py checks attacks/wbc.py
against; docs/conventions.md and attacks/wbc.py state the conventions).

For a text, take the target's and the reference's losses at their scored positions, in order, and keep the first
n = min(both counts) of each. For a window size w the effective size is k = min(w, n); each of the n - k + 1 windows of
k consecutive positions is a win when the reference's summed loss is strictly greater than the target's. The score
for w is the fraction of windows won (0 when n = 0), and the text's score the mean over the window sizes.
"""


def window_fraction(target, reference, w):
  """The fraction of length-min(w, n) windows in which the reference's summed loss exceeds the target's."""
  n = min(len(target), len(reference))
  if n == 0:
    return 0.0
  k = min(w, n)
  starts = range(n - k + 1)
  wins = sum(sum(reference[j:j + k]) > sum(target[j:j + k]) for j in starts)
  return wins / len(starts)


def wbc_rows(target_losses, target_mask, reference_losses, reference_mask, window_sizes):
  """[score per text]: each row's scored losses (as float64 Python numbers) through window_fraction, averaged over
  the window sizes."""
  scores = []
  for t_row, t_mask, r_row, r_mask in zip(target_losses, target_mask, reference_losses, reference_mask):
    target = [float(x) for x, keep in zip(t_row, t_mask) if keep]
    reference = [float(x) for x, keep in zip(r_row, r_mask) if keep]
    fractions = [window_fraction(target, reference, w) for w in window_sizes]
    scores.append(sum(fractions) / len(fractions))
  return scores
