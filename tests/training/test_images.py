"""Image data for PixelCNN++ runs: digits, IDX folders, CIFAR-10 through tfds (mocked), canaries, bad input."""

import gzip

import numpy as np
import pytest

from lira.errors import InputError, MissingFileError
from training import canaries as canaries_lib
from training import images


def write_idx(path, images_SxHxW):
  header = b"\x00\x00\x08\x03" + b"".join(int(n).to_bytes(4, "big") for n in images_SxHxW.shape)
  raw = header + images_SxHxW.astype(np.uint8).tobytes()
  with (gzip.open if path.endswith(".gz") else open)(path, "wb") as f:
    f.write(raw)


def test_digits_are_17_level_greyscale_and_split_by_image():
  digits = images.load_digits()
  assert digits.shape == (1797, 8, 8, 1) and digits.dtype == np.uint8
  assert digits.min() == 0 and digits.max() == 16
  from sklearn.datasets import load_digits
  np.testing.assert_array_equal(digits[..., 0], load_digits().images)  # the levels are sklearn's, unchanged
  train, heldout = images.load_split("digits", heldout_fraction=0.2, seed=3)
  train_rows = {x.tobytes() for x in train}
  assert not any(x.tobytes() in train_rows for x in heldout)  # no held-out image is also a training image
  assert len(train) == 1797 - 359 and 300 < len(heldout) <= 359
  # every digit lands in exactly one of the two sets (rows of the original, matched by content)
  all_rows = sorted(x.tobytes() for x in digits)
  assert sorted([x.tobytes() for x in train] + [x.tobytes() for x in images.split_by_image(digits, 0.2, 3)[1]]) \
      == all_rows
  other_train, _ = images.load_split("digits", heldout_fraction=0.2, seed=4)
  assert not np.array_equal(train, other_train)  # the seed chooses the split


def test_held_out_twins_of_training_images_are_dropped():
  train = np.arange(3 * 4).reshape(3, 2, 2, 1).astype(np.uint8)
  heldout = np.concatenate([train[1:2], train[1:2] + 20, train[2:3]])
  np.testing.assert_array_equal(images.drop_twins(heldout, train), train[1:2] + 20)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_folder_reads_train_and_test_images(tmp_path, suffix):
  rng = np.random.default_rng(0)
  train, test = rng.integers(0, 256, (5, 4, 8)), rng.integers(0, 256, (3, 4, 8))
  write_idx(str(tmp_path / f"train-images-idx3-ubyte{suffix}"), train)
  write_idx(str(tmp_path / f"t10k-images-idx3-ubyte{suffix}"), test)
  got_train, got_test = images.load_idx(str(tmp_path))
  np.testing.assert_array_equal(got_train[..., 0], train)
  np.testing.assert_array_equal(got_test[..., 0], test)
  assert got_train.dtype == np.uint8 and got_train.shape == (5, 4, 8, 1)
  split_train, split_heldout = images.load_split("fashion_mnist", str(tmp_path))
  np.testing.assert_array_equal(split_train, got_train)  # the test file is the held-out split
  assert len(split_heldout) == 3


def test_idx_folder_without_the_test_file_names_it(tmp_path):
  write_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), np.zeros((2, 4, 4)))
  with pytest.raises(MissingFileError, match=r"has no t10k-images-idx3-ubyte \(nor t10k-images-idx3-ubyte.gz\)"):
    images.load_idx(str(tmp_path))
  with pytest.raises(MissingFileError, match=r"IDX folder .*nowhere.* does not exist"):
    images.load_idx(str(tmp_path / "nowhere"))


def test_damaged_idx_files_are_refused(tmp_path):
  (tmp_path / "bad").write_bytes(b"\x00\x00\x08\x01" + bytes(12))
  with pytest.raises(InputError, match="not an IDX3 uint8 image file"):
    images.read_idx_images(str(tmp_path / "bad"))
  write_idx(str(tmp_path / "short"), np.zeros((2, 4, 4)))
  with open(tmp_path / "short", "ab") as f:
    f.write(b"\x00")
  with pytest.raises(InputError, match=r"header says 2 images of 4 x 4 \(48 bytes\), file has 49"):
    images.read_idx_images(str(tmp_path / "short"))


def test_cifar10_through_tfds_data_source_with_mock_data(tmp_path):
  tfds = pytest.importorskip("tensorflow_datasets")
  (tmp_path / "cifar10" / "3.0.2").mkdir(parents=True)
  (tmp_path / "cifar10" / "3.0.2" / "dataset_info.json").write_text("{}")  # looks prepared; mock_data serves rows
  with tfds.testing.mock_data(num_examples=6):
    train, heldout = images.load_split("cifar10", str(tmp_path))
  assert train.shape == (6, 32, 32, 3) and train.dtype == np.uint8
  assert heldout.shape[1:] == (32, 32, 3) and len(heldout) <= 6
  import sys
  assert "tensorflow" not in sys.modules  # reading prepared data needs no TensorFlow


def test_cifar10_without_prepared_data_says_how_to_prepare_it(tmp_path):
  with pytest.raises(MissingFileError, match=r"holds no prepared cifar10.*tfds build cifar10 --data_dir=.*"
                                             r"download_and_prepare\(\)"):
    images.load_cifar10(str(tmp_path))


def test_images_disagreeing_with_the_config_name_the_field():
  digits = images.load_digits()
  with pytest.raises(InputError, match=r"\(8, 8, 1\) \(H, W, C\) but model.image_shape is \(32, 32, 3\)"):
    images.check_against_config(digits, (32, 32, 3), 17, "digits")
  with pytest.raises(InputError, match=r"pixel level 16, outside model.num_levels=8"):
    images.check_against_config(digits, (8, 8, 1), 8, "digits")
  images.check_against_config(digits, (8, 8, 1), 17, "digits")


def test_worst_case_images_are_uniform_over_the_levels():
  canaries = canaries_lib.worst_case_images(400, (8, 8, 1), 17, seed=0)
  assert canaries.shape == (400, 8, 8, 1) and canaries.dtype == np.uint8
  counts = np.bincount(canaries.ravel(), minlength=17)
  assert len(counts) == 17  # levels 0..16 only
  # 25,600 draws, 1,506 expected per level: binomial std ~38, so 6 std (230) either side is rounding-free noise
  assert np.abs(counts - 25_600 / 17).max() < 230, counts
  np.testing.assert_array_equal(canaries, canaries_lib.worst_case_images(400, (8, 8, 1), 17, seed=0))


def test_average_case_images_are_distinct_held_out_images():
  _, heldout = images.load_split("digits", heldout_fraction=0.2, seed=0)
  canaries = canaries_lib.average_case_images(heldout, 50, seed=1)
  assert canaries.shape == (50, 8, 8, 1) and canaries.dtype == np.uint8
  held = {x.tobytes() for x in heldout}
  assert all(c.tobytes() in held for c in canaries)
  assert len({c.tobytes() for c in canaries}) == 50
