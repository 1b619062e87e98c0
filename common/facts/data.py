"""Fashion-MNIST from its IDX files, a deterministic synthetic stand-in, and the
batch order that every framework shares."""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np


ENV_VAR = "FASHION_MNIST_DIR"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")   # Debian package dataset-fashion-mnist
MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# MD5 of the gzipped files, as published by the dataset's authors.
FILES = {
    "train_images": ("train-images-idx3-ubyte", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
    "train_labels": ("train-labels-idx1-ubyte", "25c81989df183df01b3e8a0aad5dffbe"),
    "test_images": ("t10k-images-idx3-ubyte", "bef4ecab320f06d8554ea6380940ec79"),
    "test_labels": ("t10k-labels-idx1-ubyte", "bb300cfdad3c16e7a12a480ee83cd310"),
}
IDX_DTYPE = {0x08: np.uint8}
IMAGE_SHAPE = (1, 28, 28)       # one channel, 28 x 28: what every model here takes
NUM_CLASSES = 10


class DataError(RuntimeError):
    """The data could not be found or read; the message says what to do."""


@dataclass
class Dataset:
    name: str
    X_train: np.ndarray   # float32, N,1,28,28, in [0, 1]
    y_train: np.ndarray   # int64
    X_test: np.ndarray
    y_test: np.ndarray


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (optionally gzipped); any inconsistency is a DataError."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read {path}: {e}; delete it and fetch the file again") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPE:
        raise DataError(f"{path} is not an IDX file of unsigned bytes (bad magic number); "
                        "delete it and fetch the file again")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path} is truncated inside its header; delete it and fetch it again")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise DataError(f"{path} holds {len(raw) - header} data bytes but its header promises "
                        f"{expected} for shape {shape}; the file is truncated or corrupt, "
                        "delete it and fetch it again")
    return np.frombuffer(raw, IDX_DTYPE[raw[2]], offset=header).reshape(shape)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write an array of uint8 as an IDX file (gzipped when the name ends in .gz)."""
    array = np.ascontiguousarray(array, np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dl-compare" / "fashion-mnist"


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def _download(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stem, md5 in FILES.values():
        target = directory / (stem + ".gz")
        if target.is_file():
            continue
        with urllib.request.urlopen(MIRROR + stem + ".gz", timeout=30) as r:
            blob = r.read()
        if hashlib.md5(blob).hexdigest() != md5:
            raise DataError(f"download of {stem}.gz failed its checksum; try again later")
        with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:
            tmp.write(blob)
        os.replace(tmp.name, target)


def locate_fashion_mnist(data_dir: str | None = None, download: bool = True) -> Path:
    """The first directory holding all four files: --data-dir, $FASHION_MNIST_DIR,
    the user's cache, Debian's package; else a checked download into the cache."""
    if data_dir is not None:
        candidates = [Path(data_dir)]          # an explicit choice is not second-guessed
    else:
        candidates = [Path(os.environ[ENV_VAR])] if os.environ.get(ENV_VAR) else []
        candidates += [cache_dir(), DEBIAN_DIR]
    for d in candidates:
        if all(_find(d, stem) for stem, _ in FILES.values()):
            return d
    tried = ", ".join(str(d) for d in candidates)
    if data_dir is None and download:
        try:
            _download(cache_dir())
            return cache_dir()
        except (OSError, DataError) as e:
            tried += f", download from {MIRROR} ({e})"
    raise DataError(
        f"Fashion-MNIST not found (tried: {tried}); fix: install Debian's package "
        f"dataset-fashion-mnist, or put the four IDX files in a folder and pass --data-dir "
        f"or set {ENV_VAR}, or use --dataset synthetic")


def _to_float(images: np.ndarray) -> np.ndarray:
    return (images.astype(np.float32) / 255.0).reshape(-1, *IMAGE_SHAPE)


def load_fashion_mnist(data_dir: str | None = None) -> Dataset:
    d = locate_fashion_mnist(data_dir)
    arrays = {k: read_idx(_find(d, stem)) for k, (stem, _) in FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE[1:] or labels.ndim != 1 \
                or len(images) != len(labels):
            raise DataError(f"{d}: {split} images {images.shape} and labels {labels.shape} "
                            "do not form a 28x28 image set; check the files")
    return Dataset("fashion-mnist", _to_float(arrays["train_images"]),
                   arrays["train_labels"].astype(np.int64),
                   _to_float(arrays["test_images"]), arrays["test_labels"].astype(np.int64))


def synthetic(seed: int = 0, n_train: int = 12_288, n_test: int = 2_048) -> Dataset:
    """A learnable, deterministic stand-in: ten random prototype images plus noise,
    quantised to bytes exactly as real images are."""
    rng = np.random.default_rng(seed)
    prototypes = rng.random((NUM_CLASSES, *IMAGE_SHAPE[1:]))

    def make(n):
        y = rng.integers(0, NUM_CLASSES, n)
        images = np.clip(prototypes[y] * 0.6 + rng.random((n, *IMAGE_SHAPE[1:])) * 0.4, 0, 1)
        return _to_float(np.round(images * 255).astype(np.uint8)), y.astype(np.int64)

    X_train, y_train = make(n_train)
    X_test, y_test = make(n_test)
    return Dataset("synthetic", X_train, y_train, X_test, y_test)


def load(name: str, data_dir: str | None = None, seed: int = 0, side: int = IMAGE_SHAPE[1]) -> Dataset:
    """The dataset, its images `side` pixels square (a model's IMAGE_SHAPE: d2l's ViT
    takes 96)."""
    if name == "fashion-mnist":
        ds = load_fashion_mnist(data_dir)
    elif name == "synthetic":
        ds = synthetic(seed)
    else:
        raise DataError(f"unknown dataset {name!r}; choose fashion-mnist or synthetic")
    if side != IMAGE_SHAPE[1]:
        ds.X_train, ds.X_test = resized(ds.X_train, side), resized(ds.X_test, side)
    return ds


def resized(X: np.ndarray, side: int) -> np.ndarray:
    """Images resized to side x side, bilinearly (d2l resizes Fashion-MNIST for its ViT
    with torchvision's Resize): once, here, so every framework trains on the same bytes."""
    from scipy.ndimage import zoom
    n = X.shape[-1]
    # bilinear is separable: rows and columns each by the (side, n) matrix that scipy's
    # zoom makes of every unit vector (zoom over whole images: 48 s for 12,288 of them)
    A = np.stack([zoom(np.eye(n)[j], side / n, order=1, grid_mode=True, mode="nearest")
                  for j in range(n)], axis=1).astype(np.float32)
    return np.matmul(np.matmul(A, X), A.T)


def batch_order(n: int, batch_size: int, epoch: int, seed: int) -> np.ndarray:
    """Indices of every full batch of one epoch, shape (steps, batch_size).

    Computed once in NumPy from (seed, epoch), so every framework sees the same
    batches in the same order. The last partial batch is dropped: every step then
    has the same shape, which graph-compiling frameworks need to avoid retracing."""
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    steps = n // batch_size
    return perm[: steps * batch_size].reshape(steps, batch_size)


def shard_bounds(batch: int, parts: int) -> list[tuple[int, int]]:
    """How a batch is cut into `parts` contiguous shards (sizes differ by at most one)."""
    edges = np.cumsum([0] + [batch // parts + (i < batch % parts) for i in range(parts)])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def train_size(name: str, data_dir: str | None = None, seed: int = 0) -> int:
    """Number of training images, without loading the images (for progress totals)."""
    if name == "synthetic":
        return len(synthetic(seed).y_train)
    d = locate_fashion_mnist(data_dir)
    return len(read_idx(_find(d, FILES["train_labels"][0])))
