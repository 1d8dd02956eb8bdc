#!/usr/bin/env bash
# The engine-oracle venv (.venv-oracle/ at the repo root, or $ENGINE_ORACLE_VENV): the vLLM 0.33.0
# and SGLang 0.5.23 wheels installed with --no-deps next to the local CPU torch and the light
# packages their planning modules import. Separate from .venv because vLLM 0.33 needs
# transformers >=5.16.1,<5.21 while the project's oracle extra pins 5.24.
# Idempotent: a stamp holding this script's hash makes a second run a no-op.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${ENGINE_ORACLE_VENV:-.venv-oracle}
PY=${PYTHON:-python3}
STAMP="$VENV/.engine-oracle-stamp"
HASH=$(cat tools/engine_oracle/setup_venv.sh tools/engine_oracle/requirements.txt | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# torch through pip, pinned to the local CPU build: any other spec pulls a multi-GB CUDA build.
"${PIP[@]}" 'torch==2.13.0'
# What `import vllm.config`, `vllm.v1.kv_cache_interface`, `vllm.v1.core.kv_cache_utils`,
# `vllm.v1.core.kv_cache_planning` and `sglang.srt.server_args` need, pinned (requirements.txt).
"${PIP[@]}" -r tools/engine_oracle/requirements.txt
# compressed-tensors: imported by vLLM's model modules (the state shapes of hybrid models)
"${PIP[@]}" --no-deps 'vllm==0.33.0' 'sglang==0.5.23' 'compressed-tensors==0.17.0'
"$VENV/bin/python" - <<'PY'
import vllm.config  # noqa: F401
import vllm.v1.core.kv_cache_planning  # noqa: F401
import vllm.v1.core.kv_cache_utils  # noqa: F401
import vllm.v1.kv_cache_interface  # noqa: F401
import sglang.srt.server_args  # noqa: F401
PY
# what SGLang's pool configurator imports beyond those, in a folder of its own that only the SGLang
# oracle puts on PYTHONPATH (tests/test_engine_sglang.py): torchvision (--no-deps; the oracle script keeps
# its C++ ops from loading against the CPU torch) would break `import vllm` if it sat in the venv
"${PIP[@]}" --no-deps --target "$VENV/sglang-extra" 'dill==0.4.1' 'gguf==0.19.0' 'torchvision==0.28.0'
printf '%s' "$HASH" >"$STAMP"
