"""How membership moves a canary's tokens, and which LiRA variant that structure favours.

For canary n, on LiRA's per-token statistic z (logit by default) over its L scored positions, with the models
split by membership (keep):
  d = mean_IN z - mean_OUT z                  the per-token IN-OUT effect
  S = R^T R / M                               the shared (pooled) MLE covariance of the residuals R, each row
                                              centred by its class mean, as the shared variants fit it
  C = OAS(S, M rows)                          the shared OAS covariance (lira.covariance)

Descriptive measures per canary:
  co-movement   rho = Var_m(mean_t R) / mean_t Var_m(R_t) = (1^T S 1 / L^2) / (tr S / L)
                1/L when the tokens move independently from model to model, 1 when they move as one.
  uniformity    U = (sum_t delta_t)^2 / (L sum_t delta_t^2) of the standardised effects delta_t = d_t / sqrt(S_tt),
                both sums debiased for the sampling noise of the class means (noise variance k = 1/n_IN + 1/n_OUT
                per standardised token, correlated as S): numerator minus k 1^T R 1 (R the correlation of S),
                denominator minus k L. 1 when every token moves by the same number of standard deviations; with
                independent tokens of equal variance univariate keeps the fraction U of the independent model's
                squared separation.
  inflation     kappa = w^T C w / w^T D w with w = D^-1 d, D = diag(C): the variance of the independent model's
                linear score under C over the variance it assumes. 1 for independent tokens; about L rho for
                uniform effects. Canaries with large kappa get extreme scores IN or OUT.

The oracle: with infinitely many shadow models each shared variant's score is linear, llr = w^T (x - (mu_IN +
mu_OUT) / 2), with w = (1^T d / 1^T C 1) 1 (univariate: the token mean), D^-1 d (independent) or C^-1 d (full
covariance, what OAS approaches). If the truth is N(mu_class, C), the canary's IN and OUT scores are
N(+-a, b^2) with a = w^T d / 2 and b^2 = w^T C w, and the pooled ROC over canaries follows in closed form
(`oracle_tpr`). Scaling the gap d by g scales a by g^2 and b by g.

Also per canary: the IN over the OUT class's total variance (tr C_IN / tr C_OUT, the class-wise OAS fits), and the
residuals' mean excess kurtosis over tokens (0 for Gaussian tokens).

The simulation draws a run from the fitted parameters, z[m, n] = mu_OUT + g keep[m, n] d + e, stored as losses
softplus(-z) so that LiRA's logit recovers z, with the noise e of one of STRUCTURES:
  gaussian            N(0, C): Gaussian, one covariance for both classes
  gaussian_diagonal   N(0, diag C): the same variances, no co-movement (independent tokens)
  gaussian_classwise  N(0, C_IN) for IN rows, N(0, C_OUT) for OUT rows: Gaussian, each class its own covariance
  shuffled            the canary's own residual rows, shuffled across all its models: the real tails and
                      co-movement, one distribution for both classes
  shuffled_in_class   the residual rows shuffled within each class: the real run itself at g = 1 (a control)
"""

import numpy as np
from scipy import optimize
from scipy import special

from lira import covariance
from lira.errors import InputError
from lira.scoring import Scoring
from lira.transforms import to_statistic

STRUCTURES = ("gaussian", "gaussian_diagonal", "gaussian_classwise", "shuffled", "shuffled_in_class")
ORACLE_STRUCTURES = ("gaussian", "gaussian_diagonal")
ORACLE_VARIANTS = ("univariate", "independent", "full")


def fit_canary(x_MxL, keep_M):
  """(mu_out_L, d_L, S_LxL, C_LxL, r_MxL) of one canary's statistic rows: class means, the shared MLE and OAS
  covariances, and the residuals (each row minus its class mean)."""
  x_MxL = np.asarray(x_MxL, np.float64)
  keep_M = np.asarray(keep_M, bool)
  if keep_M.sum() < 2 or (~keep_M).sum() < 2:
    raise InputError(f"a canary needs 2 IN and 2 OUT models, got {int(keep_M.sum())} and {int((~keep_M).sum())}")
  mu_in, mu_out = x_MxL[keep_M].mean(0), x_MxL[~keep_M].mean(0)
  r_MxL = x_MxL - np.where(keep_M[:, None], mu_in, mu_out)
  S_LxL = r_MxL.T @ r_MxL / len(keep_M)
  C_LxL = covariance.oas_from_scatter(S_LxL[None], len(keep_M))[0][0]
  return mu_out, mu_in - mu_out, S_LxL, C_LxL, r_MxL


def class_oas(r_MxL, keep_M):
  """(C_IN, C_OUT): the OAS covariances of each class's residual rows, as the class-wise variants fit them."""
  return tuple(covariance.oas(r_MxL[rows], assume_centered=True)[0][0] for rows in (keep_M, ~keep_M))


def excess_kurtosis(r_MxL):
  """Mean over tokens of the residuals' excess kurtosis (0 for Gaussian tokens; large for rare extreme values)."""
  v_L = np.maximum((r_MxL**2).mean(0), covariance.VAR_FLOOR)
  return float(((r_MxL**4).mean(0) / v_L**2 - 3.0).mean())


def co_movement(S_LxL):
  """Variance of the token mean over the mean token variance: 1/L for independent tokens, 1 for one factor."""
  L = S_LxL.shape[0]
  return float(S_LxL.sum() / L**2 / (np.trace(S_LxL) / L))


def uniformity(d_L, S_LxL, n_in, n_out):
  """(U, signal_over_noise): the debiased uniformity of the standardised effects and sum(delta^2) / (k L)."""
  L = len(d_L)
  sd_L = np.sqrt(np.maximum(np.diag(S_LxL), covariance.VAR_FLOOR))
  delta_L = d_L / sd_L
  k = 1.0 / n_in + 1.0 / n_out
  corr_sum = float((S_LxL / np.outer(sd_L, sd_L)).sum())
  num = delta_L.sum() ** 2 - k * corr_sum
  den = float(delta_L @ delta_L) - k * L
  return (num / (L * den) if den > 0 else float("nan")), float(delta_L @ delta_L) / (k * L)


def oracle_terms(d_L, C_LxL):
  """{variant: (a, b)}: the oracle score of a canary is N(+a, b^2) IN and N(-a, b^2) OUT; also kappa."""
  ones = np.ones(len(d_L))
  c_diag = np.diag(C_LxL)
  weights = {"univariate": (ones @ d_L) / (ones @ C_LxL @ ones) * ones,
             "independent": d_L / c_diag,
             "full": np.linalg.solve(C_LxL, d_L)}
  terms = {}
  for name, w in weights.items():
    terms[name] = (0.5 * float(w @ d_L), float(np.sqrt(max(w @ C_LxL @ w, 0.0))))
  w = weights["independent"]
  kappa = float(w @ C_LxL @ w / (w @ (c_diag * w))) if np.any(w) else float("nan")
  return terms, kappa


def oracle_tpr(a_N, b_N, fpr, gap=1.0):
  """Pooled TPR at `fpr` over canaries whose scores are N(+-g^2 a_n, (g b_n)^2), IN and OUT equally often.

  FPR(tau) = mean_n Phi((-g^2 a_n - tau) / (g b_n)) is decreasing in tau; tau is found by root finding on it.
  Canaries with b = 0 (no effect) score 0 IN and OUT.
  """
  a_N, b_N = gap**2 * np.asarray(a_N, np.float64), gap * np.asarray(b_N, np.float64)

  def rate(mean_N, tau):
    with np.errstate(divide="ignore", invalid="ignore"):
      z_N = np.where(b_N > 0, (mean_N - tau) / np.where(b_N > 0, b_N, 1.0), np.where(mean_N > tau, np.inf, -np.inf))
    return float(special.ndtr(z_N).mean())

  lo, hi = -1.0, 1.0
  while rate(-a_N, lo) < fpr:
    lo *= 2
  while rate(-a_N, hi) > fpr:
    hi *= 2
  tau = optimize.brentq(lambda t: rate(-a_N, t) - fpr, lo, hi, xtol=1e-12, rtol=1e-12)
  return rate(a_N, tau)


def measure(loss_MxNxT, keep_MxN, mask_NxT=None, statistic=Scoring.statistic, progress=None):
  """Per-canary measures and fitted parameters: ({name: [N] array}, [(valid_T, mu_out_L, d_L, C_LxL, C_in, C_out,
  r_MxL)] per canary)."""
  M, N, T = np.shape(loss_MxNxT)
  keep_MxN = np.asarray(keep_MxN, bool)
  out = {k: np.full(N, np.nan) for k in ("length", "co_movement", "uniformity", "signal_over_noise", "kappa",
                                         "mean_effect", "variance_ratio", "excess_kurtosis")}
  for structure in ORACLE_STRUCTURES:
    for v in ORACLE_VARIANTS:
      out[f"a_{v}_{structure}"], out[f"b_{v}_{structure}"] = np.full(N, np.nan), np.full(N, np.nan)
  params = []
  for n in (progress or (lambda x: x))(range(N)):
    valid_T = np.ones(T, bool) if mask_NxT is None else np.asarray(mask_NxT[n], bool)
    x_MxL = to_statistic(np.asarray(loss_MxNxT[:, n])[:, valid_T], statistic)
    mu_out, d_L, S_LxL, C_LxL, r_MxL = fit_canary(x_MxL, keep_MxN[:, n])
    C_in, C_out = class_oas(r_MxL, keep_MxN[:, n])
    n_in = int(keep_MxN[:, n].sum())
    out["variance_ratio"][n] = np.trace(C_in) / np.trace(C_out)
    out["excess_kurtosis"][n] = excess_kurtosis(r_MxL)
    out["length"][n] = valid_T.sum()
    out["co_movement"][n] = co_movement(S_LxL)
    out["uniformity"][n], out["signal_over_noise"][n] = uniformity(d_L, S_LxL, n_in, M - n_in)
    out["mean_effect"][n] = d_L.mean()
    terms, out["kappa"][n] = oracle_terms(d_L, C_LxL)
    for structure, cov_LxL in zip(ORACLE_STRUCTURES, (C_LxL, np.diag(np.diag(C_LxL)))):
      for v, (a, b) in (terms if structure == "gaussian" else oracle_terms(d_L, cov_LxL)[0]).items():
        out[f"a_{v}_{structure}"][n], out[f"b_{v}_{structure}"][n] = a, b
    params.append((valid_T, mu_out, d_L, C_LxL, C_in, C_out, r_MxL))
  return out, params


def simulate(params, keep_MxN, T, gap=1.0, structure="gaussian", seed=0, statistic=Scoring.statistic):
  """Losses [M, N, T] float32 (NaN at unscored positions) drawn from the fitted parameters (module docstring); seed:
  anything numpy.random.default_rng takes."""
  if structure not in STRUCTURES:
    raise InputError(f"structure must be one of {STRUCTURES}, got {structure!r}")
  if statistic != "logit":
    raise InputError("the simulation stores logits as losses; it needs statistic='logit'")
  keep_MxN = np.asarray(keep_MxN, bool)
  M, N = keep_MxN.shape
  rng = np.random.default_rng(seed)
  loss_MxNxT = np.full((M, N, T), np.nan, np.float32)
  for n, (valid_T, mu_out, d_L, C_LxL, C_in, C_out, r_MxL) in enumerate(params):
    L = len(d_L)
    e_MxL = rng.standard_normal((M, L))
    keep_M = keep_MxN[:, n]
    if structure == "gaussian":
      e_MxL = e_MxL @ np.linalg.cholesky(C_LxL).T
    elif structure == "gaussian_diagonal":
      e_MxL = e_MxL * np.sqrt(np.diag(C_LxL))
    elif structure == "gaussian_classwise":
      e_MxL = np.where(keep_M[:, None], e_MxL @ np.linalg.cholesky(C_in).T, e_MxL @ np.linalg.cholesky(C_out).T)
    elif structure == "shuffled":
      e_MxL = r_MxL[rng.permutation(M)]
    else:
      order_M = np.arange(M)
      for rows in (np.flatnonzero(keep_M), np.flatnonzero(~keep_M)):
        order_M[rows] = rng.permutation(rows)
      e_MxL = r_MxL[order_M]
    z_MxL = mu_out + gap * keep_M[:, None] * d_L + e_MxL
    loss_MxNxT[:, n, valid_T] = np.logaddexp(0.0, -z_MxL)
  return loss_MxNxT
