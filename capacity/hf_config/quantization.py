"""The checkpoint's weight format (`quantization_config`) and the size band a checkpoint of a spec fits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from capacity.hf_config.fields import MAX_DIM, Fields
from capacity.spec import CheckpointQuant, ModelSpec

if TYPE_CHECKING:
    from capacity.hf_config.family import Model


# Bytes per parameter a checkpoint can plausibly store. Unquantized: 16-bit (a float32 config may
# ship bf16 weights) up to 32-bit (a bf16 config may ship float32 weights). Quantized: the
# quantized format's width for every parameter, up to 16-bit for all (embeddings, lm_head and
# ignored layers stay 16-bit). SLACK covers what the parser does not count (an unparsed vision
# tower, extra heads) and scales: a `total_size` outside the band is not this model's checkpoint.
_FORMAT_BYTES = {"fp8": 1.0, "int8": 1.0, "int4": 0.5, "nvfp4": 0.5, "mxfp4": 0.5}
CHECKPOINT_SLACK = 1.5


def checkpoint_size_band(spec: ModelSpec) -> tuple[int, int]:
    """(low, high) bytes a checkpoint of `spec` can plausibly hold (see _FORMAT_BYTES)."""
    params = spec.total_params
    if spec.quantization is not None:
        low_bytes = _FORMAT_BYTES.get(spec.quantization.weight_format, 0.5)
        high_bytes = 2.0
    else:
        low_bytes, high_bytes = 2.0, 4.0
    return int(params * low_bytes / CHECKPOINT_SLACK), int(params * high_bytes * CHECKPOINT_SLACK)


def checkpoint_size_problem(spec: ModelSpec, checkpoint_bytes: int) -> str | None:
    """Why a checkpoint's recorded size (`metadata.total_size`) cannot belong to `spec`, or None.

    A safetensors index with `total_size: 1` (or a wrong index next to the config) would replace
    the counted weights in every plan; the reason names both numbers."""
    if isinstance(checkpoint_bytes, bool) or not isinstance(checkpoint_bytes, int) or checkpoint_bytes <= 0:
        return f"checkpoint size {checkpoint_bytes!r} is not a positive number of bytes"
    low, high = checkpoint_size_band(spec)
    if low <= checkpoint_bytes <= high:
        return None
    fmt = spec.quantization.weight_format if spec.quantization is not None else spec.torch_dtype
    return (
        f"checkpoint total_size {checkpoint_bytes:,} bytes does not fit the {spec.total_params:,} parameters "
        f"counted from the config as {fmt} (expected {low:,} to {high:,} bytes)"
    )


# ---------------------------------------------------------------------------- quantization


def _modelopt_kv_cache_format(q: Fields) -> str | None:
    """The KV cache format a ModelOpt checkpoint declares, read as vLLM reads it (0.33 `utils/torch_utils.py`
    `get_kv_cache_quant_algo_string`: the first of `kv_cache_scheme` and `kv_cache_quant_algo` given, under
    `quantization` or at the top): "fp8" for FP8 or a static 8-bit float scheme; None for none, and for a format the
    engines' `auto` does not take as fp8 (NVFP4 is vLLM 0.20+'s nvfp4 cache, which capplan does not size)."""
    inner = q.raw("quantization")
    sections = (inner, q.data) if isinstance(inner, Mapping) else (q.data,)
    # a value of another shape is not an error: the engines then run `auto` as the model's dtype
    keys = ("kv_cache_scheme", "kv_cache_quant_algo")
    declared = next((section.get(key) for key in keys for section in sections if section.get(key)), None)
    if isinstance(declared, Mapping):
        static = declared.get("dynamic") is False
        return "fp8" if static and declared.get("num_bits") == 8 and declared.get("type") == "float" else None
    return "fp8" if isinstance(declared, str) and declared.lower() == "fp8" else None


def quantization(m: Model) -> CheckpointQuant | None:
    q = m.outer.sub("quantization_config") or m.cfg.sub("quantization_config")
    if q is None:
        return None
    method = (q.text("quant_method") or "").lower().replace("_", "-")
    if method == "fp8" or method == "fbgemm-fp8":
        # vLLM's Fp8Config refuses a block that is not 2 dimensions, and divides by each: two
        # positive integers, else a one-line reason (the block changes no size the plan counts)
        q.ints("weight_block_size", lo=1, hi=MAX_DIM, length=2)
        return CheckpointQuant(method="fp8", weight_format="fp8")
    if method in ("awq", "gptq"):
        bits = q.integer("bits", q.integer("w_bit", 4, hi=64), hi=64)
        group = q.integer("group_size", q.integer("q_group_size", 128, lo=-1, hi=MAX_DIM), lo=-1, hi=MAX_DIM)
        fmt = {4: "int4", 8: "int8"}.get(bits)
        if fmt is None:
            q.fail(f"unsupported {method} bit width {bits}")
        return CheckpointQuant(method=method, weight_format=fmt, group_size=group if group > 0 else None)
    if method == "mxfp4":
        return CheckpointQuant(method="mxfp4", weight_format="mxfp4", group_size=32, experts_only=True)
    if method == "compressed-tensors":
        return _compressed_tensors(m, q)
    if method == "modelopt":  # NVIDIA ModelOpt: `quant_algo` names the scheme
        algo = (q.text("quant_algo") or "").upper()
        kv = _modelopt_kv_cache_format(q)
        if algo.startswith("FP8"):
            return CheckpointQuant(method="modelopt", weight_format="fp8", kv_cache_format=kv)
        if algo in ("W4A16_AWQ", "INT4_AWQ", "W4A8_AWQ"):
            return CheckpointQuant(method="modelopt", weight_format="int4", group_size=128, kv_cache_format=kv)
        if algo.startswith("NVFP4"):
            return CheckpointQuant(
                method="modelopt",
                weight_format="nvfp4",
                group_size=16,
                attention_quantized=not _attention_ignored(m, q),
                kv_cache_format=kv,
            )
        m.notes.append(f"modelopt {algo or '(no quant_algo)'} weights: not modelled, sized as torch_dtype")
        return None
    if method == "bitsandbytes":
        if q.flag("load_in_4bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int4", group_size=64)
        if q.flag("load_in_8bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int8")
        q.fail("bitsandbytes config sets neither load_in_4bit nor load_in_8bit")
    m.notes.append(f"quantization method {method or '(none)'!r} not recognized: weights sized as torch_dtype")
    return None


def _compressed_tensors(m: Model, q: Fields) -> CheckpointQuant | None:
    groups = q.mapping("config_groups")
    if not groups:
        q.fail("compressed-tensors config has no `config_groups`")
    formats: set[tuple[str, int | None]] = set()
    for gname, group in groups.items():
        if not isinstance(group, Mapping):
            q.fail(f"`config_groups.{gname}` must be an object")
        g = Fields(group, q.label, f"{q.prefix}config_groups.{gname}.")
        w = g.sub("weights")
        if w is None:
            continue
        bits = w.integer("num_bits", hi=64)
        kind = (w.text("type", "int") or "int").lower()
        gsize = w.opt_int("group_size", lo=-1)
        if kind == "float" and bits == 8:
            formats.add(("fp8", None))
        elif kind == "int" and bits == 8:
            formats.add(("int8", None))
        elif kind == "int" and bits == 4:
            formats.add(("int4", gsize if gsize and gsize > 0 else None))
        elif kind == "float" and bits == 4:
            formats.add(("nvfp4", gsize if gsize and gsize > 0 else 16))
        else:
            w.fail(f"unsupported compressed-tensors weight format {bits}-bit {kind}")
    if not formats:
        q.fail("compressed-tensors config has no weight quantization")
    if len(formats) > 1:
        m.notes.append("compressed-tensors: several weight formats; the widest is used")
    order = {"fp8": 0, "int8": 0, "int4": 1, "nvfp4": 1}
    fmt, gsize = sorted(formats, key=lambda f: order[f[0]])[0]
    return CheckpointQuant(
        method="compressed-tensors",
        weight_format=fmt,
        group_size=gsize,
        attention_quantized=not _attention_ignored(m, q),
    )


def _attention_ignored(m: Model, q: Fields) -> bool:
    """True when the quantizer's ignore list keeps the attention projections of every layer 16-bit
    (NVFP4 exports commonly leave `self_attn` unquantized)."""
    ignore = q.data.get("ignore") or q.data.get("exclude_modules") or q.data.get("modules_to_not_convert") or []
    if not isinstance(ignore, list):
        return False
    entries = [str(e) for e in ignore]
    if any("self_attn" in e and ("*" in e.split("layers")[0] or "re:" in e or ".*" in e) for e in entries):
        return True
    return m.num_layers > 0 and sum("self_attn" in e for e in entries) >= m.num_layers
