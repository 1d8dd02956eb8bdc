#!/usr/bin/env bash
# The peer's venv for `benchmarks/aiconfigurator_peer.py`: NVIDIA's AIConfigurator 0.12.0 (PyPI:
# `aiconfigurator` and `aiconfigurator-core`, whose wheel carries the measured kernel tables; GPU-free,
# about 850 MB) in .venv-aiconfigurator/ at the repo root (or $AICONFIGURATOR_VENV), apart from the
# project's venv so nothing of capplan can reach it and nothing of it can reach capplan.
# PyPI is reached here, at setup, only; the benchmark runs it with HF_HUB_OFFLINE=1 on local configs.
# Idempotent: a stamp holding this script's hash makes a second run a no-op.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${AICONFIGURATOR_VENV:-.venv-aiconfigurator}
PY=${PYTHON:-python3}
STAMP="$VENV/.aiconfigurator-stamp"
HASH=$(sha256sum tools/aiconfigurator/setup_venv.sh | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  'aiconfigurator==0.12.0' 'aiconfigurator-core==0.12.0'
HF_HUB_OFFLINE=1 "$VENV/bin/python" -c 'import aiconfigurator'
printf '%s' "$HASH" >"$STAMP"
