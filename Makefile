# tollgate — two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
CONF ?= conf/tollgate.yaml
TOLLGATE_TEST_PG_URL ?= postgres://postgres@127.0.0.1:5432/test
export TOLLGATE_TEST_PG_URL

.PHONY: run build test lint bench fuzz demo venv deps check-deps check-pg clean

## Build (release) and start the gateway on the embedded SQLite store with the default catalog.
run: check-deps
	$(CARGO) build --release --bin tollgate
	./target/release/tollgate -c $(CONF) serve

## The gateway and the upstream simulator wired together, with a workspace, credit and a key.
DEMO_ENV = DEMO_GEMINI_KEY=sim-gemini-key DEMO_ANTHROPIC_KEY=sim-anthropic-key DEMO_OPENAI_KEY=sim-openai-key \
	DEMO_VERTEX_PROJECT=tollgate-test DEMO_VERTEX_CREDENTIALS=$(CURDIR)/tests/fixtures/test-service-account.json
demo: check-deps
	$(CARGO) build --workspace --bins
	mkdir -p data && rm -f data/demo.db*
	./target/debug/tollgate-sim --listen 127.0.0.1:18000 --vertex-project tollgate-test > data/demo-sim.log & echo $$! > data/demo-sim.pid
	@ws=$$(./target/debug/tollgate -c conf/demo.yaml --json workspace create --name demo | sed -n 's/.*"id": "\(ws_[^"]*\)".*/\1/p' | head -n1); \
	./target/debug/tollgate -c conf/demo.yaml credit add --workspace $$ws --usd 10 >/dev/null; \
	key=$$(./target/debug/tollgate -c conf/demo.yaml --json key create --workspace $$ws --name demo | sed -n 's/.*"secret": "\([^"]*\)".*/\1/p'); \
	echo; echo "workspace $$ws, key $$key (10 USD credit). Paste:"; echo; \
	echo "curl -s localhost:8080/v1/chat/completions -H 'Authorization: Bearer $$key' -H 'Content-Type: application/json' \\"; \
	echo "  -d '{\"model\":\"google/gemini-2.5-flash\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'"; echo; \
	trap 'kill $$(cat data/demo-sim.pid) 2>/dev/null' EXIT INT TERM; \
	$(DEMO_ENV) ./target/debug/tollgate -c conf/demo.yaml serve

build: check-deps
	$(CARGO) build --release --workspace --bins

## Everything the project tests: unit, the simulator's own tests, and the one integration binary
## (store suite on SQLite and PostgreSQL, the gateway end to end).
test: check-deps check-pg venv
	TOLLGATE_PYTHON=$(CURDIR)/.venv/bin/python $(CARGO) test --workspace --lib --bins --tests -- --test-threads=2

## The official OpenAI Python SDK in a local venv (used by the SDK integration test).
venv: .venv/.stamp
.venv/.stamp: tests/python/requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
	touch $@

lint: check-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Speed and memory numbers (never asserted in tests).
bench: check-deps
	$(CARGO) bench --bench translate
	$(CARGO) bench --bench ledger

## Coverage-guided fuzzing (cargo-fuzz, libFuzzer) of request parsing and planning, and of each
## family's buffered and streamed answer translation: each target runs FUZZ_SECONDS, seeded with
## the captured fixtures. Stable Rust: no sanitizer (panics and the targets' asserts are found).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = request answer_gemini answer_anthropic answer_openai stream_gemini stream_anthropic stream_openai
fuzz: check-deps
	command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) fuzz build --sanitizer none -O
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  echo "== $$t" && mkdir -p corpus/$$t && \
	  $(CARGO) fuzz run --sanitizer none -O $$t corpus/$$t ../tests/fixtures -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 | grep -E '^(Done|stat::number_of_executed_units)|panicked|SUMMARY' ; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

## Debian packages a fresh machine needs (run as root).
deps:
	apt-get update -qq && apt-get install -y -qq cmake ca-certificates postgresql-client python3-venv

check-deps:
	@missing=""; for tool in cmake cc c++ make perl; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then echo "missing system tools:$$missing — on Debian run: make deps (apt-get install cmake build-essential)"; exit 1; fi

check-pg:
	@command -v pg_isready >/dev/null 2>&1 || { echo "pg_isready not found: make deps"; exit 1; }
	@pg_isready -q -d "$(TOLLGATE_TEST_PG_URL)" || { echo "PostgreSQL is not reachable at $(TOLLGATE_TEST_PG_URL); make test requires it (start it, or set TOLLGATE_TEST_PG_URL)"; exit 1; }

clean:
	$(CARGO) clean
