"""vLLM 0.33.0's own resolution of `--kv-cache-dtype auto` from a checkpoint's quantization config, run as a library
(the engine-oracle venv): `vllm/utils/torch_utils.py` `resolve_kv_cache_dtype_string`, which `engine/arg_utils.py`
calls before it builds the CacheConfig.

Reads a JSON object {name: quantization_config} on stdin; prints one line, the marker then a JSON object {name: the
cache dtype vLLM runs `auto` as ("auto": the model's dtype)}. Called by tests/test_engine_oracle_kv_dtype.py.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

MARKER = "@@kv-dtype-oracle@@ "


def main() -> None:
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    configs: dict[str, Any] = json.load(sys.stdin)
    out = {}
    for name, quantization_config in configs.items():
        model_config = types.SimpleNamespace(hf_config=types.SimpleNamespace(quantization_config=quantization_config))
        out[name] = resolve_kv_cache_dtype_string("auto", model_config)
    print(MARKER + json.dumps(out))


if __name__ == "__main__":
    main()
