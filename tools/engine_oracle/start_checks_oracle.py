"""vLLM 0.33.0's own start checks, run as a library on CPU (the engine-oracle venv).

Reads a JSON list of {"name", "config", "lengths"[, "hf_overrides"]} on stdin (`hf_overrides`: applied by vLLM's
own `--hf-overrides` steps first); prints one JSON object: per model, for each
length, None where vLLM's `config/model.py` `_get_and_verify_max_len` accepts it (as without
VLLM_ALLOW_LONG_MAX_MODEL_LEN) or its ValueError's message (the derived length from vLLM's own
`ModelArchConfigConvertor.derive_max_model_len_and_key`, rope scaling applied); plus
`Fp8Config.get_min_capability()`. A config the venv's transformers cannot build is reported with the reason.
SGLang 0.5.23 does not import here (no torchvision): its checks are read from the source instead.
Called by tests/test_engine_oracle_start.py.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any


def _with_overrides(hf: Any, overrides: dict[str, Any]) -> Any:
    """vLLM's own `--hf-overrides` steps: flat values `config.update()`d in `get_config` before its rope patch, then
    `ModelConfig._apply_dict_overrides` (with `_update_nested`) for the dict values, as `ModelConfig.__post_init__`."""
    from vllm.config.model import ModelConfig
    from vllm.transformers_utils.config import patch_rope_parameters

    flat = {key: value for key, value in overrides.items() if not isinstance(value, dict)}
    nested = {key: value for key, value in overrides.items() if isinstance(value, dict)}
    if flat:
        hf.update(flat)
    patch_rope_parameters(hf)
    patch_rope_parameters(hf.get_text_config())
    if nested:
        owner = types.SimpleNamespace()
        owner._update_nested = lambda target, updates: ModelConfig._update_nested(owner, target, updates)
        ModelConfig._apply_dict_overrides(owner, hf, nested)
    return hf


def _vllm_checks(config: dict[str, Any], lengths: list[int], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from transformers import AutoConfig
    from vllm.config.model import _get_and_verify_max_len
    from vllm.transformers_utils.config import get_hf_text_config
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    hf = AutoConfig.for_model(**config)
    if overrides:
        hf = _with_overrides(hf, overrides)
    text = get_hf_text_config(hf)
    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(hf.model_type, ModelArchConfigConvertorBase)(hf, text)
    arch = types.SimpleNamespace(derived_max_model_len_and_key=convertor.derive_max_model_len_and_key())
    out: dict[str, Any] = {}
    for length in lengths:
        try:
            _get_and_verify_max_len(hf, arch, None, length, False, None)
            out[str(length)] = None
        except ValueError as exc:
            out[str(length)] = str(exc)
    return out


def main() -> None:
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    cases = json.load(sys.stdin)
    result: dict[str, Any] = {"vllm_fp8_min_capability": Fp8Config.get_min_capability(), "models": {}}
    for case in cases:
        try:
            checks = _vllm_checks(case["config"], case["lengths"], case.get("hf_overrides"))
            result["models"][case["name"]] = {"vllm": checks}
        except Exception as exc:  # the venv's transformers cannot build this config: reported, not raised
            result["models"][case["name"]] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    print("@@start-oracle@@ " + json.dumps(result))


if __name__ == "__main__":
    main()
