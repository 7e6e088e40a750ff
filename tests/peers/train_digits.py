"""Trains the digits estimator that the real peer servers (MLServer, KServe) serve.

Run in the MLServer venv by `.ci/peers.sh` (and by the peer tests when the model is missing),
so the pickle matches the scikit-learn pinned in the peer venvs, not the project's own one.
It trains on the project's one fixed split, so the tests can check answers against ``y_test``.
Writes ``<out>/digits/model.joblib`` and MLServer's ``model-settings.json`` beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MODEL_NAME = "digits"
MODEL_VERSION = "1"
MODEL_FILE = "model.joblib"


def model_settings() -> dict[str, object]:
    """MLServer's ``model-settings.json``: the sklearn runtime answers ``predict`` by default."""
    return {
        "name": MODEL_NAME,
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": f"./{MODEL_FILE}", "version": MODEL_VERSION},
    }


def train(out: Path) -> float:
    """Fits, checks and writes the model under ``out/digits``; returns its test accuracy."""
    import joblib  # type: ignore[import-untyped]  # the peer venv's, not the project's
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from replicas.dataset import load_split

    split = load_split()
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
    model.fit(split.X_train, split.y_train)
    accuracy = float(model.score(split.X_test, split.y_test))
    directory = out / MODEL_NAME
    directory.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, directory / MODEL_FILE)
    settings = json.dumps(model_settings(), indent=2) + "\n"
    (directory / "model-settings.json").write_text(settings)
    return accuracy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="models directory")
    args = parser.parse_args(argv)
    accuracy = train(args.out)
    print(f"peers: digits model in {args.out / MODEL_NAME}, test accuracy {accuracy:.4f}")
    return 0 if accuracy >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
