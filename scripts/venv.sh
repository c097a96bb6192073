#!/usr/bin/env bash
# Creates the project's Python virtual environment in .venv (idempotent) with the packages the
# test suite needs (scripts/requirements-test.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -r scripts/requirements-test.txt -c scripts/constraints.txt
