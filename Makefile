# The two front-door commands: `make demo` (whole loop in sim) and `make test`.
# Everything lives in .venv/; system packages (Debian) are installed by scripts/system-deps.sh.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every pip install takes the versions CI tests from here (the images use the same file).
CONSTRAINTS := docker/constraints.txt
# all: everything (CI, development, one PC). robot: the robot PC (`make install ROLE=robot`): the
# robot server and `pde doctor`/`pde record`, without torch, the browser or the database
# (docs/lab-setup.md §3).
ROLE ?= all
ifeq ($(ROLE),all)
EXTRAS := all,dev
DEPS_FLAGS :=
else ifeq ($(ROLE),robot)
EXTRAS := robot,franky-sim,teleop
DEPS_FLAGS := --robot
else
$(error ROLE=$(ROLE) is not a role: use ROLE=all (the default) or ROLE=robot (the robot PC))
endif
# Re-install when the role, the dependency list or a pinned version changes.
STAMP := $(VENV)/.installed-$(shell { echo $(ROLE); cat pyproject.toml scripts/system-deps.sh $(CONSTRAINTS); } 2>/dev/null | sha1sum | cut -c1-12)
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install demo test lint bench clean system-deps constraints

$(STAMP):
	bash scripts/system-deps.sh $(DEPS_FLAGS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
ifneq ($(ROLE),robot)
	# CPU build of torch first (the version pinned in $(CONSTRAINTS)): an unpinned torch pulls GBs
	# of CUDA packages.
	$(BIN)/pip install -q -c $(CONSTRAINTS) torch
endif
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

system-deps:
	bash scripts/system-deps.sh $(DEPS_FLAGS)

demo: $(STAMP)
	$(BIN)/pde demo $(ARGS)

# PYTHONFAULTHANDLER: a crash, even at exit after the summary, prints every thread's stack
test: $(STAMP)
	$(BIN)/ruff check .
	PYTHONFAULTHANDLER=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check . || true
	$(BIN)/mypy .

bench: $(STAMP)
	@set -e; for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done
	@echo "results in bench/results/"

# Re-pin $(CONSTRAINTS) to what .venv holds (after a requirement change: drop the pins that conflict,
# `make install`, then this; run the tests and commit the file). torch loses its build tag (+cpu) so
# the GPU image's CUDA build matches it too.
constraints: $(STAMP)
	{ grep '^#' $(CONSTRAINTS); $(BIN)/pip freeze --exclude-editable \
	    | sed -E 's/^torch==([0-9.]+)\+.*/torch==\1/'; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
