"""Turn what a user typed (`capplan estimate MODEL`) into a checked ModelSpec and where it came from.

MODEL is, in this order:
1. a path to a config.json, or a directory holding one (and maybe a safetensors index);
2. a registry id (exact, case-insensitive, or the unique name after the '/'), optionally
   `@revision`: the current revision in the registry database when one exists at the configured
   URL, else the bundled catalog, else the local Hugging Face cache. Never the network.
Anything else is a one-line `LookupError`; a config that cannot be planned is a `ConfigError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from capacity.features.speculative import SpecMethod, SpeculativeSpec
from capacity.features.speculative_memory import draft_shape
from capacity.hf_config.overrides import ConfigOverrides, OverrideError
from capacity.spec import ModelSpec
from models_registry import db, orm
from models_registry.normalize import spec_from_snapshot
from models_registry.sources import bundled, hub, local
from models_registry.sources.common import CONFIG_NAME, ConfigSnapshot, StageError, one_line


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    spec: ModelSpec
    repo_id: str
    revision: str | None
    config_sha256: str
    checkpoint_bytes: int | None
    source: str  # registry | bundled | hf-cache | local


def match_id(ref: str, ids: Iterable[str]) -> str | None:
    """The id `ref` names: exact, then case-insensitive, then a unique match of the part after '/'."""
    known = list(ids)
    if ref in known:
        return ref
    folded = ref.casefold()
    for candidate in known:
        if candidate.casefold() == folded:
            return candidate
    if "/" not in ref:
        by_name = [c for c in known if c.rsplit("/", 1)[-1].casefold() == folded]
        if len(by_name) == 1:
            return by_name[0]
    return None


def _resolved(
    snapshot: ConfigSnapshot, source: str, sha256: str | None = None, overrides: ConfigOverrides | None = None
) -> ResolvedModel:
    try:
        # the file's sha256 still names the file the overrides were applied to
        _config, spec = spec_from_snapshot(snapshot, overrides)
    except OverrideError as exc:
        raise LookupError(str(exc)) from None
    if overrides is not None:
        spec = replace(spec, notes=(*spec.notes, overrides.note))
    return ResolvedModel(
        spec=spec,
        repo_id=snapshot.repo_id,
        revision=snapshot.revision,
        config_sha256=sha256 or snapshot.config_sha256,
        checkpoint_bytes=snapshot.checkpoint_bytes,
        source=source,
    )


def _path_ref(ref: str) -> Path | None:
    path = Path(ref).expanduser()
    if path.exists():
        return path
    if ref.endswith(".json") or ref.startswith(("/", "./", "../", "~", ".\\")):
        raise LookupError(f"no such file or directory: {ref}")
    return None


def _from_path(path: Path, overrides: ConfigOverrides | None) -> ResolvedModel:
    try:
        if path.is_dir():
            if not (path / CONFIG_NAME).is_file():
                raise LookupError(f"no {CONFIG_NAME} in directory {path}")
            snapshot = local.read_model_dir(path, repo_id=str(path))
        else:
            snapshot = local.read_config_file(path, repo_id=str(path))
    except StageError as exc:
        if exc.stage == "read":
            raise LookupError(str(exc)) from None
        raise
    return _resolved(snapshot, "local", overrides=overrides)


def registry_row(session: Session, ref: str) -> orm.Model | None:
    """The registry row `ref` names (`repo` or `repo@revision-prefix`); the current revision by default."""
    repo_ref, _, revision = ref.partition("@")
    ids = session.scalars(select(orm.Model.repo_id).where(orm.Model.is_current.is_(True))).all()
    repo_id = match_id(repo_ref, ids)
    if repo_id is None:
        return None
    query = select(orm.Model).where(orm.Model.repo_id == repo_id)
    if revision:
        query = query.where(orm.Model.revision.startswith(revision)).order_by(orm.Model.id.desc())
    else:
        query = query.where(orm.Model.is_current.is_(True))
    return session.scalars(query.limit(1)).first()


def _from_registry(session: Session, ref: str, overrides: ConfigOverrides | None) -> ResolvedModel | None:
    row = registry_row(session, ref)
    if row is None:
        return None
    snapshot = ConfigSnapshot(
        repo_id=row.repo_id,
        config_bytes=row.config_json.encode("utf-8"),
        source=row.source,
        source_path=row.source_path,
        revision=row.revision,
        checkpoint_bytes=row.checkpoint_bytes,
    )
    return _resolved(snapshot, "registry", sha256=row.config_sha256, overrides=overrides)


def _registry_ids(session: Session) -> list[str]:
    return list(session.scalars(select(orm.Model.repo_id).where(orm.Model.is_current.is_(True))).all())


def load_model(ref: str, *, session: Session | None = None, overrides: ConfigOverrides | None = None) -> ResolvedModel:
    """Resolve MODEL (see the module docstring), with a serving command's config `overrides` applied as its
    engine applies them. Raises LookupError or ConfigError, one line each."""
    ref = ref.strip()
    if not ref:
        raise LookupError("empty model reference; pass a registry id or a path to a config.json")
    path = _path_ref(ref)
    if path is not None:
        return _from_path(path, overrides)

    known: list[str] = []
    if session is not None:
        found = _from_registry(session, ref, overrides)
        if found is not None:
            return found
        known += _registry_ids(session)
    elif db.registry_exists():
        with db.session_scope() as own:
            found = _from_registry(own, ref, overrides)
            if found is not None:
                return found
            known += _registry_ids(own)

    repo_ref, _, revision = ref.partition("@")
    catalog_ids = bundled.bundled_ids()
    catalog_id = match_id(repo_ref, catalog_ids)
    if catalog_id is not None:
        entry = bundled.find_entry(catalog_id)
        if entry is not None and (not revision or (entry.revision or "").startswith(revision)):
            return _resolved(bundled.snapshot_of(entry), "bundled", overrides=overrides)
    known += catalog_ids

    try:
        snapshot = hub.fetch_config(repo_ref, revision or None, use_bundled=False, allow_network=False)
    except hub.HubError:
        pass
    else:
        return _resolved(snapshot, "hf-cache", overrides=overrides)

    close = difflib.get_close_matches(repo_ref, sorted(set(known)), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise LookupError(
        one_line(
            f"unknown model {ref!r}: not in the registry, the bundled catalog or the local Hugging Face "
            f"cache{hint} (or pass a path to a config.json)"
        )
    )


def with_resolved_draft(spec: SpeculativeSpec) -> SpeculativeSpec:
    """A speculative config with its draft checkpoint resolved like MODEL (registry, bundled catalog, a path to a
    config.json, the local cache) and sized as the engine loads it; where the draft is in none of them it stays
    unresolved, and the estimate assumes an EAGLE-sized head and says so (never refused)."""
    if spec.draft_model is None or spec.draft is not None or spec.method in (SpecMethod.MTP, SpecMethod.UNKNOWN):
        return spec
    if not spec.method.has_weights:
        return spec
    try:
        resolved = load_model(spec.draft_model)
    except (LookupError, ValueError, OSError):
        return spec
    return replace(spec, draft=draft_shape(resolved.spec, spec.method, spec.draft_model))


def spec_and_checkpoint(ref: str) -> tuple[ModelSpec, int | None]:
    """`load_model(ref)` as the accuracy studies take a model: its spec and its checkpoint's bytes."""
    resolved = load_model(ref)
    return resolved.spec, resolved.checkpoint_bytes
