"""Workload profiles (`workloads.yaml` at the repository root, or `CAPPLAN_WORKLOADS`).

```yaml
schema_version: 1
defaults:            # applied to every workload (a workload's own value wins)
  headroom: 0.9
  dtype_policy: native
procurement:
  whole_nodes: true  # buy GPUs in nodes of gpus_per_node
  gpu_limits: {h100-sxm-80gb: 64}   # at most this many GPUs of a SKU
  gpus: []           # SKUs to consider (empty: every GPU with a price)
  allow_estimated_prices: false  # true: also buy parts whose price is an estimate (gpus.yaml price_basis)
workloads:
  - name: chat
    models: [meta-llama/Llama-3.1-8B-Instruct]   # or `model: X`
    target_concurrency: 256
    context: {p50: 2048, p95: 8192, p99: 16384}   # or `context_tokens: 8192`
    plan_for: p95    # which percentile to size for (default: the largest given)
    max_model_len: 16384
    dtype_policy: fp8            # native | fp8-kv | fp8 | any, or {weights: [...], kv: [...]}
    shared_prefix_tokens: 1500   # a prompt prefix every request starts with: held once (prefix caching)
    prefix_hit_rate: 0.6         # share of prompt tokens served from the prefix cache (TTFT, what it buys)
    speculative: {method: eagle3, model: ID, num_speculative_tokens: 3}   # optional: vLLM's spelling
    acceptance_rate: 0.7         # optional: the draft's per-token acceptance rate (TPOT and tokens/s)
    adapters: {count: 8, rank: 32}   # LoRA adapters served (or `adapters: 8`): GPU slots for each
```

Parsing never raises for a bad entry: `load_workloads` returns the profiles it could read and one
error (name, reason) per entry it could not, so one typo does not hide the other workloads.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from capacity.features.lora import AdapterSet
from capacity.features.prefix_caching import PrefixCaching
from capacity.features.speculative import SpeculativeConfigError, SpeculativeSpec, from_vllm_config
from capacity.offload_procurement import HostMemoryPrice
from capacity.planning_types import DTYPE_POLICIES, DtypePolicy, SolverOptions, WorkloadProfile
from capacity.procurement import workload_buckets
from capacity.spec import GpuSku, SpecError
from models_registry.resolve import with_resolved_draft

ENV_VAR = "CAPPLAN_WORKLOADS"
FILE_NAME = "workloads.yaml"
PROJECT_ROOT = Path(__file__).resolve().parents[1]

_WORKLOAD_KEYS = {
    "name",
    "description",
    "model",
    "models",
    "target_concurrency",
    "context_tokens",
    "context",
    "plan_for",
    "max_model_len",
    "dtype_policy",
    "headroom",
    "engine",
    "engine_version",
    "gpus",
    "max_gpus_per_replica",
    "tp_sizes",
    "pp_sizes",
    "gpu_memory_utilization",
    "tpot_ms_target",
    "ttft_ms_target",
    "output_tokens",
    "request_rate",
    "input",
    "output",
    "shared_prefix_tokens",
    "prefix_hit_rate",
    "speculative",
    "acceptance_rate",
    "adapters",
}
_DEFAULT_KEYS = _WORKLOAD_KEYS - {
    "name",
    "description",
    "model",
    "models",
    "target_concurrency",
    "context",
    "context_tokens",
    "plan_for",
    "request_rate",
    "input",
    "output",
}
_PROCUREMENT_KEYS = {
    "whole_nodes",
    "gpu_limits",
    "gpus",
    "method",
    "allow_estimated_prices",
    "host_memory",
    "local_nvme",
}

WORKLOAD_SCHEMA: dict[str, Any] = {
    "workload": pl.String,
    "description": pl.String,
    "models": pl.List(pl.String),
    "target_concurrency": pl.Int64,
    "context_tokens": pl.Int64,
    "context_source": pl.String,
    "max_model_len": pl.Int64,
    "dtype_policy": pl.String,
    "weight_dtypes": pl.List(pl.String),
    "kv_dtypes": pl.List(pl.String),
    "headroom": pl.Float64,
    "engine": pl.String,
    "engine_version": pl.String,
    "gpus": pl.List(pl.String),
    "max_gpus_per_replica": pl.Int64,
    "request_rate_per_s": pl.Float64,
    "request_buckets": pl.List(pl.String),
    # the serving features the profile declares (issue 23): what the plan sizes for it
    "adapters": pl.Int64,
    "adapter_rank": pl.Int64,
    "adapter_slots": pl.Int64,
    "speculative_method": pl.String,
    "speculative_draft": pl.String,
    "num_speculative_tokens": pl.Int64,
    "acceptance_rate": pl.Float64,
    "shared_prefix_tokens": pl.Int64,
    "prefix_hit_rate": pl.Float64,
    "valid": pl.Boolean,
    "error": pl.String,
    "source_path": pl.String,
}


@dataclass(frozen=True)
class ProcurementSettings:
    whole_nodes: bool = True
    gpu_limits: dict[str, int] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    method: str = "auto"
    allow_estimated_prices: bool = False  # buy parts whose price is an estimate (price_basis: estimate)
    # host RAM as a purchasable KV tier ({usd_per_gib_hour, source}): None, and plans buy no offload
    host_memory: HostMemoryPrice | None = None
    # local NVMe as a KV tier ({usd_per_gib_hour, source, read_gbps}): None, and plans buy none
    local_nvme: HostMemoryPrice | None = None

    def buys(self, gpu: GpuSku) -> bool:
        """A GPU procurement and placement may choose: allowed by `gpus`, and priced at what someone can pay
        (a list or contract price) unless estimated prices are opted in."""
        if self.gpus and gpu.id not in self.gpus:
            return False
        return self.allow_estimated_prices or gpu.priced_to_buy

    def solver(self, available: Mapping[str, int] | None = None) -> SolverOptions:
        """The solver's options; `available` (GPUs obtainable per SKU, from the catalog's prices) caps
        `gpu_limits` where it is lower."""
        limits = dict(self.gpu_limits)
        for gpu, count in (available or {}).items():
            limits[gpu] = min(limits.get(gpu, count), count)
        return SolverOptions(whole_nodes=self.whole_nodes, gpu_limits=limits, method=self.method)


@dataclass(frozen=True)
class WorkloadsFile:
    path: Path | None
    profiles: tuple[WorkloadProfile, ...]
    procurement: ProcurementSettings
    errors: tuple[tuple[str, str], ...]  # (workload name or position, reason)

    def frame(self) -> pl.DataFrame:
        """`raw.workloads`: every profile read, and one row per entry that could not be."""
        rows: list[dict[str, Any]] = []
        for p in self.profiles:
            rows.append(
                {
                    "workload": p.name,
                    "description": p.description or None,
                    "models": list(p.models),
                    "target_concurrency": p.target_concurrency,
                    "context_tokens": p.context_tokens,
                    "context_source": p.context_source or None,
                    "max_model_len": p.model_len,
                    "dtype_policy": p.dtype_policy.name,
                    "weight_dtypes": list(p.dtype_policy.weight_dtypes),
                    "kv_dtypes": list(p.dtype_policy.kv_dtypes),
                    "headroom": p.headroom,
                    "engine": p.engine,
                    "engine_version": p.engine_version,
                    "gpus": list(p.gpus),
                    "max_gpus_per_replica": p.max_gpus_per_replica,
                    "request_rate_per_s": p.request_rate_per_s,
                    "request_buckets": [
                        f"{b.label}: {b.input_tokens} in + {b.output_tokens} out, {b.share:.4g} of requests"
                        for b in workload_buckets(p)
                    ]
                    if p.request_rate_per_s is not None
                    else None,
                    **_feature_columns(p),
                    "valid": True,
                    "error": None,
                }
            )
        for name, reason in self.errors:
            rows.append({"workload": name, "valid": False, "error": reason})
        source = str(self.path) if self.path else None
        return pl.DataFrame(
            [{k: r.get(k) for k in WORKLOAD_SCHEMA} | {"source_path": source} for r in rows], schema=WORKLOAD_SCHEMA
        )


def _feature_columns(p: WorkloadProfile) -> dict[str, Any]:
    """The profile's LoRA adapters, speculative decoding and prefix caching as `raw.workloads` columns."""
    a, s, prefix = p.adapters, p.speculative, p.prefix_caching
    return {
        "adapters": a.count if a else None,
        "adapter_rank": a.rank if a else None,
        "adapter_slots": a.lora_spec().max_loras if a else None,
        "speculative_method": s.method.value if s else None,
        "speculative_draft": s.draft_model if s else None,
        "num_speculative_tokens": s.num_speculative_tokens if s else None,
        "acceptance_rate": p.acceptance_rate,
        "shared_prefix_tokens": prefix.shared_prefix_tokens or None,
        "prefix_hit_rate": prefix.hit_rate,
    }


def workloads_path(path: str | Path | None = None) -> Path:
    """The argument, else `CAPPLAN_WORKLOADS`, else ./workloads.yaml, else the repository's."""
    if path:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    here = Path(FILE_NAME)
    return here if here.is_file() else PROJECT_ROOT / FILE_NAME


def _policy(value: object) -> DtypePolicy:
    if value is None:
        return DTYPE_POLICIES["native"]
    if isinstance(value, str):
        if value not in DTYPE_POLICIES:
            raise SpecError(f"unknown dtype_policy {value!r}; expected one of {', '.join(DTYPE_POLICIES)} or a mapping")
        return DTYPE_POLICIES[value]
    if isinstance(value, dict):
        unknown = set(value) - {"name", "weights", "kv"}
        if unknown:
            raise SpecError(f"dtype_policy: unknown key(s) {', '.join(sorted(unknown))}")
        weights = tuple(str(v) for v in value.get("weights") or ("auto",))
        kv = tuple(str(v) for v in value.get("kv") or ("auto",))
        return DtypePolicy(str(value.get("name") or "custom"), weights, kv)
    raise SpecError(f"dtype_policy must be a name or a mapping, got {type(value).__name__}")


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) < 1e7:
        raise SpecError(f"{what} must be a positive number of milliseconds, got {value!r}")
    return float(value)


def _speculative(value: object) -> SpeculativeSpec | None:
    """`speculative`: vLLM's speculative config as a mapping (or its JSON text), for either engine; the draft
    resolved like a model id (`models_registry.resolve.with_resolved_draft`)."""
    if value is None:
        return None
    try:
        text = value if isinstance(value, str) else json.dumps(value)
        return with_resolved_draft(from_vllm_config(text))
    except (SpeculativeConfigError, TypeError) as exc:
        raise SpecError(f"speculative: {exc}") from None


def _rate(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) < 1e9:
        raise SpecError(f"request_rate must be a positive number of requests per second, got {value!r}")
    return float(value)


def _prefix_caching(entry: dict[str, Any]) -> PrefixCaching:
    """`shared_prefix_tokens` (a prefix every request starts with) and `prefix_hit_rate` (the share of prompt
    tokens the prefix cache serves, 0-1); PrefixCaching.problem judges the values (WorkloadProfile.validate)."""
    shared = _int(entry["shared_prefix_tokens"], "shared_prefix_tokens") if "shared_prefix_tokens" in entry else 0
    rate = entry.get("prefix_hit_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        raise SpecError(f"prefix_hit_rate must be a number in [0, 1], got {rate!r}")
    return PrefixCaching(None, shared, None if rate is None else float(rate))


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"allow_estimated_prices must be true or false, got {value!r}")
    return value


def _host_memory(value: object, key: str = "host_memory") -> HostMemoryPrice | None:
    """`host_memory: {usd_per_gib_hour: 0.0036, source: "..."}`: the price of host RAM and where it comes from;
    `local_nvme` also needs `read_gbps`, the drives' read bandwidth (a hit is read from them)."""
    if value is None:
        return None
    keys = {"usd_per_gib_hour", "source"} | ({"read_gbps"} if key == "local_nvme" else set())
    if not isinstance(value, dict) or set(value) != keys:
        raise SpecError(f"{key} must be a mapping of {', '.join(sorted(keys))}")
    numbers = {k: value[k] for k in keys - {"source"}}
    for name, number in numbers.items():
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise SpecError(f"{key}.{name} must be a number, got {number!r}")
    read = numbers.get("read_gbps")
    return HostMemoryPrice(
        float(numbers["usd_per_gib_hour"]), str(value["source"]), float(read) if read is not None else None
    )


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise SpecError(f"{what} must be a whole number, got {value!r}")
    return int(value)


def _quantile(key: object) -> float:
    """`p50` -> 0.5, `p99.9` -> 0.999, `max` / `p100` -> 1.0."""
    text = str(key).strip().lower()
    if text == "max":
        return 1.0
    try:
        q = float(text[1:]) / 100 if text.startswith("p") else math.nan
    except ValueError:
        q = math.nan
    if not 0 < q <= 1:
        raise SpecError(f"percentile {key!r} is not p1..p100 or max")
    return q


def _percentiles(value: object, what: str) -> tuple[tuple[float, int], ...]:
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{what} must be percentiles of token counts, e.g. {{p50: 1000, p95: 4000}}")
    out = tuple(sorted((_quantile(k), _int(v, f"{what}.{k}")) for k, v in value.items()))
    tokens = [t for _q, t in out]
    if any(t < 1 for t in tokens) or tokens != sorted(tokens):
        raise SpecError(f"{what}: token counts must be >= 1 and grow with the percentile")
    return out


def _context(entry: dict[str, Any]) -> tuple[int, str]:
    if "context_tokens" in entry and "context" in entry:
        raise SpecError("give context_tokens or context (percentiles), not both")
    if "context_tokens" in entry:
        return _int(entry["context_tokens"], "context_tokens"), "context_tokens"
    percentiles = entry.get("context")
    if not isinstance(percentiles, dict) or not percentiles:
        raise SpecError("no context: give context_tokens, or context as percentiles ({p50: ..., p95: ...})")
    values = {str(k): _int(v, f"context.{k}") for k, v in percentiles.items()}
    wanted = entry.get("plan_for")
    if wanted is None:
        key = max(values, key=lambda k: values[k])
    elif str(wanted) in values:
        key = str(wanted)
    else:
        raise SpecError(f"plan_for {wanted!r} is not one of the context percentiles {', '.join(values)}")
    return values[key], f"{key} of the context distribution"


def profile_from(entry: dict[str, Any], defaults: dict[str, Any]) -> WorkloadProfile:
    """One workload entry (defaults applied) as a validated WorkloadProfile; SpecError otherwise."""
    unknown = set(entry) - _WORKLOAD_KEYS
    if unknown:
        raise SpecError(f"unknown key(s) {', '.join(sorted(unknown))}")
    merged = {**defaults, **entry}
    models = merged.get("models", [merged["model"]] if "model" in merged else [])
    if isinstance(models, str):
        models = [models]
    context, source = _context(merged)
    optional_ints = {
        k: _int(merged[k], k) for k in ("max_model_len", "max_gpus_per_replica", "output_tokens") if merged.get(k)
    }
    targets = {k: _number(merged[k], k) for k in ("tpot_ms_target", "ttft_ms_target") if merged.get(k) is not None}
    profile = WorkloadProfile(
        name=str(merged.get("name") or ""),
        models=tuple(str(m) for m in models),
        target_concurrency=_int(merged.get("target_concurrency"), "target_concurrency"),
        context_tokens=context,
        max_model_len=optional_ints.get("max_model_len"),
        dtype_policy=_policy(merged.get("dtype_policy")),
        headroom=float(merged.get("headroom", 0.9)),
        engine=str(merged.get("engine") or "vllm"),
        engine_version=str(merged["engine_version"]) if merged.get("engine_version") else None,
        gpus=tuple(str(g) for g in merged.get("gpus") or ()),
        max_gpus_per_replica=optional_ints.get("max_gpus_per_replica"),
        tp_sizes=tuple(_int(t, "tp_sizes") for t in merged.get("tp_sizes") or (1, 2, 4, 8)),
        pp_sizes=tuple(_int(p, "pp_sizes") for p in merged.get("pp_sizes") or (1, 2, 4)),
        gpu_memory_utilization=float(merged["gpu_memory_utilization"])
        if merged.get("gpu_memory_utilization")
        else None,
        context_source=source,
        description=str(merged.get("description") or ""),
        tpot_ms_target=targets.get("tpot_ms_target"),
        ttft_ms_target=targets.get("ttft_ms_target"),
        output_tokens=optional_ints.get("output_tokens"),
        request_rate_per_s=_rate(merged["request_rate"]) if merged.get("request_rate") is not None else None,
        context_percentiles=_percentiles(merged["context"], "context") if "context" in merged else (),
        input_percentiles=_percentiles(merged["input"], "input") if "input" in merged else (),
        output_percentiles=_percentiles(merged["output"], "output") if "output" in merged else (),
        prefix_caching=_prefix_caching(merged),
        speculative=_speculative(merged.get("speculative")),
        acceptance_rate=_number(merged["acceptance_rate"], "acceptance_rate")
        if merged.get("acceptance_rate") is not None
        else None,
        adapters=AdapterSet.parse(merged["adapters"]) if merged.get("adapters") is not None else None,
    )
    profile.validate()
    if profile.request_rate_per_s is not None:
        workload_buckets(profile)  # lengths that cannot be served are this entry's error
    return profile


def parse_workloads(document: object, path: Path | None = None) -> WorkloadsFile:
    """A parsed YAML document -> profiles, procurement settings and per-entry errors."""
    errors: list[tuple[str, str]] = []
    if not isinstance(document, dict):
        return WorkloadsFile(path, (), ProcurementSettings(), (("<file>", "not a mapping with a `workloads` list"),))
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - _DEFAULT_KEYS:
        bad = sorted(set(defaults) - _DEFAULT_KEYS) if isinstance(defaults, dict) else ["(not a mapping)"]
        errors.append(("<defaults>", f"unknown or per-workload key(s) in defaults: {', '.join(bad)}"))
        defaults = {}
    procurement = ProcurementSettings()
    raw_procurement = document.get("procurement") or {}
    if not isinstance(raw_procurement, dict) or set(raw_procurement) - _PROCUREMENT_KEYS:
        errors.append(("<procurement>", f"procurement must be a mapping of {', '.join(sorted(_PROCUREMENT_KEYS))}"))
    else:
        try:
            procurement = ProcurementSettings(
                whole_nodes=bool(raw_procurement.get("whole_nodes", True)),
                gpu_limits={
                    str(k): _int(v, f"gpu_limits.{k}") for k, v in (raw_procurement.get("gpu_limits") or {}).items()
                },
                gpus=tuple(str(g) for g in raw_procurement.get("gpus") or ()),
                method=str(raw_procurement.get("method") or "auto"),
                allow_estimated_prices=_flag(raw_procurement.get("allow_estimated_prices", False)),
                host_memory=_host_memory(raw_procurement.get("host_memory")),
                local_nvme=_host_memory(raw_procurement.get("local_nvme"), "local_nvme"),
            )
        except SpecError as exc:
            errors.append(("<procurement>", str(exc)))
    entries = document.get("workloads")
    if not isinstance(entries, list):
        errors.append(("<file>", "no `workloads` list"))
        entries = []
    profiles: list[WorkloadProfile] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        label = str(entry.get("name")) if isinstance(entry, dict) and entry.get("name") else f"workloads[{i}]"
        if not isinstance(entry, dict):
            errors.append((label, "not a mapping"))
            continue
        try:
            profile = profile_from(entry, defaults)
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            errors.append((label, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
            continue
        if profile.name in seen:
            errors.append((label, f"workload {profile.name!r} defined twice"))
            continue
        seen.add(profile.name)
        profiles.append(profile)
    return WorkloadsFile(path, tuple(profiles), procurement, tuple(errors))


def load_workloads(path: str | Path | None = None) -> WorkloadsFile:
    """Read the workloads file (a missing or unreadable file is one error, not an exception)."""
    target = workloads_path(path)
    try:
        document = yaml.safe_load(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return WorkloadsFile(target, (), ProcurementSettings(), (("<file>", f"no workloads file at {target}"),))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return WorkloadsFile(target, (), ProcurementSettings(), (("<file>", f"cannot read {target}: {first}"),))
    return parse_workloads(document, target)
