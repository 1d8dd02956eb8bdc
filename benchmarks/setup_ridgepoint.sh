#!/usr/bin/env bash
# The peer's venv for `benchmarks/grid.py --peer`: ridgepoint 0.1.2 (PyPI; a Rust core behind a
# Python API) in .venv-ridgepoint/ at the repo root (or $RIDGEPOINT_VENV), apart from the project's
# venv so nothing of capplan can reach it and nothing of ridgepoint can reach capplan.
# Idempotent: a stamp holding this script's hash makes a second run a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RIDGEPOINT_VENV:-.venv-ridgepoint}
PY=${PYTHON:-python3}
STAMP="$VENV/.ridgepoint-stamp"
HASH=$(sha256sum benchmarks/setup_ridgepoint.sh | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check 'ridgepoint==0.1.2'
"$VENV/bin/python" -c 'import ridgepoint'
printf '%s' "$HASH" >"$STAMP"
