#!/usr/bin/env bash
# Installs everything the project needs into .venv (idempotent). Called by `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[all]"

# Debian's chromium renders the benchmark report's PNG figures (kaleido drives it; without
# it the report falls back to HTML) and runs the app's browser tests (Playwright drives
# /usr/bin/chromium; `playwright install` is never needed). Installed when we may (root or
# passwordless sudo).
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
    if command -v apt-get >/dev/null 2>&1 && $SUDO true 2>/dev/null; then
        $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
            || echo "setup: could not install chromium; benchmark figures will be HTML" >&2
    else
        echo "setup: chromium not installed (needs apt-get as root); benchmark figures will be HTML" >&2
    fi
fi
