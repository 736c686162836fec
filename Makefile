# Entry points for users and CI. Only python3 and make are assumed; everything else is
# installed into .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: install run test lint bench bench-peers bench-faults clean browser cache-tests experiments experiments-quick

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check elastic_cache tests benchmarks experiments notebooks
	$(BIN)/ruff format --check elastic_cache tests benchmarks experiments notebooks
	$(BIN)/mypy
	$(BIN)/lint-imports

# The browser test (tests/e2e) drives Debian's chromium; install it when we can (root and
# apt-get), otherwise say so: the test then skips with that reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "could not install chromium: the browser test will be skipped"; \
	  else \
	    echo "chromium is not installed (needs root and apt-get): the browser test will be skipped"; \
	  fi; }

# The public HTTP cache test suite (http-tests/cache-tests, npm package http-cache-tests),
# pinned, into .cache-tests/ (see docs/http-cache-suite.md). Without node and npm, or when
# the install fails, say so: tests/integration/test_http_cache_suite.py then skips.
CACHE_TESTS_VERSION := 0.4.5
CACHE_TESTS_DIR     := .cache-tests

cache-tests:
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  echo "node/npm not found: the HTTP cache test suite (http-cache-tests) will be skipped"; \
	elif grep -qs '"version": "$(CACHE_TESTS_VERSION)"' \
	    $(CACHE_TESTS_DIR)/node_modules/http-cache-tests/package.json; then :; \
	else \
	  mkdir -p $(CACHE_TESTS_DIR) && \
	  if npm install --prefix $(CACHE_TESTS_DIR) --save-exact --no-audit --no-fund \
	      --loglevel=error http-cache-tests@$(CACHE_TESTS_VERSION) \
	      >$(CACHE_TESTS_DIR)/npm-install.log 2>&1; then \
	    echo "installed http-cache-tests $(CACHE_TESTS_VERSION) in $(CACHE_TESTS_DIR)"; \
	  else \
	    echo "could not install http-cache-tests (see $(CACHE_TESTS_DIR)/npm-install.log):" \
	      "the HTTP cache test suite will be skipped"; \
	  fi; \
	fi

test: lint browser cache-tests
	$(BIN)/pytest -n auto

run: $(STAMP)
	$(BIN)/ecache up

# Every benchmark in turn, each printing its figures against a baseline measured in the
# same run and writing benchmarks/results/. bench_cluster needs wrk (installed like chromium
# above; without it that benchmark is skipped with a note). Takes about half an hour; run
# it on a quiet machine.
bench: $(STAMP)
	@command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null) \
	      || echo "could not install wrk: bench_cluster will be skipped"; \
	  else \
	    echo "wrk is not installed (needs root and apt-get): bench_cluster will be skipped"; \
	  fi; }
	$(BIN)/python benchmarks/bench_indexes.py
	$(BIN)/python benchmarks/bench_lookup.py --repeats 7
	$(BIN)/python benchmarks/bench_ehash_cbf.py --records 100000 1000000
	$(BIN)/python benchmarks/bench_tiers.py
	$(BIN)/python benchmarks/bench_metrics.py
	$(BIN)/python benchmarks/bench_demo_origin.py
	$(BIN)/python benchmarks/bench_namespaces.py
	@if command -v wrk >/dev/null 2>&1; then $(BIN)/python benchmarks/bench_cluster.py; \
	  else echo "bench_cluster skipped: wrk is not installed"; fi

# elastic-cache side by side with Redis, nginx proxy_cache and Varnish, all on 127.0.0.1
# (benchmarks/bench_peers.py; docs/operations.md, "Benchmarks against peers"). Programs
# missing are installed like wrk above (Debian packages, as root), each on its own, with a
# policy-rc.d in place so that the packages' own services are not started by the install;
# a peer that still cannot run is skipped by the script with a line saying so. About 6
# minutes; BENCH_PEERS_ARGS passes options (e.g. --quick, --memory).
BENCH_PEERS_TOOLS := redis-server:redis-server redis-benchmark:redis-tools \
                     redis-cli:redis-tools nginx:nginx varnishd:varnish wrk:wrk
BENCH_PEERS_ARGS  ?=

bench-peers: $(STAMP)
	@export PATH="$$PATH:/usr/sbin:/sbin"; updated=; guard=; \
	trap '[ -z "$$guard" ] || rm -f /usr/sbin/policy-rc.d' EXIT; \
	for pair in $(BENCH_PEERS_TOOLS); do \
	  cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && \
	      chmod +x /usr/sbin/policy-rc.d && guard=1; \
	    fi; \
	    [ -n "$$updated" ] || { apt-get update -qq >/dev/null 2>&1; updated=1; }; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg >/dev/null 2>&1 \
	      || echo "could not install $$pkg: bench_peers skips what needs $$cmd"; \
	  else \
	    echo "$$cmd is not installed (needs root and apt-get): bench_peers skips what needs it"; \
	  fi; \
	done
	PATH="$$PATH:/usr/sbin:/sbin" $(BIN)/python benchmarks/bench_peers.py $(BENCH_PEERS_ARGS)

# Replication under faults (benchmarks/bench_faults.py; docs/replication.md): node kills
# under checked traffic, a paused node, re-replication, and routed PUTs with rf = 1 and 2
# (wrk, installed like above; without it that part is skipped). About 3 minutes;
# BENCH_FAULTS_ARGS passes options (e.g. --kills 5 --records 20000).
BENCH_FAULTS_ARGS ?=

bench-faults: $(STAMP)
	@if ! command -v wrk >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq >/dev/null 2>&1; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null 2>&1 \
	    || echo "could not install wrk: bench_faults skips its PUT throughput part"; \
	fi
	$(BIN)/python benchmarks/bench_faults.py $(BENCH_FAULTS_ARGS)

# The paper's figures (docs/results.md): every script at full size on the simulator, and at
# reduced scale on real node processes (--real), into experiments/results/: ten seeds per
# simulated configuration, three repetitions of every real run, 95 % confidence intervals
# in every table and plot. Two processes (--timed-lane): what times real processes (the
# real-process runs of Figures 3-5, Figure 6, warm re-integration) one at a time alone on
# the first CPU; the simulated runs and the real runs that only count on the other, one at
# a time (Figure 2's real runs beside them), then EXPERIMENT_JOBS at a time on both once
# the timed lane has ended. Runs are cached in experiments/results/.cache while the
# figures are made; the cache is cleared first. Timed whole on the 2 vCPUs with nothing
# else running, 2026-11-27: 27 min 21 s (the code before: 30 min 26 s the same hour; 41
# minutes with every script one after the other; docs/results.md, "Running time").
# Prints a progress report per figure.
EXPERIMENTS     := miss_rate,index_time,overhead,migration_time,prelaunch,sensitivity,hit_time,cost,hybrid,baselines,zipf,bootstrap,warm
EXPERIMENT_JOBS ?= 2

experiments: $(STAMP)
	rm -rf experiments/results/.cache
	$(BIN)/python -m experiments --timed-lane --jobs $(EXPERIMENT_JOBS) \
	  --scripts $(EXPERIMENTS) --real-for $(EXPERIMENTS)

# The small runs the tests make, into experiments/results/quick/ (not committed); also ten
# seeds and three real repetitions, in the same two processes: 64-76 s of wall time for
# 110-132 s of CPU on a quiet machine (2026-11-26; docs/results.md, "Running time").
experiments-quick: $(STAMP)
	rm -rf experiments/results/quick
	$(BIN)/python -m experiments --quick --jobs $(EXPERIMENT_JOBS) --timed-lane \
	  --out experiments/results/quick --real-for miss_rate,hybrid

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .grimp_cache .import_linter_cache $(CACHE_TESTS_DIR)
