#!/usr/bin/env bash
# Run by Snakemake after creating envs/colbert.yaml (--software-deployment-method conda):
# PyLate must be installed without its declared dependencies (its fast-plaid pin requires a
# CUDA build of torch 2.11; see the Makefile and pyproject.toml's colbert extra).
set -euo pipefail
pip install --no-deps pylate==1.6.0
