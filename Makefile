# Lights-Out developer entry points. Every target does its own set-up.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# Python 3.12 (the full `ansible` package needs it): pyenv's 3.12.x when present, else PATH's.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12) python3.12)
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml lab/pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup binaries cluster-autoscaler images images-previous test test-unit test-e2e test-molecule lint crds demo dashboard-check dev-cluster bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml lab/pyproject.toml
	@test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[ansible,dev,sim,plot]' -e ./lab
	@rm -f $(VENV)/.installed-*; touch $@

binaries:
	@bash tools/controlplane/build.sh >/dev/null
	@bash tools/helm/build.sh >/dev/null

# A real cluster-autoscaler (externalgrpc provider only) for its e2e tests and `make bench`; the
# tests build it on first use too, this makes the time visible (minutes cold, none when cached).
cluster-autoscaler:
	@bash tools/cluster-autoscaler/build.sh >/dev/null

# The operator and runner images, built without Docker (mmdebstrap + buildah, see
# tools/images/build.sh) into ~/.cache/lightsout/images as docker-archive tars; warm: nothing.
images:
	@bash tools/images/build.sh

# The previous release's images and chart (tools/images/previous-release, built from that commit
# with `git archive`: it needs the git history), which tests/e2e/test_install.py upgrades from.
# Only the tests need them, so README's install block (`make images`) does not build them.
images-previous:
	@bash tools/images/build.sh --previous >/dev/null

# The suite runs in parallel workers (pytest-xdist), each with its own control plane; the tests
# of the host's one real node go to one worker (tests/conftest.py). Budget: 25 minutes on 2
# cores (README, "Test time"). The 25 slowest tests are listed at the end.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# Every operator, CLI and lab process imports the project's own modules: compiled once here, not
# by each of them where PYTHONDONTWRITEBYTECODE keeps Python from caching its compilations
# (about 0.5 CPU-s per operator start on this machine).
PRECOMPILE := $(PY) -m compileall -q src lab/src

test: setup binaries cluster-autoscaler images images-previous
	@bash tools/ci/system-packages.sh tests node prometheus
	@$(PRECOMPILE)
	$(PY) -m pytest $(XDIST) --durations=25 tests

test-unit: setup
	$(PY) -m pytest -n 2 -m unit tests

test-e2e: setup binaries cluster-autoscaler images images-previous
	@bash tools/ci/system-packages.sh tests node prometheus
	@$(PRECOMPILE)
	$(PY) -m pytest $(XDIST) --durations=25 -m e2e tests

# The scenarios start the lab's emulators: ipmi_sim and ipmitool, sshd, dnsmasq (system packages).
test-molecule: setup
	@bash tools/ci/system-packages.sh tests
	$(PY) -m pytest -n 2 -m molecule tests

lint: setup
	$(VENV)/bin/ruff check src lab tests benchmarks
	$(VENV)/bin/ruff format --check src lab tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/yamllint -s playbooks roles deploy crds
	$(VENV)/bin/ansible-lint playbooks roles

crds: setup
	$(VENV)/bin/lightsout crds --output crds
	$(VENV)/bin/lightsout crds --output deploy/helm/lightsout/crds
	$(PY) -m lightsout.models.reference docs/crds.md
	$(PY) -m lightsout.models.drivers playbooks/vars/drivers.yml --roles roles

# ipmi_sim, ipmitool and sshd emulate the IPMI server and the Wake-on-LAN mini PC (idempotent;
# apt-get via sudo when not root, only when something is missing).
demo: setup binaries
	@bash tools/ci/system-packages.sh
	$(VENV)/bin/lightsout-lab demo

# The demo's scenario under a real Prometheus (Debian's), then every Grafana panel's query
# through its HTTP API: exits 1 when one returns no data (lab/src/lightsout_lab/dashboard.py).
dashboard-check: setup binaries
	@bash tools/ci/system-packages.sh tests prometheus
	$(VENV)/bin/lightsout-lab dashboard-check

# A control plane that outlives the command, for kubectl: `make dev-cluster`, then
# `eval "$$(.venv/bin/lightsout-lab dev-cluster env)"`; `.venv/bin/lightsout-lab dev-cluster down`.
dev-cluster: setup binaries
	$(VENV)/bin/lightsout-lab dev-cluster up

bench: setup binaries
	$(PY) -m benchmarks.planner
	$(PY) -m benchmarks.power_timeline 5
	$(PY) -m benchmarks.scaleup_latency 20
	$(PY) -m benchmarks.ca_latency 5
	$(PY) -m benchmarks.metrics_scrape 10 100 1000
	$(PY) -m benchmarks.fleet 1 100 1000
	$(PY) -m benchmarks.simulator 120
	$(PY) -m benchmarks.outage
	$(PY) -m benchmarks.cheap_hours

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
