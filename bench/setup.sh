#!/usr/bin/env bash
# Installs the benchmark peers (numpy, pandas, DuckDB, DataSketches...) into the project's .venv.
# Usage: bash bench/setup.sh && .venv/bin/python bench/<engine>.py
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh
.venv/bin/pip install --quiet -r bench/requirements.txt -c scripts/constraints.txt
# The build tools of ISA-L, so the benchmarks build inpath-seal's `isal` feature (see common.py),
# ripgrep, the peer of bench/store.py, and memcached with libmemcached's memcslap (bench/cache.py).
missing=()
for pkg in nasm autoconf automake libtool ripgrep memcached libmemcached-tools; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Python package itself (bench/scaleout.py drives inpath.spark and inpath.dask).
.venv/bin/pip install --quiet --disable-pip-version-check ./python
