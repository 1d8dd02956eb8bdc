"""Bytes per element of the dtypes users and configs name, and the serving dtype an engine picks."""

from __future__ import annotations

from capacity.engines.kinds import Engine
from capacity.spec import ModelSpec, SpecError

GIB = 1 << 30

# Bytes per element of a dtype name as users and configs spell it.
ELEMENT_BYTES: dict[str, int] = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_e4m3fn": 1,
    "fp8_inc": 1,
    "int8": 1,
    "fp8_ds_mla": 1,
}
CANONICAL_DTYPE = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}
WEIGHT_DTYPES = ("auto", "bf16", "fp16", "float32", "fp8", "int8", "int4", "mxfp4", "nvfp4")
KV_DTYPES = ("auto", "bf16", "fp16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")


def element_bytes(dtype: str) -> int:
    """Bytes per element; raises SpecError for an unknown dtype name."""
    try:
        return ELEMENT_BYTES[dtype.lower()]
    except KeyError:
        raise SpecError(f"unknown dtype {dtype!r}; expected one of {', '.join(sorted(ELEMENT_BYTES))}") from None


def serving_dtype(model: ModelSpec, engine: str = Engine.VLLM) -> str:
    """The dtype activations and `auto` KV use: the config's, except float32 checkpoints, which
    engines that cast them (vLLM, SGLang) serve in bfloat16 unless told otherwise."""
    dtype = CANONICAL_DTYPE.get(model.torch_dtype.lower(), "bfloat16")
    if dtype == "float32" and Engine(engine).casts_fp32_to_bf16:
        return "bfloat16"
    return dtype


def kv_element_bytes(kv_dtype: str, activation_dtype: str) -> int:
    """`auto` = the dtype the model runs in; fp8 variants 1 byte."""
    if kv_dtype == "auto":
        return element_bytes(activation_dtype)
    return element_bytes(kv_dtype)


def format_gib(n: int | float) -> str:
    """Bytes as messages print them: GiB with two decimals."""
    return f"{n / GIB:,.2f} GiB"
