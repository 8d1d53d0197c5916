# FleetMind: the two commands of the README.
#   make demo   set up .venv and run the end-to-end demo on the embedded defaults
#   make test   set up .venv (and, as root with apt-get, the end-to-end test peers), lint (ruff)
#               and run the whole test suite
#   make notebooks  re-execute notebooks/ in place against the released models in models/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format venv peers clean notebooks

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	MLFLOW_DISABLE_TELEMETRY=true $(BIN)/fleetmind demo

notebooks: $(STAMP)
	MLFLOW_DISABLE_TELEMETRY=true $(BIN)/python notebooks/execute.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

peers:
	bash .ci/install_test_peers.sh

test: peers lint
	MLFLOW_DISABLE_TELEMETRY=true $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache mlruns mlflow.db
