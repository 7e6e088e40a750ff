#!/usr/bin/env bash
# Builds the real Open Inference Protocol servers the peer tests (tests/peers/) run against:
#   .peers/mlserver  MLServer with its scikit-learn runtime
#   .peers/kserve    KServe's Python model server (tests/peers/kserve_digits.py runs in it)
#   .peers/models    the digits estimator both serve, trained in the MLServer venv
# Each gets its own venv because they pin conflicting packages. Idempotent: a venv is rebuilt
# only when its stamp file does not record exactly the requirements below, so changing a pin
# rebuilds it; the model likewise when its trainer or scikit-learn pin changes.
# Installs are sequential (one pip at a time) and each one's wall time is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
PEERS="${PEERS_DIR:-.peers}"

# scikit-learn and joblib are pinned alike in both venvs: KServe unpickles the estimator that
# the MLServer venv trained, and a pickle is only safe to load under the same scikit-learn.
SKLEARN="scikit-learn==1.9.1 joblib==1.6.0"
# A uvloop newer than 0.21 (0.23 was tried) raises in get_event_loop() without a running loop,
# which MLServer 1.7.1's parallel workers call at start: every worker would die at once.
MLSERVER_REQ="mlserver==1.7.1 mlserver-sklearn==1.7.1 uvloop==0.21.0 $SKLEARN"
KSERVE_REQ="kserve==0.21.0 $SKLEARN"

build_venv() {  # name requirements...
  local name="$1"; shift
  local dir="$PEERS/$name" stamp="$PEERS/$name/.peer-stamp" want="$*"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/python" ]; then
    echo "peers: $name up to date ($want)"
    return
  fi
  echo "peers: building $name ($want)"
  local start=$SECONDS
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  # The machine's pip config names local indexes that may be absent: drop those warnings only.
  "$dir/bin/python" -m pip install -q --upgrade pip 2> >(grep -v "is ignored" >&2)
  "$dir/bin/python" -m pip install -q "$@" 2> >(grep -v "is ignored" >&2)
  echo "$want" >"$stamp"
  echo "peers: $name built in $((SECONDS - start)) s ($(du -sh "$dir" | cut -f1))"
}

mkdir -p "$PEERS"
# shellcheck disable=SC2086  # each requirement list is meant to be split into words
build_venv mlserver $MLSERVER_REQ
# shellcheck disable=SC2086
build_venv kserve $KSERVE_REQ

models_stamp="$PEERS/models/.peer-stamp"
models_want="$SKLEARN $(sha256sum tests/peers/train_digits.py | cut -c1-16)"
if [ -f "$models_stamp" ] && [ "$(cat "$models_stamp")" = "$models_want" ]; then
  echo "peers: models up to date"
else
  start=$SECONDS
  PYTHONPATH=. "$PEERS/mlserver/bin/python" tests/peers/train_digits.py --out "$PEERS/models"
  echo "$models_want" >"$models_stamp"
  echo "peers: models trained in $((SECONDS - start)) s"
fi
