"""Out-of-sample accuracy of vLLM overhead models: leave-one-source-out cross-validation on the
public startup logs (evaluation/data/vllm_public_measurements.yaml).

Each row is predicted once with capplan (`measurements.compare`), which fixes everything but the
overhead: usable memory, weights, the pool layout. An overhead model is then a function of a few
coefficients over per-row features (the named buffers of `capacity.engines.vllm.overhead`, or the
previous model's two activation features), so refitting for a fold is arithmetic:

    KV pool(c)   = usable - weights - overhead(c)             (bytes per GPU, as vLLM computes it)
    KV tokens(c) = tokens printed at the row's own fit x KV pool(c) / KV pool(own fit)

(tokens scale with whole blocks; the ratio is exact to a block). A fold holds out every row of one
source (a thread, a repository, a campaign: `source_group`), fits the coefficients on the rest by
coordinate search, and scores the held-out rows. Rows are never scored by a fit that saw their source.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from capacity import engine_constants as ec
from capacity.dtypes import GIB
from capacity.engines import Engine
from capacity.engines.vllm.overhead import ProfilingBuffers, inputs_buffers, overhead_from_buffers
from capacity.overhead import OverheadInputs, activation_features
from capacity.spec import GpuSku, ModelSpec
from evaluation.measurements import Comparison
from models_registry.sources.gpu_catalog import find_gpu_sku

FIT_POOL_FLOOR_BYTES = 8 * GIB
ERAS = ("v1-late", "v1", "v1-mid", "v1-early", "v0")
# an era with no training row in a fold takes the coefficients of its nearest neighbour that has some
ERA_FALLBACK = {
    "v1-late": ("v1", "v1-mid", "v1-early", "v0"),
    "v1": ("v1-late", "v1-mid", "v1-early", "v0"),
    "v1-mid": ("v1", "v1-early", "v1-late", "v0"),
    "v1-early": ("v1-mid", "v1", "v1-late", "v0"),
    "v0": ("v1-early", "v1-mid", "v1", "v1-late"),
}


def _stated_bool(value: object) -> bool | None:
    """A yes/no setting a log states (`flashinfer_sampler: true`), None when the row says nothing."""
    return value if isinstance(value, bool) else None


def source_group(source: str, row_id: str) -> str:
    """The thread, repository or campaign a row comes from: `owner/repo#N` for an issue or PR,
    `owner/repo` for repository files, the host for web pages, else the row itself."""
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", source)
    if m:
        return f"{m.group(1)}#{m.group(2)}"
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/", source)
    if m:
        return m.group(1)
    m = re.match(r"https?://(?:www\.)?([^/]+)/", source)
    if m:
        return m.group(1)
    return row_id


@dataclass(frozen=True, slots=True)
class Row:
    """What the fit needs of one predicted measurement."""

    id: str
    group: str
    era: str
    features: dict[str, Any]
    usable_minus_weights: int  # usable x util - weights, bytes per GPU (as predicted)
    own_budget: int  # the KV pool at the shipped coefficients
    own_tokens: int
    kv_bytes: int | None  # measured
    kv_tokens: int | None
    activation_bytes: int | None
    non_torch_bytes: int | None
    tags: tuple[str, ...]
    unmodelled: str | None = None  # what the log's deployment does that no overhead model sizes: scored, not fitted
    # the log's "peak activation" is 0.28+'s breakdown ("... for consumed memory (weights + non-torch), Y GiB
    # for peak activation"): gpu_worker's peak_activation_memory = transient_peak_headroom + the CUDA-graph
    # estimate it deducts (read in the 0.28.0, 0.29.0, 0.31.0 and 0.33.0 wheels; 0.26.0 printed torch_peak_increase)
    activation_with_graphs: bool = False

    def pool_error(self, overhead: int) -> float | None:
        if not self.kv_bytes:
            return None
        return (self.usable_minus_weights - overhead - self.kv_bytes) / abs(self.kv_bytes)

    def tokens_error(self, overhead: int) -> float | None:
        if not self.kv_tokens or self.own_budget <= 0:
            return None
        budget = self.usable_minus_weights - overhead
        predicted = self.own_tokens * max(budget, 0) / self.own_budget
        return (predicted - self.kv_tokens) / self.kv_tokens


Params = dict[str, float]


@dataclass(frozen=True)
class OverheadModel:
    """An overhead model as CV sees it: per-row features, coefficients, and which of them a fit moves."""

    name: str
    # (the row's overhead inputs, its release, its exact version) -> features
    features: Callable[[OverheadInputs, ec.VllmRelease, str], dict[str, Any]]
    # (params of the row's era, features) -> (activation, non-torch, total) bytes
    predict: Callable[[Params, dict[str, Any]], tuple[int, int, int]]
    shipped: Callable[[str], Params]  # the coefficients in engine_constants, per era
    # where a fit starts and what an era keeps when its rows say nothing: the values the engine's source
    # alone suggests, never the shipped fit (which saw every row and would leak into the held-out fold)
    prior: Callable[[str], Params]
    grids: dict[str, Sequence[float]]  # searched values per coefficient
    shared: frozenset[str] = field(default_factory=frozenset)  # one value for every V1 era
    fixed: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (era, coefficient) read off the source


def _derived_features(i: OverheadInputs, r: ec.VllmRelease, version: str) -> dict[str, Any]:
    """The named buffers, the sampler's by the rule of the row's own release (not a fitted coefficient),
    a multimodal model's encoder pass included (`inputs_buffers`, the estimate's own)."""
    return {"buffers": inputs_buffers(i, version), "graphs": r.cudagraph_memory_in_budget}


def _derived_predict(p: Params, f: dict[str, Any]) -> tuple[int, int, int]:
    buffers: ProfilingBuffers = f["buffers"]
    c = ec.VllmProfilingCoefficients(
        forward_scale=p["forward_scale"],
        non_torch_bytes=int(p["non_torch_gib"] * GIB),
        non_torch_tp_bytes=int(p["non_torch_tp_gib"] * GIB),
        cg_base_bytes=int(p["cg_base_gib"] * GIB),
        cg_per_graph_bytes=int(p["cg_per_graph_gib"] * GIB),
        cg_per_graph_tp_custom_ar_bytes=int(p["cg_per_graph_tp_custom_ar_gib"] * GIB),
        cg_per_graph_tp_nccl_bytes=int(p["cg_per_graph_tp_nccl_gib"] * GIB),
        moe_workspace_persistent=bool(p["moe_workspace_persistent"]),
        source="cv",
    )
    o = overhead_from_buffers(buffers, c, f["graphs"])
    return o.activation_peak_bytes, o.non_torch_bytes, o.total_bytes


def _derived_shipped(era: str) -> Params:
    c = ec.VLLM_PROFILING_COEFFICIENTS[era]
    return {
        "forward_scale": c.forward_scale,
        "non_torch_gib": c.non_torch_bytes / GIB,
        "non_torch_tp_gib": c.non_torch_tp_bytes / GIB,
        "cg_base_gib": c.cg_base_bytes / GIB,
        "cg_per_graph_gib": c.cg_per_graph_bytes / GIB,
        "cg_per_graph_tp_custom_ar_gib": c.cg_per_graph_tp_custom_ar_bytes / GIB,
        "cg_per_graph_tp_nccl_gib": c.cg_per_graph_tp_nccl_bytes / GIB,
        "moe_workspace_persistent": float(c.moe_workspace_persistent),
    }


def _derived_prior(era: str) -> Params:
    """The named buffers as they are (scale 1), a quarter GiB of CUDA context and 1 GiB more with NCCL
    (the sampler is a rule read off each release, ec.VLLM_SAMPLER_RULES, not a coefficient)."""
    c = ec.VLLM_PROFILING_COEFFICIENTS[era]
    return {
        **_derived_shipped(era),
        "forward_scale": 1.0,
        "non_torch_gib": 0.25,
        "non_torch_tp_gib": 1.0,
        "moe_workspace_persistent": float(c.moe_workspace_persistent),
    }


def _previous_features(i: OverheadInputs, r: ec.VllmRelease, version: str) -> dict[str, Any]:
    """The previous model as it was: one TP > 1 non-torch term whatever the interconnect."""
    mlp, logits = activation_features(i.model, i.tp, *i.profiled_batch(), i.act_bytes)
    from capacity.parallel import pp_partition

    return {
        "mlp": mlp,
        "logits": logits,
        "tp": i.tp,
        "graphs": r.cudagraph_memory_in_budget,
        "layers": max(pp_partition(i.model.num_layers, i.pp)),
    }


def _previous_predict(p: Params, f: dict[str, Any]) -> tuple[int, int, int]:
    activation = int(max(p["a_mlp"] * f["mlp"], p["a_logits"] * f["logits"]))
    non_torch = int((p["nt_tp_gib"] if f["tp"] > 1 else p["nt_base_gib"]) * GIB)
    graphs = int((p["cg_base_gib"] + p["cg_per_layer_gib"] * f["layers"]) * GIB) if f["graphs"] else 0
    return activation, non_torch, activation + non_torch + graphs


def _previous_shipped(era: str) -> Params:
    c = ec.VLLM_OVERHEAD_PROFILES[era]
    return {
        "a_mlp": c.a_mlp,
        "a_logits": c.a_logits,
        "nt_base_gib": c.nt_base_bytes / GIB,
        "nt_tp_gib": c.nt_tp_bytes / GIB,
        "cg_base_gib": c.cg_base_bytes / GIB,
        "cg_per_layer_gib": c.cg_per_layer_bytes / GIB,
    }


def _previous_prior(era: str) -> Params:
    """One F_mlp-sized tensor, the fp32 logits plus a sort's values and indices (4), as above."""
    return {
        **_previous_shipped(era),
        "a_mlp": 1.0,
        "a_logits": 0.0 if era == "v0" else 4.0,
        "nt_base_gib": 0.25,
        "nt_tp_gib": 1.0,
    }


def _steps(lo: float, hi: float, step: float) -> tuple[float, ...]:
    n = round((hi - lo) / step)
    return tuple(round(lo + i * step, 4) for i in range(n + 1))


NT_GRID = _steps(0.0, 4.0, 0.01)
DERIVED = OverheadModel(
    "derived (named buffers)",
    _derived_features,
    _derived_predict,
    _derived_shipped,
    _derived_prior,
    {"forward_scale": _steps(0.5, 3.0, 0.05), "non_torch_gib": NT_GRID, "non_torch_tp_gib": NT_GRID},
    frozenset({"forward_scale"}),
    # no 0.28+ row runs TP > 1 on an NVLink switch: that term is v1's (engine_constants), not a fit of nothing
    frozenset({("v1-late", "non_torch_tp_gib")}),
)
PREVIOUS = OverheadModel(
    "previous (a_mlp x F_mlp, a_logits x F_logits)",
    _previous_features,
    _previous_predict,
    _previous_shipped,
    _previous_prior,
    {
        "a_mlp": _steps(0.5, 4.0, 0.05),
        "a_logits": _steps(0.0, 12.0, 0.05),
        "nt_base_gib": NT_GRID,
        "nt_tp_gib": NT_GRID,
    },
    frozenset({"a_mlp"}),
    frozenset({("v0", "a_logits")}),
)


def row_tags(c: Comparison, model: ModelSpec) -> tuple[str, ...]:
    """The features a row is reported under."""
    r, p = c.row, c.predicted
    tags = ["all", "V0" if r.engine_generation == "v0" else "V1"]
    if r.vllm_version:
        tags.append("stated version")
    if model.num_experts:
        tags.append("MoE")
    if model.is_mla:
        tags.append("MLA")
    kinds = {layer.kind.value for layer in model.layers}
    if kinds & {"sliding", "chunked"}:
        tags.append("sliding")
    if "state" in kinds:
        tags.append("hybrid")
    if r.tp > 1:
        tags.append("TP > 1")
    if r.pp > 1:
        tags.append("PP > 1")
    if model.quantization is not None or (r.quantization or "") not in ("", "none"):
        tags.append("quantized")
    if (r.kv_cache_dtype or "").startswith("fp8"):
        tags.append("fp8 KV")
    if p is not None and p.gpu_memory_bytes < 40 * GIB:
        tags.append("GPU < 40 GiB")
    return tuple(tags)


def _with_modelled_tags(tags: tuple[str, ...], unmodelled: str | None) -> tuple[str, ...]:
    """`tags` plus whether the overhead models size the row, and "V1 modelled": the V1 rows capplan
    claims to size (the headline set; a flagged row is reported apart, as `capplan estimate` flags it)."""
    if unmodelled:
        return (*tags, "not modelled")
    return (*tags, "modelled", *(("V1 modelled",) if "V1" in tags else ()))


def unmodelled_reason(c: Comparison, model: ModelSpec) -> str | None:
    """Why a row's non-KV memory holds something the overhead models do not size (the row is still
    scored, never fitted on): a KV connector (LMCache and the like allocate on the GPU), the
    multimodal encoder's profiling pass (vision towers are profiled with their own dummy inputs), or a
    ROCm build (HIP graphs and ROCm's memory accounting: the public MI300X logs give the pool GiBs beyond
    the requested budget, and their graph estimates are several times CUDA's; the coefficients are CUDA's)."""
    text = f"{c.row.raw.get('log_excerpt') or ''}"
    if "kv-transfer-config" in text or "kv_connector" in text:
        return "KV connector"
    if c.predicted is not None and (gpu := find_sku(c.predicted.gpu)) is not None and gpu.amd:
        return "ROCm build"
    vision = "ConditionalGeneration" in model.architecture or any("vision" in note for note in model.notes)
    if vision and c.row.engine_generation == "v0":  # V0 profiles the encoder at max_model_len
        return "multimodal encoder profiling"
    if model.vision is not None:
        # V1's encoder pass is sized from vLLM's source (engines/vllm/multimodal.py), never fitted: a row
        # whose activation peak is the encoder's would pull the text models' coefficients
        return "multimodal encoder profiling (sized from the source, not fitted)"
    return None


def find_sku(gpu_id: str) -> GpuSku | None:
    """The catalog SKU of an estimate's GPU (None for hardware sized by its memory alone)."""
    try:
        return find_gpu_sku(gpu_id)
    except LookupError:
        return None


def build_rows(
    comparisons: Iterable[Comparison],
    resolve_model: Callable[[str], tuple[ModelSpec, int | None]],
    model: OverheadModel,
) -> list[Row]:
    """Rows with a measured KV pool, tokens, activation or non-torch figure, featurized for `model`."""
    rows: list[Row] = []
    for c in comparisons:
        est, r = c.predicted, c.row
        if est is None or est.engine != Engine.VLLM:  # calibrated: vLLM only (the study fits its coefficients)
            continue
        if (
            r.kv_cache_memory_gib is None
            and r.kv_cache_tokens is None
            and r.activation_peak_gib is None
            and r.non_torch_gib is None
        ):
            continue
        spec, _ = resolve_model(r.config_repo)
        release = ec.vllm_release(est.engine_version)
        act_bytes = 4 if est.weight_dtype == "float32" else 2
        gpu = find_sku(est.gpu)
        inputs = OverheadInputs(
            spec,
            est.tp,
            est.pp,
            est.pool.max_num_batched_tokens,
            est.max_num_seqs,
            act_bytes,
            nvlink_multicast=gpu.nvlink_multicast if gpu is not None else True,
            peer_link_gpus=gpu.peer_link_gpus if gpu is not None else None,
            flashinfer_sampler=_stated_bool(r.raw.get("flashinfer_sampler")),
            max_model_len=est.max_model_len,
        )
        feats = model.features(inputs, release, est.engine_version or release.version)
        if r.enforce_eager:  # no graphs captured: no estimate deducted
            feats["graphs"] = False
        unmodelled = unmodelled_reason(c, spec)
        rows.append(
            Row(
                id=r.id,
                group=source_group(str(r.raw.get("source") or ""), r.id),
                era=release.overhead_profile,
                features=feats,
                usable_minus_weights=est.usable_bytes_per_gpu - est.weights_bytes_per_gpu,
                own_budget=est.kv_budget_bytes_per_gpu,
                own_tokens=est.kv_cache_tokens,
                kv_bytes=round(r.kv_cache_memory_gib * GIB) if r.kv_cache_memory_gib is not None else None,
                kv_tokens=r.kv_cache_tokens if est.kv_cache_tokens else None,
                activation_bytes=round(r.activation_peak_gib * GIB) if r.activation_peak_gib is not None else None,
                non_torch_bytes=round(r.non_torch_gib * GIB) if r.non_torch_gib is not None else None,
                tags=_with_modelled_tags(row_tags(c, spec), unmodelled),
                unmodelled=unmodelled,
                activation_with_graphs="for consumed memory" in str(r.raw.get("log_excerpt") or ""),
            )
        )
    return rows


def _row_loss(row: Row, params: Params, model: OverheadModel) -> float:
    """Absolute KV-pool error, plus the activation and non-torch misses where the log prints them (each
    a share of the row's pool, floored, or of the memory beyond the weights: all in the pool's units)."""
    activation, non_torch, total = model.predict(params, row.features)
    if row.activation_with_graphs:  # compare like with like: the printed figure holds the graph estimate
        activation = total - non_torch
    scale = max(abs(row.kv_bytes), FIT_POOL_FLOOR_BYTES) if row.kv_bytes else max(row.usable_minus_weights, GIB)
    loss = 0.0
    if row.kv_bytes:  # pool miss relative to the pool, floored so that a near-empty pool does not rule the fit
        loss += abs(row.usable_minus_weights - total - row.kv_bytes) / max(abs(row.kv_bytes), FIT_POOL_FLOOR_BYTES)
    if row.activation_bytes is not None:
        loss += abs(activation - row.activation_bytes) / scale
    if row.non_torch_bytes is not None:
        loss += abs(non_torch - row.non_torch_bytes) / scale
    return loss


def fit(rows: Sequence[Row], model: OverheadModel, sweeps: int = 3) -> dict[str, Params]:
    """Coefficients per era by coordinate search from the prior (shared ones across V1 eras).
    Eras without rows inherit from their nearest neighbour that has some."""
    params = {era: dict(model.prior(era)) for era in ERAS}
    by_era = {era: [r for r in rows if r.era == era and r.unmodelled is None] for era in ERAS}
    v1_eras = [e for e in ERAS if e != "v0"]
    for _ in range(sweeps):
        for name, grid in model.grids.items():
            groups = [v1_eras, ["v0"]] if name in model.shared else [[e] for e in ERAS]
            for eras in groups:
                eras = [e for e in eras if (e, name) not in model.fixed]
                members = [r for e in eras for r in by_era[e]]
                if not members:
                    continue
                best_value, best_loss = params[eras[0]][name], float("inf")
                for value in grid:
                    loss = sum(_row_loss(r, {**params[r.era], name: value}, model) for r in members)
                    if loss < best_loss - 1e-12:
                        best_value, best_loss = value, loss
                for e in eras:
                    params[e][name] = best_value
    for era in ERAS:
        if not by_era[era]:
            donor = next((d for d in ERA_FALLBACK[era] if by_era[d]), None)
            if donor is not None:
                params[era] = {
                    **params[donor],
                    **{k: v for k, v in params[era].items() if k.startswith("cg_")},
                    **(
                        {"moe_workspace_persistent": params[era]["moe_workspace_persistent"]}
                        if "moe_workspace_persistent" in params[era]
                        else {}
                    ),
                }
    return params


@dataclass(frozen=True, slots=True)
class Scores:
    """Signed errors per row under one set of coefficients (None where the row lacks the figure)."""

    pool: dict[str, float | None]
    tokens: dict[str, float | None]


def score(rows: Sequence[Row], params_for: Callable[[Row], Params], model: OverheadModel) -> Scores:
    pool: dict[str, float | None] = {}
    tokens: dict[str, float | None] = {}
    for r in rows:
        total = model.predict(params_for(r), r.features)[2]
        pool[r.id], tokens[r.id] = r.pool_error(total), r.tokens_error(total)
    return Scores(pool, tokens)


def shipped_scores(rows: Sequence[Row], model: OverheadModel) -> Scores:
    """The coefficients in engine_constants (fitted on every row: in-sample)."""
    return score(rows, lambda r: model.shipped(r.era), model)


def in_sample_scores(rows: Sequence[Row], model: OverheadModel) -> Scores:
    """Refit on every row, scored on the same rows."""
    params = fit(rows, model)
    return score(rows, lambda r: params[r.era], model)


def cross_validated_scores(rows: Sequence[Row], model: OverheadModel) -> Scores:
    """Leave one source out: each group's rows scored by a fit on the other groups."""
    pool: dict[str, float | None] = {}
    tokens: dict[str, float | None] = {}
    for group in sorted({r.group for r in rows}):
        held = [r for r in rows if r.group == group]
        params = fit([r for r in rows if r.group != group], model)
        s = score(held, lambda r, params=params: params[r.era], model)  # type: ignore[misc]
        pool.update(s.pool)
        tokens.update(s.tokens)
    return Scores(pool, tokens)


@dataclass(frozen=True, slots=True)
class Accuracy:
    n: int
    median_abs_error: float
    within_1pct: float
    within_5pct: float
    median_signed_error: float


def accuracy(errors: Iterable[float | None]) -> Accuracy:
    values = [e for e in errors if e is not None]
    if not values:
        nan = float("nan")
        return Accuracy(0, nan, nan, nan, nan)
    absolute = [abs(e) for e in values]
    return Accuracy(
        len(values),
        statistics.median(absolute),
        sum(a <= 0.01 for a in absolute) / len(values),
        sum(a <= 0.05 for a in absolute) / len(values),
        statistics.median(values),
    )


def by_tag(rows: Sequence[Row], errors: dict[str, float | None]) -> dict[str, Accuracy]:
    tags: list[str] = []
    for r in rows:
        tags.extend(t for t in r.tags if t not in tags)
    return {t: accuracy(errors.get(r.id) for r in rows if t in r.tags) for t in tags}


def fitted_coefficients(rows: Sequence[Row], model: OverheadModel) -> dict[str, Params]:
    """The refit on every row (what `--fit` prints for engine_constants)."""
    return fit(rows, model)


def derived_with(params: Params, era: str) -> ec.VllmProfilingCoefficients:
    """A coefficient row from fitted values (for printing)."""
    base = ec.VLLM_PROFILING_COEFFICIENTS[era]
    return replace(
        base,
        forward_scale=params["forward_scale"],
        non_torch_bytes=int(params["non_torch_gib"] * GIB),
        non_torch_tp_bytes=int(params["non_torch_tp_gib"] * GIB),
    )
