# tollgate — two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
CONF ?= conf/tollgate.yaml
TOLLGATE_TEST_PG_URL ?= postgres://postgres@127.0.0.1:5432/test
export TOLLGATE_TEST_PG_URL

.PHONY: run build test lint bench deps check-deps check-pg clean

## Build (release) and start the gateway on the embedded SQLite store with the default catalog.
run: check-deps
	$(CARGO) build --release --bin tollgate
	./target/release/tollgate -c $(CONF) serve

build: check-deps
	$(CARGO) build --release --bins

## Everything the project tests: unit, store suite (SQLite and PostgreSQL), integration.
test: check-deps check-pg
	$(CARGO) test --lib --bins --tests -- --test-threads=2

lint: check-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

## Speed and memory numbers (never asserted in tests).
bench: check-deps
	$(CARGO) bench --bench translate

## Debian packages a fresh machine needs (run as root).
deps:
	apt-get update -qq && apt-get install -y -qq cmake ca-certificates postgresql-client

check-deps:
	@missing=""; for tool in cmake cc c++ make perl; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then echo "missing system tools:$$missing — on Debian run: make deps (apt-get install cmake build-essential)"; exit 1; fi

check-pg:
	@command -v pg_isready >/dev/null 2>&1 || { echo "pg_isready not found: make deps"; exit 1; }
	@pg_isready -q -d "$(TOLLGATE_TEST_PG_URL)" || { echo "PostgreSQL is not reachable at $(TOLLGATE_TEST_PG_URL); make test requires it (start it, or set TOLLGATE_TEST_PG_URL)"; exit 1; }

clean:
	$(CARGO) clean
