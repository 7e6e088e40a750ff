"""The digits data set and its one fixed train/test split.

Models, golden sets, the gateway's fallback checks, tests and load tests all import this split,
so accuracies computed anywhere are comparable; the parameters below are part of the contract.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

N_FEATURES = 64
N_CLASSES = 10
TEST_SIZE = 0.25
RANDOM_STATE = 0

Features = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


class Split(NamedTuple):
    X_train: Features
    X_test: Features
    y_train: Labels
    y_test: Labels


def load_split() -> Split:
    """(X_train, X_test, y_train, y_test): float32 features in [0, 16], int64 labels 0..9.

    Stratified, ``test_size=0.25``, ``random_state=0``: 1347 training and 450 test rows.
    """
    digits = load_digits()
    X = np.ascontiguousarray(digits.data, dtype=np.float32)
    y = np.ascontiguousarray(digits.target, dtype=np.int64)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=TEST_SIZE, stratify=y, random_state=RANDOM_STATE
    )
    return Split(
        np.ascontiguousarray(X_train),
        np.ascontiguousarray(X_test),
        np.ascontiguousarray(y_train),
        np.ascontiguousarray(y_test),
    )
