# Two promises: `make demo` and `make test` work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PEERS := .venv-peers
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench peers clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,uvloop]'
	touch $(STAMP)

# HUD (the peer we interoperate with) lives in its own venv: its pins are its own.
$(PEERS)/.installed:
	$(PY) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip
	$(PEERS)/bin/python -m pip install -q -e '.[hud]'
	touch $(PEERS)/.installed

peers: $(PEERS)/.installed

demo: $(STAMP)
	$(BIN)/proctor run examples/letters/tasks.py --agent examples/letters/solver.py:solver --group 2
	$(BIN)/proctor run examples/shellfix/tasks.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy

test: $(STAMP) peers lint
	PROCTOR_PEERS_PYTHON=$(CURDIR)/$(PEERS)/bin/python $(BIN)/python -m pytest -q

bench: $(STAMP) peers
	$(BIN)/python bench/rollouts.py --peers-python $(PEERS)/bin/python
	$(BIN)/python bench/proxy.py

clean:
	rm -rf $(VENV) $(PEERS) .pytest_cache .mypy_cache .ruff_cache
