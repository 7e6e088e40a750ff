# The two commands: `make run` (venv, install, models, local replicas + gateway) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
MODELS := models/MANIFEST.json
CONFIG ?= config/local.yaml

.PHONY: run test lint unit bench faults chaos capacity peers setup system clean deploy-check

run: setup
	$(VENV)/bin/gateway up --config $(CONFIG)

test: setup peers
	@WITH_CHROMIUM=1 bash .ci/system-deps.sh
	@WITH_PROMTOOL=1 bash .ci/system-deps.sh
	$(VENV)/bin/ruff check gateway replicas v2proto tests loadtests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider

unit: setup
	$(PY) -m pytest -q -m "not integration"

lint: setup
	$(VENV)/bin/ruff check gateway replicas v2proto tests loadtests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: setup
	@WITH_NGINX=1 bash .ci/system-deps.sh
	$(PY) loadtests/bench_overhead.py --variants
	$(PY) loadtests/bench_grpc.py
	$(PY) loadtests/bench_grpc_upstream.py
	$(PY) loadtests/bench_payloads.py
	$(PY) loadtests/bench_pressure.py

faults: setup
	$(PY) loadtests/bench_faults.py

chaos: setup
	$(PY) -m loadtests.chaos

capacity: setup
	$(PY) -m loadtests.chaos.capacity

# Real MLServer and KServe venvs under .peers/ for tests/peers (about 2 min the first time, then
# cached: a venv is rebuilt only when its pins change).
peers: system
	bash .ci/peers.sh

# Container images and Kubernetes manifests, checked offline (no cluster, no container runtime):
# kubernetes-validate (dev extra) and `gateway check-config` in tests/deploy, and checkov, which
# pins many packages and so gets its own venv outside the repository (about 20 s the first time).
DEPLOY_TOOLS    ?= $(HOME)/.cache/v2-gateway/deploy-tools
CHECKOV_VERSION ?= 3.3.30
CHECKOV         := $(DEPLOY_TOOLS)/bin/checkov

deploy-check: $(STAMP) $(CHECKOV)
	$(CHECKOV) -d deploy --framework kubernetes dockerfile --compact --quiet --skip-download
	CHECKOV=$(CHECKOV) $(PY) -m pytest -q -p no:cacheprovider tests/deploy

$(CHECKOV):
	$(PYTHON) -m venv $(DEPLOY_TOOLS)
	$(DEPLOY_TOOLS)/bin/pip install -q --upgrade pip
	$(DEPLOY_TOOLS)/bin/pip install -q 'checkov==$(CHECKOV_VERSION)'

setup: system $(STAMP) $(MODELS)

system:
	@bash .ci/system-deps.sh

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,replica,dev,load,build]'
	touch $(STAMP)

$(MODELS): $(STAMP)
	$(VENV)/bin/replica build-models --out models

clean:
	rm -rf $(VENV) models .mypy_cache .ruff_cache
