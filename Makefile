# Two promises: `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PEERS := .venv-peers
# Two install levels in one venv: the demo needs only proctor and the OpenAI SDK (for
# the scripted tool-calling example); the tests need every extra (Ray, the SDKs, linters).
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench peers sysdeps benchdeps clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[demo]'
	touch $(DEMO_STAMP)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,uvloop]'
	$(BIN)/python -m pip install -q --no-deps 'openenv-core>=0.3,<0.4'
	touch $(STAMP) $(DEMO_STAMP)

# HUD (the peer we interoperate with) lives in its own venv: its pins are its own.
$(PEERS)/.installed:
	$(PY) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip
	$(PEERS)/bin/python -m pip install -q -e '.[hud]'
	touch $(PEERS)/.installed

peers: $(PEERS)/.installed

# verifiers (a peer `make bench` measures, and the source the verifiers importer serves
# tasksets from) in a venv of its own, pinned in pyproject's `verifiers` extra (~570 MB).
VERIFIERS := .venv-verifiers
$(VERIFIERS)/.installed:
	$(PY) -m venv $(VERIFIERS)
	$(VERIFIERS)/bin/python -m pip install -q --upgrade pip
	$(VERIFIERS)/bin/python -m pip install -q -e '.[verifiers]'
	touch $(VERIFIERS)/.installed

# Inspect AI, for the Inspect importer's tests, in its own venv too (~330 MB).
INSPECT := .venv-inspect
$(INSPECT)/.installed:
	$(PY) -m venv $(INSPECT)
	$(INSPECT)/bin/python -m pip install -q --upgrade pip
	$(INSPECT)/bin/python -m pip install -q -e '.[inspect]'
	touch $(INSPECT)/.installed

# What the substrate tests run for real: bubblewrap (SandboxRuntime), podman with runc
# (ContainerRuntime; crun fails on these hosts' cgroups); and Debian's chromium, the
# browser the dashboard tests drive with Playwright (no browser download); Xvfb (desktop
# capabilities), x11-apps (xwd, the computer bench's floor) and python3-tk (Tk's library
# for the desktop test app). Installed as root when missing.
SYSDEPS := bubblewrap podman runc chromium xvfb x11-apps python3-tk
sysdeps:
	@if command -v bwrap >/dev/null && command -v podman >/dev/null && [ -x /usr/sbin/runc ] && [ -x /usr/bin/chromium ] \
	  && command -v Xvfb >/dev/null && command -v xwd >/dev/null && { ! command -v dpkg >/dev/null || dpkg -s python3-tk >/dev/null 2>&1; }; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make sysdeps: installing Debian packages $(SYSDEPS) (apt-get, as root)" >&2; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSDEPS) >/dev/null; \
	else echo "make sysdeps: install $(SYSDEPS) (as root: apt-get install -y $(SYSDEPS))" >&2; exit 1; fi

# What only the benchmarks need: x11vnc serves HUD's computer tool its desktop in
# bench/computer.py (the tests never start it).
BENCHDEPS := x11vnc
benchdeps: sysdeps
	@if command -v x11vnc >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make benchdeps: installing Debian packages $(BENCHDEPS) (apt-get, as root)" >&2; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BENCHDEPS) >/dev/null; \
	else echo "make benchdeps: install $(BENCHDEPS) (as root: apt-get install -y $(BENCHDEPS))" >&2; exit 1; fi

demo: $(DEMO_STAMP)
	$(BIN)/proctor run examples/letters/tasks.py --agent examples/letters/solver.py:solver --group 2
	$(BIN)/proctor run examples/shellfix/tasks.py
	$(BIN)/proctor run examples/coding/tasks.py --agent examples/coding/solver.py:solve
	@out=$$(mktemp -d)/letters-batch; \
	$(BIN)/proctor batch examples/batch/letters.toml --execute --output-dir $$out --quiet > $$out.json && \
	$(BIN)/proctor batch report $$out | head -8 && \
	echo "result: $$out.json; full report: .venv/bin/proctor batch report $$out"

# Tests are type-checked too, with annotations optional (the bodies are still checked),
# folder by folder: pytest imports each folder's helpers as top-level modules, and every
# folder has its own conftest.
TEST_MYPY := $(BIN)/mypy --cache-dir .mypy_cache/tests --allow-untyped-defs \
	--allow-incomplete-defs --check-untyped-defs --allow-untyped-calls \
	--allow-untyped-decorators --allow-subclassing-any --no-warn-return-any \
	--follow-imports=silent
TEST_DIRS := $(filter-out tests/_support/,$(wildcard tests/*/))

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	MYPYPATH=src:tests $(TEST_MYPY) tests/*.py tests/_support
	for d in $(TEST_DIRS); do MYPYPATH=src:tests:$$d $(TEST_MYPY) $$d || exit 1; done

# pytest in three processes at once (CI has 2 cores, and most of the suite waits on the
# children it starts: under two shards the cores were busy about a third of the time),
# each over a third of the folders by measured time, each with its own leak check;
# `make -O` prints each shard's output whole once it ends. No folder shares state with
# another (ports are 0, Ray runs in a namespace of its own, images are content-addressed,
# containers are labelled per batch), save the Harbor image repositories: the folders that
# build and remove Harbor task images (importers, compose, placement) share shard b, so no
# test removes an image another shard's build is using. New folders join shard c.
PYTEST := PROCTOR_PEERS_PYTHON=$(CURDIR)/$(PEERS)/bin/python $(BIN)/python -m pytest -q
SHARD_A := tests/batch tests/ray tests/compat tests/engine tests/proxy tests/tasks \
	tests/testing tests/models
SHARD_B := tests/importers tests/runtimes tests/compose tests/placement \
	$(wildcard tests/test_*.py)
SHARD_C := $(filter-out $(SHARD_A) $(SHARD_B) tests/__pycache__,$(patsubst %/,%,$(TEST_DIRS)))

# Each shard writes a JUnit report; the run ends with their sum as one plain count.
SHARD_XML := .pytest_cache/shard
SHARDS := a b c
test: $(STAMP) peers $(VERIFIERS)/.installed $(INSPECT)/.installed sysdeps lint
	@rm -f $(SHARDS:%=$(SHARD_XML)-%.xml); rc=0; \
	$(MAKE) --no-print-directory -j3 -O $(SHARDS:%=test-shard-%) || rc=$$?; \
	$(BIN)/python tests/_support/shards.py $(SHARDS:%=$(SHARD_XML)-%.xml) || rc=1; \
	exit $$rc

.PHONY: $(SHARDS:%=test-shard-%)
test-shard-a:
	$(PYTEST) --junitxml=$(SHARD_XML)-a.xml $(SHARD_A)
test-shard-b:
	$(PYTEST) --junitxml=$(SHARD_XML)-b.xml $(SHARD_B)
test-shard-c:
	$(PYTEST) --junitxml=$(SHARD_XML)-c.xml $(SHARD_C)

bench: $(STAMP) peers $(VERIFIERS)/.installed benchdeps
	$(BIN)/python bench/rollouts.py --peers-python $(PEERS)/bin/python
	$(BIN)/python bench/floor.py
	$(BIN)/python bench/versus.py --commit 41c5b05
	$(BIN)/python bench/proxy.py --verifiers-python $(VERIFIERS)/bin/python
	$(BIN)/python bench/substrates.py --peers-python $(PEERS)/bin/python
	$(BIN)/python bench/computer.py --peers-python $(PEERS)/bin/python

clean:
	rm -rf $(VENV) $(PEERS) $(VERIFIERS) $(INSPECT) .pytest_cache .mypy_cache .ruff_cache
