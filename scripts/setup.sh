#!/usr/bin/env bash
# Installs everything the project needs into .venv (idempotent). Called by `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[all]"
