"""The serving features a plan carries (LoRA adapters, speculative decoding) as plain JSON and as engine flags.

The flags are the engines' own (capacity/engines/command_flags.py) and read back through
`capacity.engines.command_line.read_command` to the same `LoraSpec` / `SpeculativeSpec`
(tests/test_deploy_features.py): vLLM `--enable-lora --max-loras --max-lora-rank --max-cpu-loras --lora-dtype
--lora-target-modules --fully-sharded-loras` and `--speculative-config JSON`; SGLang `--enable-lora
--max-loras-per-batch --max-lora-rank --max-loaded-loras --lora-target-modules` and `--speculative-algorithm
--speculative-draft-model-path --speculative-num-steps --speculative-eagle-topk --speculative-num-draft-tokens`.
TensorRT-LLM takes both through its --extra_llm_api_options YAML file, which is not written here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from capacity.engines.kinds import Engine
from capacity.features.lora_spec import LoraSpec
from capacity.features.speculative import SpecMethod, SpeculativeSpec


class FeatureError(ValueError):
    """A feature the plan carries that an engine's command line cannot express (one line: why)."""


@dataclass(frozen=True, slots=True)
class _LoraFlags:
    """One engine's spelling of the LoRA settings (None: no such flag)."""

    slots: str
    host_adapters: str
    dtype: str | None
    fully_sharded: str | None


_LORA_FLAGS = {
    Engine.VLLM: _LoraFlags("--max-loras", "--max-cpu-loras", "--lora-dtype", "--fully-sharded-loras"),
    Engine.SGLANG: _LoraFlags("--max-loras-per-batch", "--max-loaded-loras", None, None),
}
# SGLang 0.5.23 --speculative-algorithm per method (speculative/spec_info.py; NEXTN: EAGLE over the MTP layers)
_SGLANG_ALGORITHMS = {
    SpecMethod.EAGLE: "EAGLE",
    SpecMethod.EAGLE3: "EAGLE3",
    SpecMethod.MTP: "NEXTN",
    SpecMethod.DRAFT_MODEL: "STANDALONE",
    SpecMethod.NGRAM: "NGRAM",
}
_NO_FLAGS = "TensorRT-LLM takes {} through --extra_llm_api_options (a YAML file), which is not written here"


def lora_args(engine: Engine, spec: LoraSpec | None) -> list[str]:
    """The LoRA flags that start `engine` with `spec`'s slots, rank, host adapters and targets."""
    if spec is None:
        return []
    flags = _LORA_FLAGS.get(engine)
    if flags is None:
        raise FeatureError(_NO_FLAGS.format("LoRA (lora_config)"))
    args = ["--enable-lora"]
    for flag, value in ((flags.slots, spec.max_loras), ("--max-lora-rank", spec.max_lora_rank)):
        args += [flag, str(value)] if value is not None else []
    if spec.max_cpu_loras is not None:
        args += [flags.host_adapters, str(spec.max_cpu_loras)]
    if spec.lora_dtype != "auto":
        args += [*_flag(engine, flags.dtype, "--lora-dtype"), spec.lora_dtype]
    if spec.fully_sharded:
        args += _flag(engine, flags.fully_sharded, "--fully-sharded-loras")
    if spec.target_modules:
        args += ["--lora-target-modules", *spec.target_modules]
    return args


def _flag(engine: Engine, flag: str | None, setting: str) -> list[str]:
    """`flag`, or FeatureError where the engine has none for the setting (vLLM's name for it)."""
    if flag is None:
        raise FeatureError(f"{engine.value} has no flag for the plan's LoRA setting {setting}")
    return [flag]


def speculative_args(engine: Engine, spec: SpeculativeSpec | None) -> list[str]:
    """The speculative-decoding flags that start `engine` with `spec`'s method, draft and tokens."""
    if spec is None:
        return []
    if spec.method is SpecMethod.UNKNOWN:
        raise FeatureError("the plan's speculative decoding names no method: nothing to write")
    if engine is Engine.VLLM:
        if spec.eagle_topk != 1 or spec.num_draft_tokens is not None:
            raise FeatureError("vLLM proposes one chain of tokens: a tree (eagle_topk, num_draft_tokens) has no flag")
        config: dict[str, object] = {"method": spec.method.value, "num_speculative_tokens": spec.num_speculative_tokens}
        config |= {"model": spec.draft_model} if spec.draft_model else {}
        config |= {"draft_tensor_parallel_size": spec.draft_tp} if spec.draft_tp else {}
        return ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if engine is Engine.SGLANG:
        algorithm = _SGLANG_ALGORITHMS.get(spec.method)
        if algorithm is None or spec.draft_tp:
            raise FeatureError(f"SGLang has no flag for {spec.method.value} speculative decoding as planned")
        args = ["--speculative-algorithm", algorithm]
        args += ["--speculative-draft-model-path", spec.draft_model] if spec.draft_model else []
        args += ["--speculative-num-steps", str(spec.num_speculative_tokens)]
        args += ["--speculative-eagle-topk", str(spec.eagle_topk)]
        return [*args, "--speculative-num-draft-tokens", str(spec.verify_tokens_per_sequence)]
    raise FeatureError(_NO_FLAGS.format("speculative decoding (speculative_config)"))


def lora_mapping(spec: LoraSpec) -> dict[str, Any]:
    """`spec` as plain JSON values (`lora_from_mapping`'s input): every field, the modules as a list."""
    return {**asdict(spec), "target_modules": list(spec.target_modules)}


def speculative_mapping(spec: SpeculativeSpec) -> dict[str, Any]:
    """`spec` as plain JSON values, the draft by id (its resolved shape is the estimate's)."""
    return {
        "method": spec.method.value,
        "num_speculative_tokens": spec.num_speculative_tokens,
        "draft_model": spec.draft_model,
        "draft_tp": spec.draft_tp,
        "eagle_topk": spec.eagle_topk,
        "num_draft_tokens": spec.num_draft_tokens,
    }


def lora_from_mapping(data: object) -> LoraSpec:
    """A plan's `lora` object; FeatureError naming what is wrong."""
    values = _fields(data, "lora", ("max_loras", "max_lora_rank", "max_cpu_loras"), ("lora_dtype",))
    assert isinstance(data, Mapping)  # _fields checked it
    modules = data.get("target_modules") or []
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise FeatureError("plan field 'lora.target_modules' must be a list of module names")
    try:
        return LoraSpec(**values, target_modules=tuple(modules), fully_sharded=bool(data.get("fully_sharded")))
    except ValueError as exc:
        raise FeatureError(f"plan field 'lora': {exc}") from None


def speculative_from_mapping(data: object) -> SpeculativeSpec:
    """A plan's `speculative` object; FeatureError naming what is wrong."""
    ints = ("num_speculative_tokens", "draft_tp", "eagle_topk", "num_draft_tokens")
    values = _fields(data, "speculative", ints, ("method", "draft_model"))
    try:
        values["method"] = SpecMethod(values.get("method", ""))
    except ValueError:
        raise FeatureError(f"plan field 'speculative.method' must be one of {', '.join(SpecMethod)}") from None
    return SpeculativeSpec(**values)


def _fields(data: object, name: str, ints: tuple[str, ...], texts: tuple[str, ...]) -> dict[str, Any]:
    """The object's known fields, type-checked (unset ones left to the spec's defaults)."""
    if not isinstance(data, Mapping):
        raise FeatureError(f"plan field {name!r} must be an object")
    values: dict[str, Any] = {}
    for key in (*ints, *texts):
        value = data.get(key)
        if value is None:
            continue
        if key in ints and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise FeatureError(f"plan field '{name}.{key}' must be an integer >= 1")
        if key in texts and not isinstance(value, str):
            raise FeatureError(f"plan field '{name}.{key}' must be text")
        values[key] = value
    return values
