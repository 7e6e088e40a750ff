# The two commands: `make run` (venv, install, models, local replicas + gateway) and `make test`
# (lint, format and type checks, the docs' strict build, the suite with coverage, its wall time).
# `make fmt` fixes what `make lint` (and so `make test`) checks and can fix by itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
MODELS := models/MANIFEST.json
CONFIG ?= config/local.yaml
CONSTRAINTS := constraints/dev.txt

.PHONY: run test lint fmt unit docs docs-check bench faults chaos capacity soak peers setup system clean deploy-check

run: setup
	$(VENV)/bin/gateway up --config $(CONFIG)

LINTED := gateway replicas v2proto tests loadtests
# mkdocs-material's notice about its successor on every build
export NO_MKDOCS_2_WARNING := 1

# The suite's wall time (lint, docs and tests together) is printed last, pass or fail. Its tests
# run on TEST_WORKERS processes, a file to a worker (most of a test waits on the processes it
# started); the `solo` ones, trends that a busy machine would blur, run after, one at a time
# (only the files that mark any: collecting the whole suite again costs a quarter of a minute).
# The 20 slowest tests are listed: where the next cut of the wall time is.
TEST_WORKERS ?= 3
test: setup peers
	@WITH_CHROMIUM=1 bash .ci/system-deps.sh
	@WITH_PROMTOOL=1 bash .ci/system-deps.sh
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint docs-check \
	&& $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m "not solo" \
		--cov --cov-report=term:skip-covered --durations=20 \
	&& $(PY) -m pytest -q -p no:cacheprovider -m solo $$(grep -rl "mark.solo" tests); \
	status=$$?; echo "make test: wall time $$(( $$(date +%s) - start )) s"; exit $$status

unit: setup
	$(PY) -m pytest -q -m "not integration"

lint: setup
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# What `lint` checks that a tool can fix: the lint rules with a safe fix (import order, pyupgrade's
# rewrites...), then the format. It fails on what is left for you (a rule without a fix); mypy
# and lint-imports fix nothing, so `make lint` still runs them.
fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix --exit-zero --quiet $(LINTED)
	$(VENV)/bin/ruff format --quiet $(LINTED)
	$(VENV)/bin/ruff check $(LINTED)

# The documentation site: regenerate the generated pages, then build it into site/.
docs: setup
	$(PY) -m gateway.config.reference -o docs/configuration.md
	$(PY) loadtests/perf_page.py
	$(VENV)/bin/mkdocs build --strict

# What `make test` checks of the site: a strict build (broken links and anchors, pages missing
# from the nav fail) into a temporary folder; the generated pages' currency is a test.
docs-check: setup
	@out=$$(mktemp -d); $(VENV)/bin/mkdocs build --strict --quiet -d $$out; status=$$?; \
	rm -rf $$out; exit $$status

bench: setup
	@WITH_NGINX=1 WITH_VALGRIND=1 WITH_WRK=1 bash .ci/system-deps.sh
	-$(PY) loadtests/bench_calls.py
	$(PY) loadtests/bench_instructions.py
	$(PY) loadtests/bench_overhead.py --variants
	$(PY) loadtests/bench_grpc.py
	$(PY) loadtests/bench_grpc_upstream.py
	$(PY) loadtests/bench_payloads.py
	$(PY) loadtests/bench_pressure.py
	$(PY) loadtests/bench_scaling.py --rounds 3
	$(PY) loadtests/bench_isolation.py

faults: setup
	$(PY) loadtests/bench_faults.py

chaos: setup
	$(PY) -m loadtests.chaos

capacity: setup
	$(PY) -m loadtests.chaos.capacity

# Steady load on loopback for SOAK_MINUTES (default 15) with the gateway's RSS sampled; fails when
# memory grows per request after the warm-up (loadtests/soak.py). SOAK_DOORS: rest, grpc, vote.
SOAK_DOORS   ?= rest
SOAK_MINUTES ?= 15
soak: setup
	$(PY) -m loadtests.soak --doors $(SOAK_DOORS) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

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

# The dev tools come at the versions pinned in $(CONSTRAINTS); changing a pin reinstalls.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c $(CONSTRAINTS) -e '.[cpu,replica,dev,load,build]'
	touch $(STAMP)

$(MODELS): $(STAMP)
	$(VENV)/bin/replica build-models --out models

clean:
	rm -rf $(VENV) models .mypy_cache .ruff_cache
