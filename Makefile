# Entry points for users and CI. Only python3 and make are assumed; everything else is
# installed into .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check elastic_cache tests benchmarks
	$(BIN)/ruff format --check elastic_cache tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

run: $(STAMP)
	$(BIN)/ecache up

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_indexes.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
