from __future__ import annotations

import hashlib

import numpy as np

from replicas.dataset import N_CLASSES, N_FEATURES, Split, load_split

# Pinned so that a change in scikit-learn's bundled data or its splitter cannot silently move the
# golden set, the manifest accuracies and every test that relies on this split.
SPLIT_SHA256 = "dc7f6068be0c5aa92e516c77fe4567d72020e3ef6b07883c0b63bff8ab36246e"


def _digest(split: Split) -> str:
    h = hashlib.sha256()
    for part in split:
        h.update(part.tobytes())
    return h.hexdigest()


def test_shapes_and_dtypes(split: Split) -> None:
    assert split.X_train.shape == (1347, N_FEATURES)
    assert split.X_test.shape == (450, N_FEATURES)
    assert split.X_train.dtype == np.float32 and split.X_test.dtype == np.float32
    assert split.y_train.dtype == np.int64 and split.y_test.dtype == np.int64
    assert split.X_test.flags.c_contiguous


def test_split_is_stratified(split: Split) -> None:
    train = np.bincount(split.y_train, minlength=N_CLASSES) / len(split.y_train)
    test = np.bincount(split.y_test, minlength=N_CLASSES) / len(split.y_test)
    assert np.abs(train - test).max() < 0.01


def test_split_is_stable() -> None:
    first, second = load_split(), load_split()
    assert _digest(first) == _digest(second)


def test_split_is_pinned(split: Split) -> None:
    assert _digest(split) == SPLIT_SHA256
