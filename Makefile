# Two commands: `make serve` runs sandgate on its embedded defaults; `make test` runs the suite.
# `make test-fast`: the unit and in-process tests only. Both run in parallel (pytest-xdist, WORKERS processes: by
# default two per core: an end-to-end test mostly waits on the processes it started; a test file's tests on
# one worker); WORKERS=0 runs them in this process, one after the other.
# PY: the first of python3.12, pyenv's 3.12, python3.13, python3 that is Python 3.12 or newer.
PY ?= $(shell for p in python3.12 "$$(pyenv prefix 3.12 2>/dev/null)/bin/python3" python3.13 python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))
XDIST = $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadfile)
RUNTIME := .venv-runtime

.PHONY: serve test test-fast install install-runtime constraints bench clean

$(BIN)/sandgate: pyproject.toml
	@test -n "$(PY)" || { echo "sandgate needs Python 3.12 or newer: none found (python3.12, pyenv 3.12, python3.13, python3); set PY=/path/to/python3.12"; exit 1; }
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || { echo "sandgate needs Python 3.12 or newer; $(PY) is older"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# Test-only: the real OPA Go engine (differential tests, OPA REST test server). It declares Python >= 3.14
	# but its ctypes wrapper loads on 3.12; this flag is the one allowed exception (the product is a plain pip install).
	$(BIN)/pip install -q --ignore-requires-python 'opa-golib-python-bindings==0.4.4'
	touch $(BIN)/sandgate

install: $(BIN)/sandgate

# Only what sandgate needs to run (no test tooling, no OPA Go engine): `$(RUNTIME)/bin/sandgate serve`.
install-runtime: $(RUNTIME)/bin/sandgate

$(RUNTIME)/bin/sandgate: pyproject.toml
	@test -n "$(PY)" || { echo "sandgate needs Python 3.12 or newer: none found; set PY=/path/to/python3.12"; exit 1; }
	$(PY) -m venv $(RUNTIME)
	$(RUNTIME)/bin/pip install -q --upgrade pip
	$(RUNTIME)/bin/pip install -q '.[postgres]'
	touch $(RUNTIME)/bin/sandgate

# The image's lock: the exact versions `pip install '.[postgres]'` resolves to today (deploy/constraints.py). CI
# regenerates it before the suite (.ci/run); deploy/Dockerfile installs with it.
constraints: install
	$(BIN)/python deploy/constraints.py > deploy/constraints.txt.new
	mv deploy/constraints.txt.new deploy/constraints.txt

serve: install
	$(BIN)/sandgate serve

# The suite caches compiled bytecode (outside the source tree, in $(PYCACHE)) even where the environment turns it
# off (PYTHONDONTWRITEBYTECODE): every xdist worker imports every test module to collect, and every sandgate, CLI and
# MCP process the tests start imports sandgate; compiling all of that afresh each time is about 10 s of CPU per
# worker's collection and 0.7 s per process start. Python checks each cached file against its source.
# tests/support/gcfreeze.py: what collection built is frozen out of the garbage collector's walks (collecting the
# suite 11.2 -> 6.5 s of CPU, in every worker).
PYCACHE := $(CURDIR)/$(VENV)/pycache
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(PYCACHE)
PYTEST = $(TEST_ENV) $(BIN)/python -m pytest -q -p tests.support.gcfreeze

# Every xdist worker collects the whole suite. On a fresh checkout each would compile every module and rewrite every
# test module's asserts itself (about 25 s of CPU a worker; 8 s once the cache is warm), so a cold cache is filled
# first, by two collections side by side (every other test file each: both cores; 22 -> 15 s of wall on an idle
# 2-core machine, one collection of the whole suite), that the workers then read. A failed half is not an error here:
# the run itself reports whatever collection finds.
WARM_HALF = $(PYTEST) --collect-only -p no:cacheprovider $$(find tests -name 'test_*.py' | sort | awk 'NR % 2 == $(1)') >/dev/null 2>&1
WARM = $(if $(XDIST),test -d $(PYCACHE)$(CURDIR)/tests || { $(call WARM_HALF,0) & $(call WARM_HALF,1); wait; },true)

test: install
	@$(WARM)
	$(PYTEST) $(XDIST)

test-fast: install
	@$(WARM)
	$(PYTEST) $(XDIST) -m 'not e2e'

bench: install
	$(BIN)/python tests/bench/egress.py

clean:
	rm -rf $(VENV) $(RUNTIME)
