# Two commands on a fresh machine (Python 3.11+, Java 17, make):
#   make demo   set up .venv, start the embedded broker, run the demo pipeline
#   make test   set up .venv, run lint + the whole test suite (unit + integration)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup demo test unit integration lint bench bench-smoke chaos clean prereqs

prereqs:
	@scripts/check-prereqs.sh $(PYTHON)

# Idempotent and fast when nothing changed: reinstalls only when pyproject.toml does.
$(STAMP): pyproject.toml | prereqs
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# The driver JVM's class archive (walstream/jvm_archive.py): ~18 s once per venv and
# Java; a failure only warns, as drivers start without it (slower).
setup: prereqs $(STAMP)
	@$(BIN)/walstream jvm-archive --optional --if-missing

demo: setup
	$(BIN)/python examples/demo_wordcount.py --seconds $${DEMO_SECONDS:-20}
	$(BIN)/python examples/demo_recovery.py --total $${DEMO_RECOVERY_LINES:-6000}
	$(BIN)/python examples/demo_failover.py --total $${DEMO_FAILOVER_LINES:-6000}

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

test: setup lint
	@scripts/ensure-chromium.sh
	$(BIN)/pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest tests $(PYTEST_ARGS)

integration: setup
	$(BIN)/pytest integration_tests $(PYTEST_ARGS)

bench: setup
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.wal_bench --size full --out bench/results/RESULTS-wal.md
	$(BIN)/python -m bench.ingest_bench --size full
	$(BIN)/python -m bench.addblock_bench --out bench/results/RESULTS-addblock.md
	$(BIN)/python -m bench.peer_bench --size full
	$(BIN)/python -m bench.peer_bench --size full --words-per-line 1250 --impls ours \
		--out bench/results/RESULTS-peer-10k.md
	$(BIN)/python -m bench.recovery_bench --size full
	$(BIN)/python -m bench.recovery_bench --size full --backlogs 10000 --receivers 10 \
		--runs 3 --restart-timeout 150 --out bench/results/RESULTS-recovery-large.md
	$(BIN)/python -m bench.recovery_bench --size full --backlogs 100000 --receivers 10 \
		--runs 3 --restart-timeout 240 --out bench/results/RESULTS-recovery-huge.md
	$(BIN)/python -m bench.recovery_bench --size full --backlogs 1000 --runs 1 --kills 3 \
		--out bench/results/RESULTS-recovery-kills.md
	$(BIN)/python -m bench.recovery_bench --size full --backlogs 1000 --runs 1 --kills 3 \
		--history-s 1800 --out bench/results/RESULTS-recovery-history.md
	$(BIN)/python -m bench.recovery_bench --size full --history-s 20 \
		--backlogs 100 1000 10000 --receivers 10 --restart-timeout 150 \
		--impls spark ours ours-ha --out bench/results/RESULTS-failover.md
	$(BIN)/python -m bench.soak_bench --size full
	$(BIN)/python -m bench.structured_bench --size full
	$(BIN)/python -m bench.report

# Every benchmark once at its small size (~20 min), into build/bench-smoke/: shows
# `make bench` works on this machine without its ~9 hours. Small runs are not results.
SMOKE_OUT := build/bench-smoke
bench-smoke: setup
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	rm -rf $(SMOKE_OUT) && mkdir -p $(SMOKE_OUT)
	$(BIN)/python -m bench.wal_bench --size small --runs 1 --out $(SMOKE_OUT)/RESULTS-wal.md
	$(BIN)/python -m bench.ingest_bench --size small --runs 1 --out $(SMOKE_OUT)/RESULTS-ingest.md
	$(BIN)/python -m bench.addblock_bench --reporters 8 --seconds 2 --runs 1 \
		--out $(SMOKE_OUT)/RESULTS-addblock.md
	$(BIN)/python -m bench.peer_bench --size small --runs 1 --out $(SMOKE_OUT)/RESULTS-peer.md
	$(BIN)/python -m bench.recovery_bench --size small --backlogs 100 --runs 1 \
		--out $(SMOKE_OUT)/RESULTS-recovery.md
	$(BIN)/python -m bench.soak_bench --size small --runs 1 --out $(SMOKE_OUT)/RESULTS-soak.md
	$(BIN)/python -m bench.structured_bench --size small --runs 1 \
		--out $(SMOKE_OUT)/RESULTS-structured.md
	@ls $(SMOKE_OUT)/*.md && echo "bench-smoke: every benchmark ran; results in $(SMOKE_OUT)/"

# The long chaos soak (the bounded version runs in `make test`), then the high
# availability soak (a leader and a hot standby; the leader SIGKILLed CHAOS_HA_KILLS
# times and paused past its lease CHAOS_HA_PAUSES times), then a minute of a slow,
# lossy broker link and a seeded schedule of CHAOS_NETFAULT_ROUNDS network faults on
# namespace hosts (root only). Every knob can be set:
# make chaos CHAOS_DRIVER_KILLS=100 CHAOS_RECEIVER_KILLS=50 CHAOS_BROKER_KILLS=10
CHAOS_SEED ?= 1
CHAOS_DRIVER_KILLS ?= 30
CHAOS_RECEIVER_KILLS ?= 15
CHAOS_BROKER_KILLS ?= 3
CHAOS_RECORDS ?= 20000
CHAOS_BROKER_DOWN_S ?= 30
CHAOS_HA_KILLS ?= 10
CHAOS_HA_PAUSES ?= 2
CHAOS_HA_RECORDS ?= 6000
CHAOS_NETFAULT_ROUNDS ?= 12
CHAOS_SUMMARY ?= chaos-summary.md
chaos: setup
	$(BIN)/python -m walstream.testing.chaos --mode receiver --seed $(CHAOS_SEED) \
		--driver-kills $(CHAOS_DRIVER_KILLS) --receiver-kills $(CHAOS_RECEIVER_KILLS) \
		--broker-kills $(CHAOS_BROKER_KILLS) --broker-down-s $(CHAOS_BROKER_DOWN_S) \
		--records $(CHAOS_RECORDS) \
		--summary $(CHAOS_SUMMARY)
	$(BIN)/python -m walstream.testing.chaos --mode ha --seed $(CHAOS_SEED) \
		--driver-kills $(CHAOS_HA_KILLS) --ha-pauses $(CHAOS_HA_PAUSES) \
		--records $(CHAOS_HA_RECORDS) --summary $(CHAOS_SUMMARY)
	WALSTREAM_NETFAULT_ROUNDS=$(CHAOS_NETFAULT_ROUNDS) WALSTREAM_NETFAULT_SEED=$(CHAOS_SEED) \
		WALSTREAM_NETFAULT_SLOW=1 $(BIN)/pytest -s integration_tests/test_network_faults.py \
		-k "seeded_schedule or slow_lossy"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
