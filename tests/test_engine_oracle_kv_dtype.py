"""vLLM 0.33.0's own resolution of `--kv-cache-dtype auto` as the oracle for the KV cache format capplan reads from a
checkpoint's quantization config (`CheckpointQuant.kv_cache_format`, `EngineProfile.resolved_kv_dtype`).

vLLM runs in the engine-oracle venv as a subprocess (`tools/engine_oracle/kv_dtype_oracle.py`: `vllm/utils/
torch_utils.py` `resolve_kv_cache_dtype_string`, which `engine/arg_utils.py` calls before it builds the CacheConfig):
for each quantization config, the cache dtype vLLM runs `auto` as must be the one capplan's vLLM 0.33 profile resolves
for the checkpoint (fp8_e4m3 where it reads a declared FP8 cache, the model's dtype where vLLM keeps `auto`; vLLM's
nvfp4 cache, which capplan does not size, is kept as `auto` and said so by the parse test).

Without the oracle venv the test is skipped with the reason; under CI (CI=true) it fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from capacity.engines.registry import engine_profile
from tests.conftest import ROOT, require_oracle_venv, run_in_oracle_venv
from tests.test_checkpoint_kv_dtype import MODELOPT_FP8, modelopt_llama

pytestmark = pytest.mark.engine_oracle

RUNNER = ROOT / "tools" / "engine_oracle" / "kv_dtype_oracle.py"
MARKER = "@@kv-dtype-oracle@@ "
FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
# the quantization configs the checkpoints carry (keys beside MODELOPT_FP8's), as ModelOpt writes them and variants
CASES: dict[str, dict[str, Any]] = {
    "fp8-kv": {"kv_cache_quant_algo": "FP8"},
    "fp8-kv-lower-case": {"kv_cache_quant_algo": "fp8"},
    "no-kv": {},
    "null-kv": {"kv_cache_quant_algo": None},
    "nvfp4-kv": {"kv_cache_quant_algo": "NVFP4"},
    "static-fp8-scheme": {"kv_cache_scheme": FP8_SCHEME},
    "dynamic-fp8-scheme": {"kv_cache_scheme": FP8_SCHEME | {"dynamic": True}},
    "nested-fp8-kv": {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
    "scheme-before-algo": {"kv_cache_scheme": FP8_SCHEME | {"num_bits": 4}, "kv_cache_quant_algo": "FP8"},
}


@pytest.fixture(scope="module")
def vllm_runs_auto_as() -> dict[str, str]:
    require_oracle_venv()
    done = run_in_oracle_venv(RUNNER, {name: MODELOPT_FP8 | kv for name, kv in CASES.items()}, timeout_s=600)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(MARKER)), None)
    assert line is not None, done.stderr[-2000:]
    result: dict[str, str] = json.loads(line[len(MARKER) :])
    return result


@pytest.mark.parametrize("case", sorted(CASES))
def test_capplan_runs_auto_as_vllm_033_does(case: str, vllm_runs_auto_as: dict[str, str]) -> None:
    spec = modelopt_llama(**CASES[case])
    ours = engine_profile("vllm", "0.33.0").resolved_kv_dtype(spec, "auto")
    theirs = vllm_runs_auto_as[case]
    if theirs == "nvfp4":  # vLLM's nvfp4 cache: capplan does not size it and keeps the model's dtype
        assert ours == "auto", case
    else:
        assert ours == theirs, (case, ours, theirs)
