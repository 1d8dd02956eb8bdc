"""The checkpoint's weight format (`quantization_config`) and the size band a checkpoint of a spec fits."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING

from capacity.hf_config.fields import MAX_DIM, Fields, clip
from capacity.kv.kinds import RecurrentState
from capacity.spec import CheckpointQuant, LayerKVSpec, LayerParams, ModelSpec

if TYPE_CHECKING:
    from capacity.hf_config.family import Family, Model


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


def quantization(m: Model, layers: Sequence[LayerKVSpec], params: Sequence[LayerParams]) -> CheckpointQuant | None:
    """The checkpoint's stored format, with the parts its ignore list keeps 16-bit (read on `layers` / `params`)."""
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
        # gpt-oss: only the routed experts are MXFP4
        return CheckpointQuant("mxfp4", "mxfp4", group_size=32, attention_quantized=False, mlp_quantized=False)
    if method == "compressed-tensors":
        return _compressed_tensors(m, q, ignored_parts(m, q, IgnoreRule.COMPRESSED_TENSORS, layers, params))
    if method == "modelopt":  # NVIDIA ModelOpt: `quant_algo` names the scheme
        algo = (q.text("quant_algo") or "").upper()
        kv = _modelopt_kv_cache_format(q)
        block: int | None
        if algo.startswith("NVFP4"):
            fmt, block = "nvfp4", 16
        elif algo.startswith("FP8"):
            fmt, block = "fp8", None
        elif algo in ("W4A16_AWQ", "INT4_AWQ", "W4A8_AWQ"):
            fmt, block = "int4", 128
        else:
            m.notes.append(f"modelopt {algo or '(no quant_algo)'} weights: not modelled, sized as torch_dtype")
            return None
        parts = ignored_parts(m, q, IgnoreRule.MODELOPT, layers, params)
        return CheckpointQuant(
            "modelopt",
            fmt,
            group_size=block,
            kv_cache_format=kv,
            attention_quantized=not parts.attention,
            mlp_quantized=not parts.mlp,
        )
    if method == "bitsandbytes":
        if q.flag("load_in_4bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int4", group_size=64)
        if q.flag("load_in_8bit", False):
            return CheckpointQuant(method="bitsandbytes", weight_format="int8")
        q.fail("bitsandbytes config sets neither load_in_4bit nor load_in_8bit")
    m.notes.append(f"quantization method {method or '(none)'!r} not recognized: weights sized as torch_dtype")
    return None


def _compressed_tensors(m: Model, q: Fields, parts: IgnoredParts) -> CheckpointQuant | None:
    groups = q.mapping("config_groups")
    if not groups:
        q.fail("compressed-tensors config has no `config_groups`")
    formats: set[tuple[str, int | None, bool]] = set()  # (format, group size, zero points)
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
        # compressed-tensors' QuantizationArgs default: symmetric, so no zero points (vLLM allocates
        # `weight_zero_point` only for an asymmetric scheme)
        zero_points = not w.flag("symmetric", True)
        if kind == "float" and bits == 8:
            formats.add(("fp8", None, False))
        elif kind == "int" and bits == 8:
            formats.add(("int8", None, False))
        elif kind == "int" and bits == 4:
            formats.add(("int4", gsize if gsize and gsize > 0 else None, zero_points))
        elif kind == "float" and bits == 4 and gsize == 32 and (w.text("strategy") or "") == "group":
            # vLLM 0.33 CompressedTensorsConfig._is_mxfp4: group strategy, groups of 32 -> one e8m0 scale a group
            formats.add(("mxfp4", 32, False))
        elif kind == "float" and bits == 4:
            formats.add(("nvfp4", gsize if gsize and gsize > 0 else 16, False))
        else:
            w.fail(f"unsupported compressed-tensors weight format {bits}-bit {kind}")
    if not formats:
        q.fail("compressed-tensors config has no weight quantization")
    if len(formats) > 1:
        m.notes.append("compressed-tensors: several weight formats; the widest is used")
    order = {"fp8": 0, "int8": 0, "int4": 1, "nvfp4": 1, "mxfp4": 1}
    fmt, gsize, zero_points = sorted(formats, key=lambda f: (order[f[0]], not f[2]))[0]
    return CheckpointQuant(
        method="compressed-tensors",
        weight_format=fmt,
        group_size=gsize,
        attention_quantized=not parts.attention,
        mlp_quantized=not parts.mlp,
        group_zero_points=zero_points,
    )


class IgnoreRule(Enum):
    """How a quantizer's ignore list names the modules it leaves 16-bit, as vLLM reads it."""

    # compressed_tensors/utils.py should_ignore_layer -> `is_equal_or_regex_match`: `re:` and a regex matched
    # from the start of the module's name (re.match), else the exact name
    COMPRESSED_TENSORS = "compressed-tensors"
    # modelopt.py ModelOptConfig.is_layer_excluded: the exact name, a substring of it, or a shell wildcard (fnmatch)
    MODELOPT = "modelopt"

    def matcher(self, patterns: Sequence[str], m: Model) -> Callable[[str], bool]:
        """A test of one module name against the list. Patterns that could backtrack without bound are noted and
        left out (the part they name is then sized quantized, the estimate's default); past `_MATCH_BUDGET`
        pattern tests the test raises `_OverBudget`."""
        exact = frozenset(patterns)
        tests: list[Callable[[str], object]]
        if self is IgnoreRule.COMPRESSED_TENSORS:
            regexes = [p[3:] for p in patterns if p.startswith("re:")]
            tests = [re.compile(p).match for p in _bounded(m, regexes)]
        else:
            tests = [partial(_contains_or_wildcard, p) for p in _bounded(m, patterns)]
        budget = _MATCH_BUDGET

        def ignored(name: str) -> bool:
            nonlocal budget
            if name in exact:
                return True
            budget -= len(tests)
            if budget < 0:
                raise _OverBudget
            return any(test(name) for test in tests)

        return ignored


def _contains_or_wildcard(pattern: str, name: str) -> bool:
    return pattern in name or fnmatch.fnmatchcase(name, pattern)


class _OverBudget(Exception):
    """The ignore list is too long to test on every layer's modules."""


# Ignore patterns come from the checkpoint: a regex whose repetitions nest, or that repeats without bound more than
# a few times, can take exponential (or high-polynomial) time on a module name; vLLM would run it, capplan flags it.
# And a list can be long: a real one needs a few thousand pattern tests, a hostile one is cut off at the budget
_MAX_UNBOUNDED_REPEATS = 4
_UNBOUNDED = re.compile(r"(?<!\\)(?:[*+]|\{\d*,\})")
_REPEATED_GROUP = re.compile(r"(?<!\\)\)(?:[*+]|\{\d*,\d*\})")
_MATCH_BUDGET = 200_000


def _bounded(m: Model, patterns: Sequence[str]) -> list[str]:
    """The patterns safe to run: valid, without nested or many unbounded repetitions (the others in one note)."""
    kept: list[str] = []
    left_out: list[str] = []
    for pattern in patterns:
        safe = len(_UNBOUNDED.findall(pattern)) <= _MAX_UNBOUNDED_REPEATS and not _REPEATED_GROUP.search(pattern)
        try:
            if safe:
                re.compile(pattern)
        except re.error:
            safe = False
        (kept if safe else left_out).append(pattern)
    if left_out:
        m.notes.append(
            f"{len(left_out)} quantization ignore pattern(s) not evaluated (not a valid regex, or nested or repeated "
            f"repetition), e.g. {clip(left_out[0])}: what they name is sized quantized"
        )
    return kept


# the prefixes a decoder layer's modules carry in the engines' and quantizers' names (a causal LM, a multimodal
# wrapper's language model in either order, Nemotron-H's backbone)
_LAYER_PREFIXES = ("model.layers", "language_model.model.layers", "model.language_model.layers", "backbone.layers")


@dataclass(frozen=True, slots=True)
class IgnoredParts:
    """Which of a checkpoint's parts its ignore list keeps 16-bit on every layer that has them. Read on the layers
    with an attention cache; a hybrid model's state mixers, which `LayerParams.attention` counts with attention,
    follow that answer (an approximation where a list names only one of the two)."""

    attention: bool = False
    mlp: bool = False  # the dense MLP and the shared experts


def ignored_parts(
    m: Model, q: Fields, rule: IgnoreRule, layers: Sequence[LayerKVSpec], params: Sequence[LayerParams]
) -> IgnoredParts:
    """Test the ignore list as the engine does, on the module names of the family (`Family.*_module`) for every
    layer that has the part: attention on layers with an attention cache, the dense MLP on dense layers, the
    shared experts on MoE layers. A part with no layer is not ignored."""
    raw = q.data.get("ignore") or q.data.get("exclude_modules") or q.data.get("modules_to_not_convert") or []
    if not isinstance(raw, list) or not raw:
        return IgnoredParts()
    ignored = rule.matcher([str(p) for p in raw], m)
    try:
        return _ignored_parts(ignored, m.rules, layers, params)
    except _OverBudget:
        m.notes.append("quantization ignore list too long to evaluate on every layer: every part sized quantized")
        return IgnoredParts()


def _ignored_parts(
    ignored: Callable[[str], bool], names: Family, layers: Sequence[LayerKVSpec], params: Sequence[LayerParams]
) -> IgnoredParts:
    def every(indexes: Sequence[int], module: str) -> bool:
        # one projection stands for the module: the engines refuse a fused projection whose shards disagree
        return bool(indexes) and all(
            any(ignored(f"{prefix}.{i}.{module}") for prefix in _LAYER_PREFIXES) for i in indexes
        )

    attention = [layer.index for layer in layers if not isinstance(layer.cache, RecurrentState)]
    dense = [i for i, p in enumerate(params) if p.mlp and not p.experts]
    shared = [i for i, p in enumerate(params) if p.mlp and p.experts]
    mlp = (
        bool(dense or shared)
        and (not dense or every(dense, f"{names.dense_mlp_module}.down_proj"))
        and (not shared or every(shared, f"{names.shared_expert_module}.down_proj"))
    )
    return IgnoredParts(attention=every(attention, f"{names.attention_module}.o_proj"), mlp=mlp)
