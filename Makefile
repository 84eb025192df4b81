# The two front-door commands: `make demo` (whole loop in sim) and `make test`.
# Everything lives in .venv/; system packages (Debian) are installed by scripts/system-deps.sh.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install when the dependency list changes.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml scripts/system-deps.sh 2>/dev/null | sha1sum | cut -c1-12)
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean system-deps

$(STAMP):
	bash scripts/system-deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first, pinned: an unpinned torch pulls GBs of CUDA packages.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

system-deps:
	bash scripts/system-deps.sh

demo: $(STAMP)
	$(BIN)/pde demo $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check . || true
	$(BIN)/mypy .

bench: $(STAMP)
	@set -e; for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done
	@echo "results in bench/results/"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
