# strom — two commands do all the set-up: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
PORT ?= 9092
DATA_DIR ?= ./data
SHARED ?= ../shared

.PHONY: run cluster test venv install install-test system-deps bench-deps lint typecheck contracts codegen-check unit compat bench dist clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The runtime install; re-run when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed
install: $(VENV)/.installed
install-test: $(VENV)/.installed-test system-deps

# Debian packages the tests drive: kcat (a real Kafka client in C), zookeeper (the cluster's
# coordination service; tests/cluster runs its jar with java on 127.0.0.1), and chromium with
# chromium-driver (tests/console drive the web console in headless Chromium through selenium).
system-deps:
	@if ! command -v kcat >/dev/null 2>&1; then \
		echo "installing kcat with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; \
	fi
	@if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then \
		echo "installing zookeeper with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; \
	fi
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

run: $(VENV)/.installed
	$(VENV)/bin/strom broker --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR)

# A ZooKeeper and BROKERS brokers on 127.0.0.1 (ports PORT, PORT+1, ...) until Ctrl-C.
BROKERS ?= 3
CLUSTER_DATA_DIR ?= ./cluster-data
cluster: $(VENV)/.installed system-deps
	$(VENV)/bin/strom cluster up --brokers $(BROKERS) --base-port $(PORT) --data-dir $(CLUSTER_DATA_DIR)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check src tests tools benchmarks
	$(VENV)/bin/ruff format --check src tests tools benchmarks

typecheck: $(VENV)/.installed-test
	$(VENV)/bin/mypy

contracts: $(VENV)/.installed-test
	$(VENV)/bin/lint-imports

# The generated protocol code must match the specification; the specification lives in ../shared,
# which users' clones do not have, so the check runs only where it is present.
codegen-check: $(VENV)/.installed-test
	@if [ -d "$(SHARED)/reference/kafka-protocol/message" ]; then \
		$(PY) -m tools.codegen --spec $(SHARED)/reference/kafka-protocol --check; \
	else \
		echo "codegen-check: $(SHARED)/reference/kafka-protocol not present; skipped (it runs in CI)"; \
	fi

unit: install-test
	$(PY) -m pytest -q tests --ignore=tests/compat

compat: install-test
	$(PY) -m pytest -q tests/compat

# Two workers, each test file on one of them (its module fixtures — brokers, a ZooKeeper, a
# SparkSession — stay shared): most of the suite's time is spent waiting on real processes.
TEST_WORKERS ?= 2

test: install-test lint typecheck contracts codegen-check
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests

# Every benchmark writes its own section of BENCHMARKS.md (ratios measured side by side in one run).
# What benchmarks/latency.py builds its C load generator (benchmarks/loadgen.c) with.
bench-deps:
	@if [ ! -f /usr/include/librdkafka/rdkafka.h ] || ! command -v gcc >/dev/null 2>&1; then \
		echo "installing gcc and librdkafka-dev with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc librdkafka-dev >/dev/null; \
	fi

bench: install-test bench-deps
	$(PY) -m benchmarks.run
	$(PY) -m benchmarks.validation
	$(PY) -m benchmarks.rebalance
	$(PY) -m benchmarks.clients
	$(PY) -m benchmarks.spark_read
	$(PY) -m benchmarks.latency
	$(PY) -m benchmarks.coordinator_load
	$(PY) -m benchmarks.cluster
	$(PY) -m benchmarks.coordinator_failover
	$(PY) -m benchmarks.transactions
	$(PY) -m benchmarks.acl_authorize

# A wheel of strom in $(DIST_DIR), to install anywhere without a clone:
# pip install dist/strom-<version>-py3-none-any.whl (add [spark] or [plot] for the extras).
DIST_DIR ?= dist
dist: | $(PY)
	$(PIP) wheel --quiet --no-deps --wheel-dir $(DIST_DIR) .
	@ls $(DIST_DIR)/strom-*.whl

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
