#!/usr/bin/env bash
# Installs the benchmark peers (numpy, pandas, DuckDB, DataSketches...) into the project's .venv.
# Usage: bash bench/setup.sh && .venv/bin/python bench/<engine>.py
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
.venv/bin/pip install --quiet -r bench/requirements.txt
