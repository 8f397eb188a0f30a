"""Image data sets for PixelCNN++ shadow models: integer pixel levels [S, H, W, C] uint8, split into train / held-out.

Sources (config `data.source`):
  digits          scikit-learn's 8 x 8 greyscale digits, 17 levels (0..16), 1,797 images; bundled with
                  scikit-learn, so it works offline on a fresh clone. No official split: held-out images are drawn
                  by a seeded permutation.
  fashion_mnist   an IDX folder (train-images-idx3-ubyte and t10k-images-idx3-ubyte, optionally .gz), 28 x 28,
                  256 levels; test images are the held-out split. Debian / Ubuntu: `apt install
                  dataset-fashion-mnist` installs one in /usr/share/datasets/fashion-mnist (gzipped files, read as
                  they are).
  cifar10         the paper's data: tensorflow_datasets' prepared cifar10 in `data_dir` read through
                  tfds.data_source (no TensorFlow at run time), 32 x 32 x 3, 256 levels; test images held out.
Held-out images identical to a training image are dropped, so an average-case canary is never IN through a twin.
"""

import gzip
import os

import numpy as np

from lira.errors import InputError, MissingFileError, MissingPackageError

SOURCES = ("digits", "fashion_mnist", "cifar10")
CIFAR_HINT = ("prepare it once (needs internet and tensorflow): `tfds build cifar10 --data_dir={d} "
              "--file_format=array_record`, or in Python tfds.builder('cifar10', data_dir='{d}', "
              "file_format='array_record').download_and_prepare()")


def load_digits():
  """scikit-learn's digits as uint8 levels 0..16, [1797, 8, 8, 1]."""
  from sklearn.datasets import load_digits as sk_digits
  return sk_digits().images.astype(np.uint8)[..., None]


def _idx_file(folder, stem):
  for name in (stem, stem + ".gz"):
    if os.path.exists(os.path.join(folder, name)):
      return os.path.join(folder, name)
  raise MissingFileError(f"IDX folder {folder} has no {stem} (nor {stem}.gz); a Fashion-MNIST folder holds "
                         "train-images-idx3-ubyte and t10k-images-idx3-ubyte (e.g. from `apt install "
                         "dataset-fashion-mnist`; `dpkg -L dataset-fashion-mnist` shows where)")


def read_idx_images(path):
  """uint8 images [S, H, W, 1] from an IDX3 file (big-endian header: magic 0x00000803, S, H, W), gzipped or not."""
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rb") as f:
    raw = f.read()
  if len(raw) < 16 or raw[:4] != b"\x00\x00\x08\x03":
    raise InputError(f"{path}: not an IDX3 uint8 image file (magic bytes {raw[:4].hex()}, want 00000803)")
  S, H, W = (int.from_bytes(raw[i:i + 4], "big") for i in (4, 8, 12))
  if len(raw) != 16 + S * H * W:
    raise InputError(f"{path}: header says {S} images of {H} x {W} ({16 + S * H * W} bytes), file has {len(raw)}")
  return np.frombuffer(raw, np.uint8, offset=16).reshape(S, H, W, 1)


def load_idx(folder):
  """(train, test) uint8 [S, H, W, 1] from an IDX folder (MNIST / Fashion-MNIST layout)."""
  folder = os.path.expanduser(folder)
  if not os.path.isdir(folder):
    raise MissingFileError(f"IDX folder {folder!r} (data.data_dir) does not exist")
  paths = [_idx_file(folder, f"{split}-images-idx3-ubyte") for split in ("train", "t10k")]
  return tuple(read_idx_images(p) for p in paths)


def load_cifar10(data_dir):
  """(train, test) uint8 [S, 32, 32, 3] from tensorflow_datasets' prepared cifar10 in data_dir (array_record)."""
  if not data_dir:
    raise InputError("data.data_dir is empty: CIFAR-10 is read from a tensorflow_datasets folder; " +
                     CIFAR_HINT.format(d="DIR"))
  data_dir = os.path.expanduser(data_dir)
  prepared = os.path.join(data_dir, "cifar10")
  versions = sorted(os.listdir(prepared)) if os.path.isdir(prepared) else []
  if not any(os.path.exists(os.path.join(prepared, v, "dataset_info.json")) for v in versions):
    raise MissingFileError(f"data.data_dir={data_dir!r} holds no prepared cifar10 (no cifar10/*/dataset_info.json); "
                           + CIFAR_HINT.format(d=data_dir))
  try:
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise MissingPackageError("CIFAR-10 needs tensorflow-datasets: pip install 'seqlira[images]'") from e
  out = []
  for split in ("train", "test"):
    try:
      source = tfds.data_source("cifar10", split=split, data_dir=data_dir, download=False)
    except (NotImplementedError, FileNotFoundError) as e:  # e.g. prepared as TFRecord, which has no random access
      raise InputError(f"data.data_dir={data_dir!r}: cannot read cifar10's {split} split ({str(e).splitlines()[0]}); "
                       + CIFAR_HINT.format(d=data_dir)) from e
    out.append(np.stack([np.asarray(source[i]["image"], np.uint8) for i in range(len(source))]))
  return tuple(out)


def drop_twins(heldout_SxHxWxC, train_SxHxWxC):
  """Held-out images without those equal to some training image (an OUT canary's twin would make it IN)."""
  seen = {img.tobytes() for img in train_SxHxWxC}
  return heldout_SxHxWxC[np.array([img.tobytes() not in seen for img in heldout_SxHxWxC], bool)]


def split_by_image(images_SxHxWxC, heldout_fraction, seed):
  """(train, held-out): a seeded permutation of the images cut into two disjoint sets of whole images."""
  if not 0.0 < heldout_fraction < 1.0:
    raise InputError(f"data.heldout_fraction must be in (0, 1), got {heldout_fraction}")
  order = np.random.default_rng([seed, 7]).permutation(len(images_SxHxWxC))
  cut = len(order) - int(round(heldout_fraction * len(order)))
  return images_SxHxWxC[np.sort(order[:cut])], images_SxHxWxC[np.sort(order[cut:])]


def load_split(source, data_dir="", heldout_fraction=0.2, seed=0):
  """(train, held-out) uint8 [S, H, W, C], disjoint by image; digits split by seed, the others by their test set."""
  if source == "digits":
    train, heldout = split_by_image(load_digits(), heldout_fraction, seed)
  elif source == "fashion_mnist":
    train, heldout = load_idx(data_dir)
  elif source == "cifar10":
    train, heldout = load_cifar10(data_dir)
  else:
    raise InputError(f"data.source must be one of {', '.join(SOURCES)}, got {source!r}")
  return train, drop_twins(heldout, train)


def check_against_config(images_SxHxWxC, image_shape, num_levels, what):
  """InputError naming model.image_shape / model.num_levels when the data disagree with them."""
  shape = tuple(images_SxHxWxC.shape[1:])
  if shape != tuple(image_shape):
    raise InputError(f"{what} images are {shape} (H, W, C) but model.image_shape is {tuple(image_shape)}")
  top = int(images_SxHxWxC.max()) if images_SxHxWxC.size else 0
  if top >= num_levels:
    raise InputError(f"{what} images hold pixel level {top}, outside model.num_levels={num_levels} (levels "
                     f"0..{num_levels - 1})")
