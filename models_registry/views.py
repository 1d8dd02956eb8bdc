"""Read-side of the registry for `capplan registry list/show`: plain rows, no formatting."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from capacity.dtypes import element_bytes
from capacity.kv.kinds import PER_TOKEN_KINDS
from capacity.spec import ModelSpec, SpecError
from models_registry import orm
from models_registry.resolve import ResolvedModel, registry_row
from models_registry.sources.gpu_catalog import GpuRecord

SSM_STATE_BYTES = 4  # recurrent state in float32 unless the config says otherwise


@dataclass(frozen=True, slots=True)
class LayerGroup:
    kind: str
    window_tokens: int | None
    count: int

    def label(self) -> str:
        window = f" w={self.window_tokens:,}" if self.window_tokens else ""
        return f"{self.kind}{window} x{self.count}"


@dataclass(frozen=True, slots=True)
class Revision:
    revision: str | None
    config_sha256: str
    source: str
    created_at: dt.datetime | None
    is_current: bool


@dataclass(frozen=True, slots=True)
class ModelView:
    repo_id: str
    revision: str | None
    config_sha256: str
    source: str
    family: str
    model_type: str
    architecture: str
    is_generic: bool
    fields: dict[str, object]
    layer_groups: tuple[LayerGroup, ...]
    kv_bytes_per_token: int
    state_bytes_per_sequence: int
    total_params: int
    active_params: int
    embedding_params: int
    checkpoint_bytes: int | None
    published_parameters: int | None
    history: tuple[Revision, ...] | None = None  # None: not in the registry
    notes: tuple[str, ...] = field(default_factory=tuple)
    source_url: str | None = None


def _dtype_bytes(dtype: str) -> int:
    try:
        return element_bytes(dtype)
    except SpecError:
        return 2


def group_layers(layers: Iterable[tuple[str, int | None]]) -> tuple[LayerGroup, ...]:
    """(kind, window) counts in order of first appearance."""
    counts: dict[tuple[str, int | None], int] = {}
    for kind, window in layers:
        counts[(kind, window)] = counts.get((kind, window), 0) + 1
    return tuple(LayerGroup(kind, window, count) for (kind, window), count in counts.items())


def _kv_elements(kind: str, heads: int, k: int, v: int) -> int:
    return heads * (k + v) if kind in PER_TOKEN_KINDS else 0


# What a model's view takes, by name, from what names its revision and from what gives its shape
_REVISION_FIELDS = ("repo_id", "revision", "config_sha256", "source", "checkpoint_bytes")
_SHAPE_FIELDS = ("family", "model_type", "architecture", "is_generic", "total_params", "active_params", "embedding_params")


def _view(ids: orm.Model | ResolvedModel, spec: orm.Model | ModelSpec, **derived: Any) -> ModelView:
    """A model's view from what a registry row and a resolved model both say: `ids` names the
    revision, `spec` the shape (a registry row is both); `derived` the fields each works out its own way."""
    named = {name: getattr(ids, name) for name in _REVISION_FIELDS} | {name: getattr(spec, name) for name in _SHAPE_FIELDS}
    return ModelView(fields=_fields(spec), **named, **derived)


def view_from_row(session: Session, row: orm.Model) -> ModelView:
    dtype_bytes = _dtype_bytes(row.torch_dtype)
    layers = row.layers
    kv = sum(_kv_elements(x.kv_kind, x.num_kv_heads, x.k_head_dim, x.v_head_dim) for x in layers) * dtype_bytes
    state = sum(x.conv_state_elements * dtype_bytes + x.recurrent_state_elements * SSM_STATE_BYTES for x in layers)
    history = session.scalars(select(orm.Model).where(orm.Model.repo_id == row.repo_id).order_by(orm.Model.id)).all()
    return _view(
        row,
        row,
        layer_groups=group_layers((x.kv_kind, x.window_tokens) for x in layers),
        kv_bytes_per_token=kv,
        state_bytes_per_sequence=state,
        published_parameters=row.published_parameters,
        history=tuple(Revision(h.revision, h.config_sha256, h.source, h.created_at, h.is_current) for h in history),
        notes=(row.notes,) if row.notes else (),
        source_url=row.source_url,
    )


def _fields(source: object) -> dict[str, object]:
    names = (
        "hidden_size",
        "num_layers",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "vocab_size",
        "intermediate_size",
        "max_position_embeddings",
        "context_limit_tokens",
        "torch_dtype",
        "tie_word_embeddings",
        "num_experts",
        "num_experts_per_token",
    )
    values: dict[str, object] = {name: getattr(source, name) for name in names}
    if isinstance(source, orm.Model):
        values["quantization"] = f"{source.quant_method} ({source.quant_format})" if source.quant_method else None
    else:
        quant = getattr(source, "quantization", None)
        values["quantization"] = f"{quant.method} ({quant.weight_format})" if quant else None
    return values


def view_from_resolved(resolved: ResolvedModel) -> ModelView:
    spec = resolved.spec
    dtype_bytes = _dtype_bytes(spec.torch_dtype)
    ssm_bytes = _dtype_bytes(spec.mamba_ssm_cache_dtype)
    return _view(
        resolved,
        spec,
        layer_groups=group_layers((str(x.kind), x.cache.window) for x in spec.layers),
        kv_bytes_per_token=sum(x.cache.kv_elements_per_token for x in spec.layers) * dtype_bytes,
        state_bytes_per_sequence=sum(x.cache.state_bytes(dtype_bytes, ssm_bytes) for x in spec.layers),
        published_parameters=None,
        history=None,
        notes=spec.notes,
    )


def find_view(session: Session, ref: str) -> ModelView | None:
    row = registry_row(session, ref)
    return view_from_row(session, row) if row is not None else None


@dataclass(frozen=True, slots=True)
class ModelListRow:
    repo_id: str
    family: str
    model_type: str
    total_params: int
    context_limit_tokens: int
    torch_dtype: str
    layer_groups: tuple[LayerGroup, ...]
    revisions: int


def list_models(session: Session) -> list[ModelListRow]:
    revisions: dict[str, int] = dict(
        session.execute(select(orm.Model.repo_id, func.count()).group_by(orm.Model.repo_id)).all()
    )
    rows = session.scalars(
        select(orm.Model)
        .where(orm.Model.is_current.is_(True))
        .options(selectinload(orm.Model.layers))
        .order_by(orm.Model.repo_id)
    ).all()
    return [_model_row(row, revisions.get(row.repo_id, 1)) for row in rows]


def _model_row(row: orm.Model, revisions: int) -> ModelListRow:
    """A model's list row: its layer groups and revision count, the rest named alike in the registry row."""
    alike = {f.name: getattr(row, f.name) for f in fields(ModelListRow) if f.name not in ("layer_groups", "revisions")}
    layer_groups = group_layers((x.kv_kind, x.window_tokens) for x in row.layers)
    return ModelListRow(layer_groups=layer_groups, revisions=revisions, **alike)


@dataclass(frozen=True, slots=True)
class GpuListRow:
    id: str
    name: str
    vendor: str
    memory_total_bytes: int
    memory_bandwidth_gbps: float | None
    bf16_dense_tflops: float | None
    fp8_dense_tflops: float | None
    price_usd_per_gpu_hour: float | None
    price_basis: str | None  # list | contract | estimate (PriceBasis)
    aliases: tuple[str, ...]


def _gpu_row(sku: orm.GpuSku | GpuRecord, gpu_id: str, aliases: Iterable[str]) -> GpuListRow:
    """A GPU's list row from a registry row or a catalog record: its id and aliases, the rest named alike in both."""
    alike = {f.name: getattr(sku, f.name) for f in fields(GpuListRow) if f.name not in ("id", "aliases")}
    return GpuListRow(id=gpu_id, aliases=tuple(sorted(aliases)), **alike)


def list_gpus(session: Session) -> list[GpuListRow]:
    skus = session.scalars(select(orm.GpuSku).options(selectinload(orm.GpuSku.aliases)).order_by(orm.GpuSku.slug)).all()
    return [_gpu_row(s, s.slug, (a.alias for a in s.aliases)) for s in skus]


def gpu_rows_from_catalog(records: Iterable[GpuRecord]) -> list[GpuListRow]:
    return sorted((_gpu_row(r, r.id, set(r.alias_keys().values())) for r in records), key=lambda row: row.id)
