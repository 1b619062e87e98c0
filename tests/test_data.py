import gzip

import numpy as np
import pytest

from common.facts import data


def _write_set(folder, n_train=30, n_test=10, gz=True):
    rng = np.random.default_rng(0)
    suffix = ".gz" if gz else ""
    arrays = {"train_images": rng.integers(0, 256, (n_train, 28, 28)),
              "train_labels": rng.integers(0, 10, n_train),
              "test_images": rng.integers(0, 256, (n_test, 28, 28)),
              "test_labels": rng.integers(0, 10, n_test)}
    for key, (stem, _) in data.FILES.items():
        data.write_idx(folder / (stem + suffix), arrays[key])
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_generated_idx_files_read_back(tmp_path, gz):
    arrays = _write_set(tmp_path, gz=gz)
    ds = data.load_fashion_mnist(str(tmp_path))
    assert ds.X_train.shape == (30, 1, 28, 28) and ds.X_train.dtype == np.float32
    assert ds.X_test.shape == (10, 1, 28, 28)
    np.testing.assert_array_equal(ds.X_train[:, 0] * 255, arrays["train_images"])
    np.testing.assert_array_equal(ds.y_test, arrays["test_labels"])


def test_truncated_file_is_a_clear_error(tmp_path):
    _write_set(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(data.DataError, match="truncated or corrupt"):
        data.load_fashion_mnist(str(tmp_path))


def test_broken_gzip_is_a_clear_error(tmp_path):
    _write_set(tmp_path)
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(data.DataError, match="cannot read"):
        data.load_fashion_mnist(str(tmp_path))


def test_wrong_magic_is_a_clear_error(tmp_path):
    _write_set(tmp_path, gz=False)
    path = tmp_path / "train-labels-idx1-ubyte"
    raw = bytearray(path.read_bytes())
    raw[2] = 0x0D                                   # float32 data, not bytes
    path.write_bytes(bytes(raw))
    with pytest.raises(data.DataError, match="bad magic number"):
        data.load_fashion_mnist(str(tmp_path))


def test_mismatched_counts_are_a_clear_error(tmp_path):
    _write_set(tmp_path)
    data.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(7, np.uint8))
    with pytest.raises(data.DataError, match="do not form"):
        data.load_fashion_mnist(str(tmp_path))


def test_missing_data_names_every_place_tried(tmp_path, monkeypatch):
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "debian")
    with pytest.raises(data.DataError) as e:
        data.locate_fashion_mnist(download=False)
    message = str(e.value)
    for place in ("env", "cache", "debian", "--data-dir", "dataset-fashion-mnist", "synthetic"):
        assert place in message
    assert "\n" not in message


def test_explicit_data_dir_is_not_second_guessed(tmp_path):
    with pytest.raises(data.DataError, match=str(tmp_path)):
        data.locate_fashion_mnist(str(tmp_path))


def test_synthetic_is_deterministic_and_well_formed():
    a, b, c = data.synthetic(0), data.synthetic(0), data.synthetic(1)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.X_train, c.X_train)
    assert a.X_train.shape[1:] == (1, 28, 28) and a.X_train.dtype == np.float32
    assert 0 <= a.X_train.min() and a.X_train.max() <= 1
    assert set(np.unique(a.y_train)) == set(range(10))


def test_batch_order_is_shared_and_complete():
    first = data.batch_order(1000, 64, epoch=0, seed=5)
    np.testing.assert_array_equal(first, data.batch_order(1000, 64, epoch=0, seed=5))
    assert first.shape == (15, 64) and len(np.unique(first)) == 15 * 64
    assert not np.array_equal(first, data.batch_order(1000, 64, epoch=1, seed=5))


@pytest.mark.parametrize("batch,parts", [(10, 2), (11, 3), (256, 2), (5, 5)])
def test_shard_bounds_cover_the_batch(batch, parts):
    bounds = data.shard_bounds(batch, parts)
    assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_synthetic_data_is_learnable():
    """Softmax regression trained on the synthetic train set for a few epochs of plain
    SGD (NumPy, no framework) reaches a test accuracy far above chance (0.1), and a
    model that sees shuffled labels does not: the data carries its labels."""
    ds = data.synthetic(0)

    def fit_and_score(y_train):
        X = ds.X_train.reshape(len(ds.X_train), -1).astype(np.float64)
        W, b = np.zeros((X.shape[1], 10)), np.zeros(10)
        for epoch in range(3):
            for idx in data.batch_order(len(X), 256, epoch, 0):
                z = X[idx] @ W + b
                p = np.exp(z - z.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                p[np.arange(len(idx)), y_train[idx]] -= 1
                W -= 0.1 * X[idx].T @ p / len(idx)
                b -= 0.1 * p.mean(axis=0)
        logits = ds.X_test.reshape(len(ds.X_test), -1) @ W + b
        return float((logits.argmax(axis=1) == ds.y_test).mean())

    learned = fit_and_score(ds.y_train)
    shuffled = fit_and_score(np.random.default_rng(0).permutation(ds.y_train))
    assert learned > 0.9, learned
    assert shuffled < 0.2, shuffled


def test_a_resize_is_scipys_bilinear_zoom_of_each_whole_image():
    """d2l's ViT size takes 96-pixel images: the data layer resizes once (rows and columns
    by one interpolation matrix) to what scipy.ndimage.zoom makes of each whole image; the
    check tells a resize that swapped rows and columns apart (the images are not symmetric)."""
    from scipy.ndimage import zoom
    X = data.synthetic(0, n_train=8, n_test=8).X_train
    want = zoom(X, (1, 1, 96 / 28, 96 / 28), order=1, grid_mode=True, mode="nearest")
    got = data.resized(X, 96)
    assert got.shape == (8, 1, 96, 96) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-6)
    swapped = data.resized(X.swapaxes(2, 3), 96)
    assert np.abs(swapped - want).max() > 0.1
    assert data.load("synthetic", side=96).X_test.shape[1:] == (1, 96, 96)
