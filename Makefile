# cronstream — every developer and CI entry point. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# mypy --strict on the unit tests and the shared helpers (tests/*.py; mypy follows what
# they import, tests/chaos/measure.py among them). A second run with these paths, not
# `files` in pyproject.toml: a bare `mypy` checks the code alone, as before, and the
# integration, acceptance, bench and chaos suites stay outside for now.
TYPED_TESTS := tests/unit $(wildcard tests/*.py)
# `make up NODES=3` (or CRONSTREAM_NODES=3 in the environment): the 3-node local stack
# (3 Kafka brokers, 3 Cassandra nodes; README, "A cluster"). Every target then uses it. On a
# one-node stack with data it grows it in place (docs/operations.md, "From one node to three").
ifdef NODES
export CRONSTREAM_NODES := $(NODES)
endif

.PHONY: help debs deps up down status logs clean clean-all bootstrap run test test-unit \
        test-integration test-cluster test-acceptance lint fmt docs typecheck layers bench chaos chaos-cluster \
        chaos-destination

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is missing: apt-get install -y openjdk-17-jdk-headless"; exit 1; }
	@command -v mvn >/dev/null || { echo "Maven is missing: apt-get install -y maven"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[deps] installing Python packages into $(VENV) (log: $(VENV)/pip.log)"
	@$(PY) -m pip install -q --upgrade pip > $(VENV)/pip.log 2>&1 && \
	  $(PY) -m pip install -e '.[dev]' >> $(VENV)/pip.log 2>&1 || { tail -30 $(VENV)/pip.log; exit 1; }
	@rm -f $(VENV)/.installed-*; touch $@

debs: ## install the Debian packages used here when missing: kcat, prometheus, prometheus-alertmanager, chromium (+ driver, for the dashboard's browser tests), postgresql (Kafka Connect's warehouse), iproute2, nftables and iptables (the cluster's test hosts)
	@missing=""; command -v kcat >/dev/null || missing="$$missing kcat"; \
	  command -v ip >/dev/null || missing="$$missing iproute2"; \
	  command -v nft >/dev/null || missing="$$missing nftables"; \
	  command -v iptables >/dev/null || missing="$$missing iptables"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	  command -v promtool >/dev/null || missing="$$missing prometheus"; \
	  command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  if [ -n "$$missing" ]; then echo "[deps] installing Debian packages:$$missing"; \
	    sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	    $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

deps: debs $(STAMP) ## install Python packages into .venv and Debian packages; check Java/Maven

up: deps ## start Kafka, the registry, Cassandra, PostgreSQL, Prometheus, Alertmanager; create topics, schemas, keyspace; then Kafka Connect and its history sink
	@$(PY) -m cronstream.infra up

down: ## stop every service (data is kept)
	@test -x $(PY) && $(PY) -m cronstream.infra down || true

status: deps ## one line per service: state, pid, memory, endpoint
	@$(PY) -m cronstream.infra status

logs: deps ## the tail of every service's log
	@$(PY) -m cronstream.infra logs

bootstrap: deps ## create topics, register schemas, apply migrations (idempotent)
	@$(PY) -m cronstream.infra bootstrap

tenant: deps ## onboard tenant(s) NAME="acme beta": Kafka user, topics, ACLs (idempotent)
	@test -n "$(NAME)" || { echo 'usage: make tenant NAME="acme [more]"'; exit 2; }
	@$(PY) -m cronstream.infra tenants add $(NAME)

clean: ## stop the stack and delete its data, logs and config (keeps downloads)
	@test -x $(PY) && $(PY) -m cronstream.infra clean || rm -rf .stack/data .stack/logs .stack/run .stack/conf

clean-all: clean ## also delete downloaded jars and the virtualenv
	rm -rf .stack $(VENV)

run: up ## the whole local stack, then cronstream's own processes in the foreground
	@$(PY) -m cronstream.infra tenants add demo --if-secured
	@$(PY) -m cronstream.run

# Tests that leave the shared services up run two at a time (they wait on Kafka far more than
# they compute); those that stop a service, start a cluster or are marked alone run after
# them, one at a time.
SHARED_TESTS := not restarts_stack and not cluster and not alone

test: up ## the whole suite (unit + integration + acceptance) against the real services, with the 3-node cluster tests
ifeq ($(strip $(PYTEST_ARGS)),)
	@$(PY) -m pytest -n 2 tests/unit
	@$(PY) -m pytest -n 2 --dist worksteal --durations=25 -m "$(SHARED_TESTS)" tests/integration tests/acceptance
	@$(PY) -m pytest --durations=10 -m "not ($(SHARED_TESTS))" tests/integration tests/acceptance
else
	@$(PY) -m pytest --durations=25 $(PYTEST_ARGS)
endif

test-cluster: up ## the 3-node cluster tests: a partition leader cut off, then a broker lost, under load (its own stack on test hosts, ports +10000; ~20 min); one node grown to three (ports +20000, ~3 min)
	@$(PY) -m pytest -m cluster tests/integration/test_cluster.py tests/integration/test_grow.py $(PYTEST_ARGS)

test-unit: deps ## unit tests only (no services)
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: up ## integration tests only (real services)
	@$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-acceptance: up ## acceptance tests only (cronstream processes end to end)
	@$(PY) -m pytest tests/acceptance $(PYTEST_ARGS)

lint: deps ## ruff (lint, complexity budget, format check), mypy --strict, layering, size budget, deployment files, every test module imports
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/mypy
	@$(VENV)/bin/mypy $(TYPED_TESTS)
	@$(VENV)/bin/lint-imports --no-logo --no-cache
	@$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_source_budget.py tests/unit/test_deploy.py tests/unit/test_options.py
	@$(PY) -m pytest -q -p no:cacheprovider --collect-only tests >/dev/null  # a test module that cannot import

docs: deps ## write docs/configuration.md from the settings' declarations (runtime/options/)
	@$(PY) -m cronstream.runtime.options.doc

typecheck: deps ## mypy --strict on every package, then on the unit tests and their helpers
	@$(VENV)/bin/mypy
	@$(VENV)/bin/mypy $(TYPED_TESTS)

layers: deps ## the import-linter contracts (docs/design.md, "Layers")
	@$(VENV)/bin/lint-imports --no-logo --no-cache

fmt: deps ## apply ruff's fixes and formatting
	@$(VENV)/bin/ruff check --fix .
	@$(VENV)/bin/ruff format .

bench: up ## benchmarks, printed as a table
	@$(PY) -m tests.bench

chaos: deps ## faults under load on a stack of its own (ports +100, .stack/chaos), as a table
	@$(PY) -m tests.chaos

chaos-cluster: deps ## node loss, network partitions, pauses, slow links and a clock ahead under load on a 3-node stack of its own (test hosts, ports +10000, .stack/cluster), as a table
	@$(PY) -m tests.chaos --cluster

chaos-destination: deps ## a tenant topic's partition without a leader on the 3-node stack: the other runs go on (this code beside a03f037)
	@$(PY) -m tests.chaos.destination
