"""Ingest models and GPUs into the registry: idempotent, history-keeping, every failure recorded.

- A model revision is identified by (repo_id, sha256 of config.json). The same config again changes
  nothing; a changed config adds a row and moves `is_current` to it; old rows stay (history).
- A GPU SKU is identified by its catalog id; `content_sha256` over every field decides whether an
  ingest updates it.
- Each item is its own transaction (a SAVEPOINT for its store step, then a commit), so one bad
  item never stops or undoes the rest: whatever it raises (a RecursionError from a deeply nested
  config, a UnicodeEncodeError from a lone surrogate, a driver error...) becomes an
  `ingest_errors` row with its stage and a one-line reason naming it, and the run goes on.
  Items = stored + rejected. The `ingest_runs` row (committed first, status 'running') gets the
  counts and status at the end; an interrupt (Ctrl-C) keeps the items already committed and marks
  the run 'failed'. Short transactions also keep a concurrent nightly from waiting on a long ingest.
- Inserts are dialect upserts (`INSERT ... ON CONFLICT` on SQLite and PostgreSQL alike), so two
  ingests racing on the same item cannot create duplicates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from capacity.spec import ModelSpec
from models_registry import orm
from models_registry.normalize import spec_from_snapshot
from models_registry.sources import bundled, hub, local
from models_registry.sources.common import ConfigSnapshot, ItemError, StageError, excerpt, one_line, storable
from models_registry.sources.gpu_catalog import GpuRecord
from models_registry.sources.user_catalog import default_catalog_dir, gpu_catalog_for

KINDS = ("model", "gpu")


@dataclass
class KindCounts:
    seen: int = 0
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: int = 0

    def count(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)


@dataclass
class IngestReport:
    """What one ingest run saw and did; `errors` hold one line each."""

    run_id: int | None
    source_kind: str
    source: str | None
    models: KindCounts = field(default_factory=KindCounts)
    gpus: KindCounts = field(default_factory=KindCounts)
    errors: list[ItemError] = field(default_factory=list)
    status: str = "running"

    def counts(self, kind: str) -> KindCounts:
        return self.models if kind == "model" else self.gpus

    @property
    def failed(self) -> int:
        return self.models.failed + self.gpus.failed + sum(e.item_kind == "catalog" for e in self.errors)

    @property
    def changed(self) -> int:
        return self.models.added + self.models.updated + self.gpus.added + self.gpus.updated


# --- dialect upserts ---------------------------------------------------------------------------


def _insert(session: Session, table: Any) -> Any:
    """`INSERT` with `ON CONFLICT` support for the session's backend (SQLite or PostgreSQL)."""
    name = session.get_bind().dialect.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    raise RuntimeError(f"unsupported registry backend {name!r}: use SQLite or PostgreSQL")


def _check_lengths(table: Any, values: dict[str, Any], key: str) -> None:
    """PostgreSQL enforces VARCHAR(n), SQLite does not: check here so both behave the same."""
    for name, value in values.items():
        length = getattr(table.c[name].type, "length", None)
        if length and isinstance(value, str) and len(value) > length:
            raise StageError("validate", f"{key}: {name} is longer than {length} characters ({len(value)})")


# --- models ------------------------------------------------------------------------------------


def _model_values(snapshot: ConfigSnapshot, spec: ModelSpec, *, is_current: bool) -> dict[str, Any]:
    quant = spec.quantization
    return {
        "repo_id": snapshot.repo_id,
        "revision": snapshot.revision,
        "config_sha256": snapshot.config_sha256,
        "family": snapshot.family or spec.family,
        "model_type": spec.model_type,
        "architecture": spec.architecture,
        "is_generic": spec.is_generic,
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "intermediate_size": spec.intermediate_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "context_limit_tokens": spec.context_limit_tokens,
        "torch_dtype": spec.torch_dtype,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "quant_method": quant.method if quant else None,
        "quant_format": quant.weight_format if quant else None,
        "total_params": spec.total_params,
        "active_params": spec.active_params,
        "embedding_params": spec.embedding_params,
        "num_experts": spec.num_experts,
        "num_experts_per_token": spec.num_experts_per_token,
        "kv_elements_per_token": sum(layer.cache.kv_elements_per_token for layer in spec.layers),
        "checkpoint_bytes": snapshot.checkpoint_bytes,
        "published_parameters": snapshot.published_parameters,
        "gated": snapshot.gated,
        "source": snapshot.source,
        "source_path": snapshot.source_path,
        "source_url": snapshot.source_url,
        "notes": snapshot.notes,
        "config_json": snapshot.config_bytes.decode("utf-8-sig"),
        "created_at": orm.utcnow(),
        "is_current": is_current,
    }


def _layer_values(model_id: int, spec: ModelSpec) -> list[dict[str, Any]]:
    rows = []
    for layer, params in zip(spec.layers, _padded_params(spec), strict=True):
        rows.append(
            {
                "model_id": model_id,
                "layer_index": layer.index,
                "kv_kind": str(layer.kind),
                **layer.cache.columns(),
                "attention_params": params[0],
                "mlp_params": params[1],
                "expert_params": params[2],
                "router_params": params[3],
                "norm_params": params[4],
                "replicated_attention_params": params[5],
            }
        )
    return rows


def _padded_params(spec: ModelSpec) -> list[tuple[int, int, int, int, int, int]]:
    params = [
        (p.attention, p.mlp, p.experts, p.router + p.fp32_router, p.norms, p.replicated_attention)
        for p in spec.layer_params
    ]
    return (params + [(0, 0, 0, 0, 0, 0)] * len(spec.layers))[: len(spec.layers)]


_METADATA = ("revision", "checkpoint_bytes", "published_parameters", "family", "gated", "source_url", "notes")


def store_model(session: Session, snapshot: ConfigSnapshot, spec: ModelSpec) -> str:
    """Upsert one model revision; returns 'added', 'updated' or 'unchanged' (caller commits)."""
    sha = snapshot.config_sha256
    values = _model_values(snapshot, spec, is_current=True)
    _check_lengths(orm.Model.__table__, values, snapshot.repo_id)
    history = session.scalars(select(orm.Model).where(orm.Model.repo_id == snapshot.repo_id)).all()
    same = next((row for row in history if row.config_sha256 == sha), None)
    current = next((row for row in history if row.is_current), None)
    if same is not None:
        changed = False
        for key in _METADATA:
            new = getattr(snapshot, key)
            if key == "family":
                new = new or spec.family
            if new is not None and new != getattr(same, key):
                setattr(same, key, new)
                changed = True
        if not same.is_current:  # an older config came back: it becomes current again
            if current is not None:
                current.is_current = False
                session.flush()
            same.is_current = True
            changed = True
        session.flush()
        return "updated" if changed else "unchanged"

    if current is not None:
        current.is_current = False
        session.flush()
    # Core statements with bound parameters: cached once per process, no ORM bookkeeping per row.
    statement = (
        _insert(session, orm.Model)
        .on_conflict_do_nothing(index_elements=["repo_id", "config_sha256"])
        .returning(orm.Model.id)
    )
    model_id = session.connection().execute(statement, values).scalar()
    if model_id is None:  # another ingest inserted the same revision since we looked
        return "unchanged"
    layers = _layer_values(model_id, spec)
    if layers:  # a fresh model id: plain executemany INSERT
        session.connection().execute(insert(orm.ModelLayer), layers)
    return "updated" if history else "added"


# --- GPUs --------------------------------------------------------------------------------------


def _gpu_values(record: GpuRecord) -> dict[str, Any]:
    """The gpu_skus row of `record`: each field under its own name, but the id (the slug) and the aliases (rows of
    their own, `gpu_aliases`); with the content hash a later ingest compares."""
    values = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in ("id", "aliases")}
    return {"slug": record.id, **values, "sources": list(record.sources), "content_sha256": record.content_sha256}


def store_gpu(session: Session, record: GpuRecord) -> str:
    """Upsert one SKU and its aliases; returns 'added', 'updated' or 'unchanged' (caller commits)."""
    existing = session.scalar(select(orm.GpuSku).where(orm.GpuSku.slug == record.id))
    content = record.content_sha256
    if existing is not None and existing.content_sha256 == content:
        return "unchanged"
    values = _gpu_values(record)
    _check_lengths(orm.GpuSku.__table__, values, record.id)
    now = orm.utcnow()
    table = orm.GpuSku.__table__
    upsert = _insert(session, table)
    statement = upsert.on_conflict_do_update(
        index_elements=["slug"],
        set_={key: upsert.excluded[key] for key in [*values, "updated_at"]},
        where=table.c.content_sha256 != upsert.excluded.content_sha256,
    ).returning(table.c.id)
    sku_id = session.connection().execute(statement, values | {"created_at": now, "updated_at": now}).scalar()
    if sku_id is None:  # the same content was written since we looked
        return "unchanged"
    session.execute(delete(orm.GpuAlias).where(orm.GpuAlias.gpu_sku_id == sku_id))
    aliases = [
        {"gpu_sku_id": sku_id, "alias": spelling, "normalized_alias": key}
        for key, spelling in record.alias_keys().items()
    ]
    for row in aliases:
        _check_lengths(orm.GpuAlias.__table__, row, record.id)
    taken = session.execute(
        select(orm.GpuAlias.normalized_alias, orm.GpuSku.slug)
        .join(orm.GpuSku)
        .where(orm.GpuAlias.normalized_alias.in_([a["normalized_alias"] for a in aliases]))
    ).all()
    if taken:
        normalized, owner = taken[0]
        raise StageError("store", f"{record.id}: alias {normalized!r} already names {owner} in the registry")
    session.connection().execute(insert(orm.GpuAlias), aliases)
    return "added" if existing is None else "updated"


# --- runs --------------------------------------------------------------------------------------


def _begin_run(session: Session, source_kind: str, source: str | None) -> IngestReport:
    run = orm.IngestRun(source_kind=source_kind, source=source, status="running", started_at=orm.utcnow())
    session.add(run)
    session.commit()
    return IngestReport(run_id=run.id, source_kind=source_kind, source=source)


def _safe_error(error: ItemError) -> ItemError:
    """The error with every text field storable (lone surrogates and NULs escaped, reason one line)."""
    return ItemError(
        item_kind=error.item_kind,
        item_key=storable(error.item_key) or "",
        stage=error.stage,
        reason=one_line(error.reason),
        source_path=storable(error.source_path),
        raw_excerpt=storable(error.raw_excerpt),
    )


def _record_error(session: Session, report: IngestReport, error: ItemError) -> None:
    """Count and store one rejected item, and commit it (the row survives whatever comes next)."""
    error = _safe_error(error)
    report.errors.append(error)
    if error.item_kind in KINDS:
        report.counts(error.item_kind).failed += 1
    session.add(
        orm.IngestError(run_id=report.run_id, **asdict(error))
    )
    session.commit()


def _finish_run(session: Session, report: IngestReport, *, crashed: bool = False) -> None:
    report.status = "failed" if crashed else ("partial" if report.failed else "succeeded")
    values: dict[str, Any] = {"status": report.status, "finished_at": orm.utcnow()}
    for kind, prefix in (("model", "models"), ("gpu", "gpus")):
        counts = report.counts(kind)
        for outcome in ("seen", "added", "unchanged", "updated", "failed"):
            values[f"{prefix}_{outcome}"] = getattr(counts, outcome)
    session.execute(update(orm.IngestRun).where(orm.IngestRun.id == report.run_id).values(values))
    session.commit()


def _store(session: Session, report: IngestReport, kind: str, key: str, path: str | None, work: Any) -> None:
    """Run one item's store step in a SAVEPOINT and commit it; any failure rolls back only that
    item and becomes an ItemError."""
    try:
        with session.begin_nested():
            outcome = work()
        session.commit()
    except StageError as exc:
        session.rollback()
        _record_error(session, report, ItemError(kind, key, exc.stage, str(exc), path))
        return
    except SQLAlchemyError as exc:
        session.rollback()
        reason = one_line(f"{key}: database rejected it: {getattr(exc, 'orig', None) or exc}")
        _record_error(session, report, ItemError(kind, key, "store", reason, path))
        return
    except Exception as exc:  # e.g. UnicodeEncodeError in the driver: this item only
        session.rollback()
        reason = one_line(f"{key}: could not be stored: {type(exc).__name__}: {exc}")
        _record_error(session, report, ItemError(kind, key, "store", reason, path))
        return
    report.counts(kind).count(outcome)


def run_ingest(
    session: Session,
    *,
    source_kind: str,
    source: str | None,
    models: Iterable[ConfigSnapshot] = (),
    gpus: Iterable[GpuRecord] = (),
    errors: Iterable[ItemError] = (),
) -> IngestReport:
    """Ingest already-read items; `errors` are failures the sources met while reading."""
    report = _begin_run(session, source_kind, source)
    try:
        for error in errors:
            if error.item_kind in KINDS:
                report.counts(error.item_kind).seen += 1
            _record_error(session, report, error)
        first_seen: dict[str, str] = {}
        for snapshot in models:
            report.models.seen += 1
            key, path = snapshot.repo_id, snapshot.source_path
            previous = first_seen.get(key)
            if previous is not None and previous != snapshot.config_sha256:
                reason = f"{key}: appears twice in this ingest with different configs"
                _record_error(session, report, ItemError("model", key, "read", reason, path))
                continue
            first_seen[key] = snapshot.config_sha256
            try:
                _config, spec = spec_from_snapshot(snapshot)
            except StageError as exc:
                item = ItemError("model", key, exc.stage, str(exc), path, excerpt(snapshot.config_bytes))
                _record_error(session, report, item)
                continue
            except Exception as exc:  # spec_from_snapshot raises only StageError; belt and braces
                reason = f"{key}: rejected: {type(exc).__name__}: {exc}"
                _record_error(session, report, ItemError("model", key, "config", reason, path))
                continue
            _store(session, report, "model", key, path, lambda s=snapshot, p=spec: store_model(session, s, p))
        for record in gpus:
            report.gpus.seen += 1
            _store(session, report, "gpu", record.id, None, lambda r=record: store_gpu(session, r))
    except BaseException:
        session.rollback()
        _finish_run(session, report, crashed=True)
        raise
    _finish_run(session, report)
    return report


# --- entry points ------------------------------------------------------------------------------


def ingest_catalog(
    session: Session,
    catalog_dir: Path | None = None,
    *,
    models: bool = True,
    gpus: bool = True,
    user_catalog: Path | None = None,
) -> IngestReport:
    """The catalog (`catalog_dir`, else `CAPPLAN_CATALOG_DIR`, else the bundled one): all models, and all
    GPUs with the user catalog (`user_catalog`, else `CAPPLAN_USER_CATALOG`) layered over them."""
    root = catalog_dir or default_catalog_dir()
    snapshots: list[ConfigSnapshot] = []
    records: list[GpuRecord] = []
    errors: list[ItemError] = []
    if models:
        snapshots, errors = bundled.read_catalog(root)
    if gpus:
        records, gpu_errors = gpu_catalog_for(root, user_catalog)
        errors += gpu_errors
    return run_ingest(session, source_kind="catalog", source=str(root), models=snapshots, gpus=records, errors=errors)


def ingest_dir(session: Session, directory: Path) -> IngestReport:
    """Every `**/config.json` under `directory` (NotADirectoryError if it is not one)."""
    snapshots, errors = local.scan_dir(directory)
    return run_ingest(session, source_kind="dir", source=str(directory), models=snapshots, errors=errors)


def ingest_hub(
    session: Session,
    repo_ids: Sequence[str],
    *,
    cache_dir: Path | str | None = None,
    token: str | None = None,
) -> IngestReport:
    """Configs fetched offline-first (`repo` or `repo@revision`); a fetch failure is an ItemError."""
    snapshots: list[ConfigSnapshot] = []
    errors: list[ItemError] = []
    for ref in repo_ids:
        repo_id, _, revision = ref.partition("@")
        try:
            snapshots.append(hub.fetch_config(repo_id, revision or None, cache_dir=cache_dir, token=token))
        except hub.HubError as exc:
            errors.append(ItemError("model", ref, "read", one_line(exc)))
        except StageError as exc:  # a cached file that is not a readable config (a FIFO, too big...)
            errors.append(ItemError("model", ref, exc.stage, f"{ref}: {exc}"))
    return run_ingest(session, source_kind="hub", source=", ".join(repo_ids), models=snapshots, errors=errors)


def latest_runs(session: Session, limit: int = 10) -> list[orm.IngestRun]:
    return list(session.scalars(select(orm.IngestRun).order_by(orm.IngestRun.id.desc()).limit(limit)))
