# tollgate — two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
CONF ?= conf/tollgate.yaml
TOLLGATE_TEST_PG_URL ?= postgres://postgres@127.0.0.1:5432/test
export TOLLGATE_TEST_PG_URL

.PHONY: run build build-pgo test lint bench bench-tools soak fuzz demo venv deps pg browser-deps agent-deps clean

## Build (release) and start the gateway on the embedded SQLite store with the default catalog.
run: deps
	$(CARGO) build --release --bin tollgate
	./target/release/tollgate -c $(CONF) serve

## The whole product on this machine: the gateway wired to the upstream simulator (nothing
## reaches a real provider), a workspace with 10 USD credit and a key, and the console on the
## admin listener behind a fresh random admin token; prints both with paste-ready curls.
DEMO_ENV = DEMO_GEMINI_KEY=sim-gemini-key DEMO_ANTHROPIC_KEY=sim-anthropic-key DEMO_OPENAI_KEY=sim-openai-key \
	DEMO_VERTEX_PROJECT=tollgate-test DEMO_VERTEX_CREDENTIALS=$(CURDIR)/tests/fixtures/test-service-account.json
DEMO_MODEL = google/gemini-3.8-flash
demo: deps
	$(CARGO) build --workspace --bins
	mkdir -p data && rm -f data/demo.db*
	./target/debug/tollgate-sim --listen 127.0.0.1:18000 --vertex-project tollgate-test > data/demo-sim.log & echo $$! > data/demo-sim.pid
	@trap 'kill $$(cat data/demo-sim.pid) 2>/dev/null' EXIT INT TERM; \
	tg="./target/debug/tollgate -c conf/demo.yaml"; \
	ws=$$($$tg --json workspace create --name demo | sed -n 's/.*"id": "\(ws_[^"]*\)".*/\1/p' | head -n1); \
	$$tg credit add --workspace $$ws --usd 10 >/dev/null; \
	key=$$($$tg --json key create --workspace $$ws --name demo | sed -n 's/.*"secret": "\([^"]*\)".*/\1/p'); \
	admin=$$(head -c 30 /dev/urandom | base64 | tr '+/' '-_'); \
	echo; \
	echo "API      http://127.0.0.1:8080/v1  key $$key (workspace $$ws, 10 USD credit)"; \
	echo "console  http://127.0.0.1:8081/    admin token $$admin"; \
	echo; echo "Paste:"; echo; \
	echo "curl -s localhost:8080/v1/chat/completions -H 'Authorization: Bearer $$key' -H 'Content-Type: application/json' \\"; \
	echo "  -d '{\"model\":\"$(DEMO_MODEL)\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'"; \
	echo "curl -s localhost:8081/admin/v1/workspaces -H 'Authorization: Bearer $$admin'"; echo; \
	TOLLGATE_ADMIN_TOKEN=$$admin $(DEMO_ENV) $$tg serve

build: deps
	$(CARGO) build --release --workspace --bins

## Everything the project tests: unit, the simulator's own tests, and the one integration binary
## (store suite on SQLite and PostgreSQL, the gateway end to end, the console in Chromium, the
## real clients — the Anthropic and OpenAI SDKs, Claude Code, Codex — on the Messages and
## Responses doors).
## The PostgreSQL half runs against TOLLGATE_TEST_PG_URL when a server answers there, else in
## a throwaway cluster (WITH_PG). TEST_ARGS: what `cargo test` is given.
TEST_ARGS ?= --workspace --lib --bins --tests -- --test-threads=2
test: deps pg venv browser-deps agent-deps
	@$(WITH_PG) env TOLLGATE_PYTHON=$(CURDIR)/.venv/bin/python $(CARGO) test $(TEST_ARGS)

## The official OpenAI and Anthropic Python SDKs in a local venv (used by the SDK integration
## tests); made again when the requirements change.
venv: .venv/.stamp
.venv/.stamp: tests/python/requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
	touch $@

## The console's browser test (`tests/browser/console.mjs`, run by `tests/it/console.rs`):
## playwright-core at the lockfile's version, driving the Debian Chromium. Needs Node.js 20+ and
## npm; installs again when the lockfile changes.
browser-deps:
	@if [ -d tests/browser/node_modules/playwright-core ] && \
	  [ ! tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then exit 0; fi; \
	$(NEED_NODE) "the console's browser test"; \
	cd tests/browser && npm ci --no-audit --no-fund

## The real clients the doors are proven with (`tests/agents`): the Anthropic TypeScript SDK and
## Claude Code on the Messages door (`tests/it/messages_clients.rs`), the OpenAI TypeScript SDK
## and the Codex CLI on the Responses door (`tests/it/responses_clients.rs`), at the lockfile's
## versions (Claude Code's and Codex's CLIs are the native binaries their platform packages
## ship; Claude Code's package asks for Node.js 22 but the binary needs none, so npm only warns
## on 20). Installs again when the lockfile changes.
agent-deps:
	@if [ -x tests/agents/node_modules/.bin/claude ] && [ -d tests/agents/node_modules/@anthropic-ai/sdk ] && \
	  [ -x tests/agents/node_modules/.bin/codex ] && [ -d tests/agents/node_modules/openai ] && \
	  [ ! tests/agents/package-lock.json -nt tests/agents/node_modules/.package-lock.json ]; then exit 0; fi; \
	$(NEED_NODE) "the agent clients' tests"; \
	cd tests/agents && npm ci --no-audit --no-fund

## Stops with a hint unless Node.js 20+ and npm are here (`$(NEED_NODE) "<who needs them>"`).
NEED_NODE = need() { \
	  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	    echo "$$1 needs Node.js 20+ and npm: install them (e.g. from nodejs.org"; \
	    echo "or your distribution), then run make test again"; exit 1; fi; \
	  if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then \
	    echo "$$1 needs Node.js 20+ (found $$(node --version))"; exit 1; fi; \
	}; need

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Speed and memory numbers (never asserted in tests): criterion micro-benchmarks (translation,
## cost, key lookup, admission), the ledger writer's throughput,
## then the load bench — the release gateway on core 0, the simulator and the load generator on
## core 1 — which prints each budget's pass/fail and writes target/bench/load-*.json.
## BENCH_ARGS: `--quick` (3-s cases, 500 streams), `--only rates,max,journal,doors,conversations,agents,streams,embeddings,oha,nginx`,
## `--store postgres://…`; BENCH_WRAP="perf record -g --" runs the gateway under a tool. The `oha`
## and `nginx` cases run when those are on PATH (`make bench-tools` installs both). The load bench
## measures the production build, `make build-pgo`'s; PGO=0 measures the plain release build.
BENCH_ARGS ?=
PGO ?= 1
# The load generator on core 1; the bench pins the gateway to core 0.
PIN = $$(command -v taskset >/dev/null && [ $$(nproc) -gt 1 ] && echo taskset -c 1)
bench: deps $(if $(filter 1,$(PGO)),build-pgo)
	$(CARGO) bench --bench micro
	$(CARGO) bench --bench ledger
	$(CARGO) build --release --workspace --bins
	$(CARGO) bench --bench load --no-run
	$(if $(filter 1,$(PGO)),BENCH_GATEWAY=$(PGO_DIR)/tollgate) $(PIN) $(CARGO) bench --bench load -- $(BENCH_ARGS)

## The gateway for production, built with profile-guided optimisation: target/pgo/tollgate, about a
## fifth fewer instructions a request than `make build`'s (docs/benchmarks.md). An instrumented
## build serves the load bench's training workload (`--train`: every front door to Gemini and
## Claude, buffered and streamed, on the simulator), then the gateway is rebuilt with the profile
## it recorded. Each is a full build in a target directory of its own, for `--target` (which keeps
## RUSTFLAGS off build scripts and proc macros). Needs the llvm-profdata of rustc's LLVM version:
## Debian's llvm-<major>, installed here when missing.
HOST = $(shell rustc -vV | sed -n 's/^host: //p')
LLVM_MAJOR = $(shell rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
PGO_DIR = $(CURDIR)/target/pgo
build-pgo: deps
	command -v llvm-profdata-$(LLVM_MAJOR) >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq llvm-$(LLVM_MAJOR); }
	rm -rf $(PGO_DIR)/profiles
	RUSTFLAGS="-Cprofile-generate=$(PGO_DIR)/profiles" $(CARGO) build --release --bin tollgate \
	  --target $(HOST) --target-dir $(PGO_DIR)/instrumented
	$(CARGO) build --release --workspace --bins
	$(CARGO) bench --bench load --no-run
	BENCH_GATEWAY=$(PGO_DIR)/instrumented/$(HOST)/release/tollgate $(PIN) \
	  $(CARGO) bench --bench load -- --train
	llvm-profdata-$(LLVM_MAJOR) merge -o $(PGO_DIR)/tollgate.profdata $(PGO_DIR)/profiles
	RUSTFLAGS="-Cprofile-use=$(PGO_DIR)/tollgate.profdata" $(CARGO) build --release --bin tollgate \
	  --target $(HOST) --target-dir $(PGO_DIR)/optimised
	cp $(PGO_DIR)/optimised/$(HOST)/release/tollgate $(PGO_DIR)/tollgate

## The load bench's outside opinion, not part of make test: oha, an HTTP load generator, from
## crates.io into ~/.cargo/bin (the bench's `oha` case runs it when it is on PATH).
bench-tools:
	command -v oha >/dev/null 2>&1 || $(CARGO) install oha --locked
	command -v nginx >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light

## The many-replica soak (docs/operations.md, "The soak"), not part of make test: SOAK_GATEWAYS
## release gateways (default 6) on a private PostgreSQL cluster, the simulator upstream, mixed
## load for SOAK_SECONDS (default 120) through a PostgreSQL restart, two graceful upgrades and a
## SIGKILL; prints what it saw and fails when an invariant of the books breaks.
SOAK_SECONDS ?= 120
SOAK_GATEWAYS ?= 6
soak: deps
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_GATEWAYS=$(SOAK_GATEWAYS) $(CARGO) test --release --test it -- \
	  --ignored --exact soak::many_replicas_with_faults_keep_the_books --nocapture

## Coverage-guided fuzzing (cargo-fuzz, libFuzzer) of request parsing and planning, of each
## family's buffered and streamed answer translation, and of the embeddings answers' reader:
## each target runs FUZZ_SECONDS, seeded with the captured fixtures. Stable Rust: no sanitizer
## (panics and the targets' asserts are found).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = request messages responses worst_case cost charge answer_gemini embeddings_answer json answer_anthropic answer_openai answer_messages answer_responses stream_gemini stream_anthropic stream_openai stream_messages stream_responses
fuzz: deps
	command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) fuzz build --sanitizer none -O
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  echo "== $$t" && mkdir -p corpus/$$t && \
	  $(CARGO) fuzz run --sanitizer none -O $$t corpus/$$t ../tests/fixtures -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 2>&1 | grep -E '^(Done|stat::number_of_executed_units)|panicked|SUMMARY' ; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

## The Debian packages the project needs — the one list (`.ci/run` uses `make deps` too):
## Pingora's zlib-ng build (cmake, a C toolchain), TLS roots, `psql` and `pg_isready`, the
## PostgreSQL server (make test's throwaway cluster, the outage test's private one), the OpenAI
## SDK test's venv and the browser the console's test drives (chromium; Node.js: `browser-deps`).
DEB_PACKAGES = cmake build-essential ca-certificates postgresql-client postgresql python3-venv chromium

## Installs the missing ones: as root with apt-get (one update, then a non-interactive
## install); otherwise stops with the line to paste.
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done | xargs); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "missing packages: $$missing (not a Debian system: install their equivalents)"; exit 1; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "missing Debian packages; run: sudo apt-get install -y $$missing"; exit 1; fi; \
	echo "installing: $$missing"; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing

## Whether a PostgreSQL server answers at TOLLGATE_TEST_PG_URL: signed in, the database there.
PG_ANSWERS = PGCONNECT_TIMEOUT=5 psql -w -Atq -c 'select 1' "$$TOLLGATE_TEST_PG_URL" >/dev/null 2>&1

## Runs the command after it against that server, or, when none answers, in a throwaway cluster:
## Debian's pg_virtualenv makes one in a temporary directory on a free port (its server runs as
## the postgres user, as initdb refuses root), the command gets its URL, and the cluster is
## dropped when the command ends. No system cluster is started or changed.
WITH_PG = if $(PG_ANSWERS); then :; else \
	  echo "no PostgreSQL answers at $$TOLLGATE_TEST_PG_URL: using a throwaway cluster (pg_virtualenv)"; \
	  set -- pg_virtualenv -t bash -c 'createdb test && \
	    TOLLGATE_TEST_PG_URL="postgres://$$PGUSER:$$PGPASSWORD@127.0.0.1:$$PGPORT/test" exec "$$@"' with-pg; \
	fi; "$$@"

## make test's PostgreSQL: the local cluster is started when it is installed but stopped; with
## none answering at TOLLGATE_TEST_PG_URL, make test brings its own throwaway one (WITH_PG).
pg: deps
	@$(PG_ANSWERS) && exit 0; \
	v=$$(ls /etc/postgresql 2>/dev/null | head -n1); \
	if [ "$$(id -u)" = 0 ] && [ -d "/etc/postgresql/$$v/main" ] && command -v pg_ctlcluster >/dev/null 2>&1 && \
	  ! pg_ctlcluster "$$v" main status >/dev/null 2>&1; then \
	  echo "starting the local PostgreSQL"; \
	  pg_ctlcluster --skip-systemctl-redirect "$$v" main start || true; \
	  for i in $$(seq 30); do pg_isready -q -d "$$TOLLGATE_TEST_PG_URL" && break; sleep 1; done; \
	fi; \
	$(PG_ANSWERS) || echo "no PostgreSQL answers at $$TOLLGATE_TEST_PG_URL: make test uses a throwaway cluster"

clean:
	$(CARGO) clean
