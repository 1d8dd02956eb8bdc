"""Speculative decoding as a startup log states it, carried as one `speculative_config` JSON text per observation.

vLLM logs its `--speculative-config` in `non-default args:` as a Python dict ({'method': 'mtp',
'num_speculative_tokens': 3, 'model': ...}; `vllm/entrypoints/utils.py` log_non_default_args) and takes it on the
command line as JSON; SGLang dumps `server_args=ServerArgs(... speculative_algorithm='EAGLE3',
speculative_draft_model_path=..., speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4
...)` and takes the same as flags. Each lands here as `spec:<key>` fields, folded into one JSON object in the
engine's own terms (method as the engine spells it, model, num_speculative_tokens, eagle_topk, num_draft_tokens),
which `capacity.calibration` turns into the `SpeculativeSpec` the estimate sizes.
"""

from __future__ import annotations

import json
from typing import Any

# SGLang's ServerArgs fields / flags -> `spec:<key>` (the algorithm names the method: off where it is None)
SPECULATIVE_KEYS = {
    "speculative_algorithm": "spec:method",
    "speculative_draft_model_path": "spec:model",
    "speculative_num_steps": "spec:num_speculative_tokens",
    "speculative_eagle_topk": "spec:eagle_topk",
    "speculative_num_draft_tokens": "spec:num_draft_tokens",
}
_VLLM_KEYS = ("method", "model", "num_speculative_tokens", "draft_tensor_parallel_size")  # SpeculativeConfig's
_INTS = frozenset({"num_speculative_tokens", "eagle_topk", "num_draft_tokens", "draft_tensor_parallel_size"})


def vllm_config_fields(value: object) -> dict[str, Any]:
    """vLLM's speculative config (a dict from `non-default args`, or the JSON text of a command line) as
    `spec:<key>` fields; nothing where it is not a readable object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {f"spec:{key}": value[key] for key in _VLLM_KEYS if value.get(key) is not None}


def fold_speculative(values: dict[str, Any]) -> dict[str, Any]:
    """The `spec:<key>` fields as one `speculative_config` JSON text (sorted keys), and the speculative feature
    on where it names a method or a draft (not where SGLang's algorithm is None); the fields' own keys removed."""
    stated: dict[str, Any] = {}
    for key, value in values.items():
        if not key.startswith("spec:") or _null(value):
            continue
        name = key.removeprefix("spec:")
        text = str(value).strip().strip("'\"")
        stated[name] = int(text) if name in _INTS and text.isdigit() else text
    out = {k: v for k, v in values.items() if not k.startswith("spec:")}
    # SGLang states its algorithm always: None is off whatever draft path is set (vLLM's config may leave the
    # method to be inferred from the draft's name, so it has no `spec:method` then)
    switched_off = "spec:method" in values and _null(values["spec:method"])
    if ("method" in stated or "model" in stated) and not switched_off:
        out["speculative_config"] = json.dumps(stated, sort_keys=True)
        out["feature:speculative"] = True
    return out


def _null(value: object) -> bool:
    """A value the log prints for "not set"."""
    return value is None or str(value).strip().strip("'\"").lower() in ("", "none", "null")
