"""Tests for lira.canary_maps, lira.reports.image_plots and lira.reports.image_report: per-pixel maps of an image
canary (the image_maps command as a user runs it: tests/e2e/test_image_maps_command.py)."""

import json
import os

import numpy as np
import pytest

from lira import canary_maps
from lira.reports import image_plots
from lira.reports import image_report
from lira.errors import InputError, MissingFileError

M, N, H, W = 8, 5, 4, 4
T = H * W
MEMORISED = 3  # the canary whose IN models lose 1.5 nats less on the left half of the image


def synthetic(C=1, levels=17, seed=0):
  """(loss_MxNxT float32, keep_MxN, canaries [N, H, W, C]) with a planted memorisation signal and a correlated block."""
  rng = np.random.default_rng(seed)
  keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
  loss = rng.gamma(4.0, 0.5, size=(M, N, T)) + 1.0
  left_T = np.arange(T) % W < W // 2
  loss[:, MEMORISED] -= 1.5 * keep[:, MEMORISED, None] * left_T
  loss += 0.6 * rng.normal(size=(M, N, 1)) * (np.arange(T) < 2 * W)  # one latent per model moves the top two rows
  canaries = rng.integers(0, levels, size=(N, H, W, C)).astype(np.int32)
  return np.abs(loss).astype(np.float32), keep, canaries


def write_run(folder, C=1, config=None, canaries_2d=False):
  loss, keep, canaries = synthetic(C)
  np.save(folder / "losses.npy", loss)
  np.save(folder / "keep.npy", keep)
  np.save(folder / "canaries.npy", canaries.reshape(N, -1) if canaries_2d else canaries)
  config = {"model": {"name": "pixelcnn_pp", "image_shape": [H, W, C], "num_levels": 17}} if config is None else config
  (folder / "config.json").write_text(json.dumps(config))
  return loss, keep, canaries


# ---- the statistics, against a brute-force loop ----

@pytest.mark.parametrize("cov_class", canary_maps.COV_CLASSES)
def test_canary_maps_match_a_brute_force_loop(cov_class):
  loss, keep, _ = synthetic()
  canary, pixel = 2, 6
  maps = canary_maps.canary_maps(loss, keep, canary, pixel, cov_class=cov_class)
  x = loss[:, canary].astype(np.float64)
  rows_in = [x[m] for m in range(M) if keep[m, canary]]
  rows_out = [x[m] for m in range(M) if not keep[m, canary]]
  for t in range(T):  # one pixel at a time, plain Python means
    # 1e-12: float64 means of 4 float32 values, summed in another order.
    assert maps.mean_in_T[t] == pytest.approx(sum(r[t] for r in rows_in) / len(rows_in), abs=1e-12)
    assert maps.mean_out_T[t] == pytest.approx(sum(r[t] for r in rows_out) / len(rows_out), abs=1e-12)
  np.testing.assert_allclose(maps.difference_T, maps.mean_in_T - maps.mean_out_T, rtol=0, atol=0)
  # np.cov with bias=True: the project's covariances are MLE (divide by n, docs/conventions); row `pixel` of it.
  if cov_class == "shared":
    centred = np.concatenate([np.array(rows_in) - np.mean(rows_in, 0), np.array(rows_out) - np.mean(rows_out, 0)])
    want_cov = centred.T @ centred / len(centred)  # both classes' rows, each centred by its own class mean
    want_corr = want_cov / np.sqrt(np.outer(np.diag(want_cov), np.diag(want_cov)))
  else:
    rows = np.array(rows_out if cov_class == "out" else rows_in)
    want_cov, want_corr = np.cov(rows.T, bias=True), np.corrcoef(rows.T)
  # 1e-12: float64 sums over 4-8 models of values of order 1, in two different orders.
  np.testing.assert_allclose(maps.cov_row_T, want_cov[pixel], rtol=0, atol=1e-12)
  np.testing.assert_allclose(maps.corr_row_T, want_corr[pixel], rtol=0, atol=1e-12)
  np.testing.assert_allclose(maps.cov_TxT, want_cov, rtol=0, atol=1e-12)
  assert maps.corr_row_T[pixel] == pytest.approx(1.0, abs=1e-12)  # same reason
  assert (maps.n_in, maps.n_out) == (len(rows_in), len(rows_out))


def test_logit_statistic_and_a_constant_pixel_give_nan_correlation_not_inf():
  loss, keep, _ = synthetic()
  loss[:, 1, 5] = 2.0  # every model loses the same at pixel 5
  maps = canary_maps.canary_maps(loss, keep, 1, 0, statistic="logit")
  stat = -loss[:, 1].astype(np.float64) - np.log(-np.expm1(-loss[:, 1].astype(np.float64)))
  np.testing.assert_allclose(maps.mean_out_T, stat[~keep[:, 1]].mean(0), rtol=1e-12)  # float64 rounding only
  assert np.isnan(maps.corr_row_T[5]) and maps.cov_row_T[5] == 0.0
  assert np.isfinite(np.delete(maps.corr_row_T, 5)).all()


def test_loss_gaps_and_the_default_canary_find_the_planted_memorisation():
  loss, keep, _ = synthetic()
  gap_N = canary_maps.loss_gaps(loss, keep, chunk=2)  # chunk 2 < N: the chunked read covers every canary once
  for n in range(N):
    per_model = loss[:, n].astype(np.float64).mean(axis=1)
    # 1e-12: float64 means of float32 losses, summed in another order.
    assert gap_N[n] == pytest.approx(per_model[~keep[:, n]].mean() - per_model[keep[:, n]].mean(), abs=1e-12)
  assert canary_maps.default_canary(gap_N) == MEMORISED


# ---- the layout: position t = r * W + c is row r, column c ----

def test_to_grid_puts_position_t_at_row_t_div_w_column_t_mod_w():
  shape = (3, 5, 1)  # H != W, so swapped rows and columns would show
  grid = canary_maps.to_grid(np.arange(15), shape)
  for t in range(15):
    r, c = divmod(t, 5)
    assert grid[r, c] == t
  planted = np.zeros(15)
  planted[[0, 6, 14]] = 1.0  # (0, 0), (1, 1), (2, 4)
  assert np.argwhere(canary_maps.to_grid(planted, shape)).tolist() == [[0, 0], [1, 1], [2, 4]]
  with pytest.raises(InputError, match="15 per-pixel values"):
    canary_maps.to_grid(np.arange(16), shape)


def test_plots_lay_the_planted_pattern_on_the_image_grid():
  loss, keep, canaries = synthetic()
  maps = canary_maps.canary_maps(loss, keep, MEMORISED, 9)
  fig = image_plots.plot_canary_maps(maps, canaries[MEMORISED], (H, W, 1), M, 17, "test")
  diff_image = fig.axes[3].get_images()[0].get_array()
  np.testing.assert_array_equal(diff_image, maps.difference_T.reshape(H, W))
  # The planted signal (IN loses 1.5 nats less on columns 0, 1) shows as negative columns on the left.
  assert (diff_image[:, :2].mean() < -1.0) and abs(diff_image[:, 2:].mean()) < 1.0
  fig = image_plots.plot_pixel_covariance(maps, canaries[MEMORISED], (H, W, 1), M, 17)
  corr_image = fig.axes[2].get_images()[0].get_array()
  assert corr_image[2, 1] == pytest.approx(1.0, abs=1e-12)  # pixel 9 = row 2, column 1 (float64 rounding)
  marked = [p for p in fig.axes[2].patches]
  assert {p.get_xy() for p in marked} == {(0.5, 1.5)}  # the outline sits on column 1, row 2


def test_canary_images_accept_both_layouts_and_refuse_others():
  _, _, canaries = synthetic(C=3)
  np.testing.assert_array_equal(canary_maps.canary_images(canaries, (H, W, 3)), canaries)
  np.testing.assert_array_equal(canary_maps.canary_images(canaries.reshape(N, -1), (H, W, 3)), canaries)
  with pytest.raises(InputError, match="canaries.npy: shape"):
    canary_maps.canary_images(canaries.reshape(N, H * W, 3), (H, W, 1))
  with pytest.raises(InputError, match="integer pixel levels"):
    canary_maps.canary_images(canaries.astype(np.float32), (H, W, 3))


def test_image_shape_of_reads_model_or_data_and_fails_clearly():
  assert canary_maps.image_shape_of({"model": {"image_shape": [8, 8, 1]}}) == (8, 8, 1)
  assert canary_maps.image_shape_of({"data": {"image_shape": [32, 32, 3]}}) == (32, 32, 3)
  with pytest.raises(InputError, match="not an image run.*model.image_shape or data.image_shape"):
    canary_maps.image_shape_of({"model": {"name": "lstm"}, "data": {"seq_len": 32}})
  with pytest.raises(InputError, match="disagrees"):
    canary_maps.image_shape_of({"model": {"image_shape": [8, 8, 1]}, "data": {"image_shape": [4, 4, 1]}})
  with pytest.raises(InputError, match="model.image_shape must be"):
    canary_maps.image_shape_of({"model": {"image_shape": [8, 8]}})


def test_pixel_and_canary_out_of_range_are_refused():
  shape = (H, W, 1)
  assert canary_maps.parse_pixel(None, shape) == 2 * W + 2 and canary_maps.parse_pixel("1,3", shape) == 7
  assert canary_maps.parse_pixel("15", shape) == 15
  for bad, match in (("16", r"outside \[0, H\*W=16\)"), ("4,0", "outside the 4x4 image"), ("a", "raster index"),
                     ("-1", "outside")):
    with pytest.raises(InputError, match=match):
      canary_maps.parse_pixel(bad, shape)
  loss, keep, _ = synthetic()
  with pytest.raises(InputError, match=r"--canary=5 is outside \[0, N=5\)"):
    canary_maps.canary_maps(loss, keep, 5, 0)


# ---- the report ----

OUTPUTS = ("canary_maps.png", "pixel_covariance.png", "covariance_heatmap.png", "image_maps.json")


@pytest.mark.parametrize("C", [1, 3])
def test_report_on_a_synthetic_image_run(tmp_path, C):
  write_run(tmp_path, C=C, canaries_2d=C == 3)
  paths, line = image_report.write_image_maps(str(tmp_path))
  out = tmp_path / "image_maps"
  assert sorted(os.listdir(out)) == sorted(OUTPUTS) and sorted(paths) == sorted(str(out / f) for f in OUTPUTS)
  for name in OUTPUTS[:3]:
    assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  result = json.loads((out / "image_maps.json").read_text())
  assert result["schema"]["name"] == "seqlira.image_maps" and result["shape"] == {"M": M, "N": N, "T": T}
  assert result["canary"] == MEMORISED and result["canary_gap_rank"] == 1 and result["largest_gaps"][0]["canary"] == 3
  assert result["pixel"] == 10 and result["pixel_row_column"] == [2, 2] and result["image_shape"] == [H, W, C]
  assert (result["n_in"], result["n_out"]) == (4, 4)
  gap = result["canary_gap"]
  assert gap > 0 and line.startswith(f"canary 3 (the largest gap: IN models' mean loss {gap:.3g} nats below the OUT")


def test_the_gap_is_said_with_its_direction_as_the_difference_panel_reads():
  # the IN - OUT panel's mean of a canary whose IN models lose 0.227 nats less is -0.227: the note says "below"
  assert image_report.gap_words(0.227) == "IN models' mean loss 0.227 nats below the OUT models'"
  assert image_report.gap_words(-0.1) == "IN models' mean loss 0.1 nats above the OUT models'"


def test_report_names_files_by_their_settings(tmp_path):
  write_run(tmp_path)
  image_report.write_image_maps(str(tmp_path), str(tmp_path / "o"), canary=1, pixel="0,3", cov_class="shared")
  assert sorted(os.listdir(tmp_path / "o")) == sorted([
      "canary_maps_canary-1.png", "pixel_covariance_canary-1_pixel-3_covclass-shared.png",
      "covariance_heatmap_canary-1.png", "image_maps_canary-1_pixel-3_covclass-shared.json"])
  result = json.loads((tmp_path / "o" / "image_maps_canary-1_pixel-3_covclass-shared.json").read_text())
  assert result["canary"] == 1 and result["pixel"] == 3 and result["settings"]["cov_class"] == "shared"


def test_report_refuses_a_non_image_run_and_bad_indices_before_writing(tmp_path):
  write_run(tmp_path, config={"model": {"name": "lstm", "hidden_dim": 8}})
  with pytest.raises(InputError, match="not an image run"):
    image_report.write_image_maps(str(tmp_path))
  write_run(tmp_path, config={"data": {"image_shape": [8, 8, 1]}})
  with pytest.raises(InputError, match=r"T=16 positions.*H\*W = 64"):
    image_report.write_image_maps(str(tmp_path))
  write_run(tmp_path)
  for kwargs, match in (({"canary": 5}, r"--canary=5 is outside \[0, N=5\)"), ({"canary": -1}, "outside"),
                        ({"pixel": "4,4"}, "outside the 4x4 image"), ({"pixel": "16"}, "outside")):
    with pytest.raises(InputError, match=match):
      image_report.write_image_maps(str(tmp_path), **kwargs)
  os.remove(tmp_path / "canaries.npy")
  with pytest.raises(MissingFileError, match="canaries.npy"):
    image_report.write_image_maps(str(tmp_path))
  assert not (tmp_path / "image_maps").exists()


def test_covariance_heatmap_draws_a_line_where_each_image_row_starts():
  from lira.reports import cov_plots
  cov = np.eye(T)
  fig = cov_plots.plot_covariance_heatmap(cov, cov, 0, row_width=W, counts={"in": 4, "out": 4}, unit="nats\u00b2")
  ax = fig.axes[0]
  assert sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_ydata()[0] == line.get_ydata()[1]) == [
      3.5, 7.5, 11.5]  # rows start at positions 4, 8, 12: lines between pixel cells
  assert ax.get_title() == "IN (4 models)\nlargest variance 1 nats\u00b2" and "nats\u00b2" in fig.axes[-1].get_ylabel()
  assert not cov_plots.plot_covariance_heatmap(cov, cov, 0).axes[0].get_lines()  # language runs: unchanged
