"""Your fleet, your prices: one user catalog file layered over the GPU catalog.

The file (`CAPPLAN_USER_CATALOG`; example: docs/examples/user-catalog.yaml):

```yaml
schema_version: 1
gpus:              # new SKUs: full entries, the fields of models_registry/catalog/gpus.yaml
  - {id: acme-x1-64gb, name: ACME X1 64GB, vendor: acme, memory_total_bytes: 68182605824, ...}
overrides:         # fields of a catalog GPU, by id (any gpus.yaml field but id)
  h100-sxm-80gb: {memory_bandwidth_gbps: 3350}
nodes:             # how your nodes hold a GPU: gpus_per_node, interconnect, interconnect_gbps
  acme-x1-64gb: {gpus_per_node: 4}
prices:            # offers per GPU id; the policy picks one per GPU
  acme-x1-64gb:
    - {provider: acme-cloud, region: eu-west, commitment: 1y, usd_per_gpu_hour: 2.10,
       source: 'ACME quote Q-1182', date: 2026-11-01, basis: contract, max_gpus: 64}
price_policy:      # which offers may be used (each list empty or absent: any)
  providers: [acme-cloud, aws]   # allowed, in order of preference
  regions: []
  commitments: [on-demand, 1y]
```

How one price is chosen per GPU: its offers are the catalog's own price (gpus.yaml's flat
`price_*` fields, after overrides) and the file's `prices:` for it; offers outside the policy's
providers, regions or commitments are dropped; of the rest, the first provider in `providers`
wins, then the lowest price (the catalog's own offer loses a tie to yours). No offer left: the
GPU has no price, and nothing is bought or placed on it.

Every command reads the same layered catalog (`effective_gpu_records`): `capplan estimate`, the
nightly's registry sync and grid, `capplan registry ingest`, placements and procurement.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from capacity.spec import PriceBasis
from models_registry.sources.bundled import CATALOG_DIR, load_yaml
from models_registry.sources.common import ItemError, excerpt, one_line, short_repr
from models_registry.sources.gpu_entries import (
    GPUS_YAML,
    Commitment,
    GpuRecord,
    check_gpu_entries,
    validate_gpu_entry,
)

USER_CATALOG_ENV = "CAPPLAN_USER_CATALOG"
CATALOG_DIR_ENV = "CAPPLAN_CATALOG_DIR"
NODE_FIELDS = frozenset({"gpus_per_node", "interconnect", "interconnect_gbps"})
GPU_FIELDS = frozenset(f.name for f in fields(GpuRecord))  # what a gpus.yaml entry may set
_TOP_KEYS = frozenset({"schema_version", "gpus", "overrides", "nodes", "prices", "price_policy"})
# each PriceOffer field -> the GpuRecord field that holds it (a catalog entry's own price)
_RECORD_FIELDS = {
    "usd_per_gpu_hour": "price_usd_per_gpu_hour",
    "basis": "price_basis",
    "provider": "price_provider",
    "region": "price_region",
    "commitment": "price_commitment",
    "source": "price_source",
    "date": "price_date",
    "max_gpus": "max_gpus_available",
}
NO_PRICE: dict[str, Any] = dict.fromkeys(_RECORD_FIELDS.values())  # a GpuRecord with no price
_OFFER_KEYS = frozenset(_RECORD_FIELDS)  # the keys of an offer in the user's file
_POLICY_KEYS = frozenset({"providers", "regions", "commitments"})


class UserCatalogError(ValueError):
    """The user catalog cannot be used as written: one line naming the file, the entry and the field."""


@dataclass(frozen=True, slots=True)
class PriceOffer:
    """One price for a GPU: who sells it, where, on what term, what it rests on and how many there are."""

    usd_per_gpu_hour: float
    basis: PriceBasis
    provider: str | None = None
    region: str | None = None
    commitment: Commitment | None = None
    source: str | None = None
    date: dt.date | None = None
    max_gpus: int | None = None

    @classmethod
    def of_record(cls, record: GpuRecord) -> PriceOffer | None:
        """The catalog entry's own price as an offer (None when it has none)."""
        if record.price_usd_per_gpu_hour is None:
            return None
        offer = {name: getattr(record, held_as) for name, held_as in _RECORD_FIELDS.items()}
        return cls(**{**offer, "basis": record.price_basis or PriceBasis.ESTIMATE})

    def applied(self) -> dict[str, Any]:
        """The GpuRecord price fields this offer sets."""
        return {held_as: getattr(self, name) for name, held_as in _RECORD_FIELDS.items()}


@dataclass(frozen=True, slots=True)
class PricePolicy:
    """Which offers the planner may use, and in what order of preference (see the module's docstring)."""

    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    commitments: tuple[Commitment, ...] = ()

    def admits(self, offer: PriceOffer) -> bool:
        """An offer inside every list the policy sets (an offer that does not say is outside a set list)."""
        return (
            (not self.providers or offer.provider in self.providers)
            and (not self.regions or offer.region in self.regions)
            and (not self.commitments or offer.commitment in self.commitments)
        )

    def choose(self, offers: list[PriceOffer]) -> PriceOffer | None:
        """The offer the planner uses: the first preferred provider, then the lowest price; later offers
        (the user's own) win a tie over earlier ones (the catalog's)."""
        admitted = [(position, offer) for position, offer in enumerate(offers) if self.admits(offer)]
        if not admitted:
            return None

        def rank(item: tuple[int, PriceOffer]) -> tuple[int, float, int]:
            position, offer = item
            preference = self.providers.index(offer.provider) if offer.provider in self.providers else 0
            return preference, offer.usd_per_gpu_hour, -position

        return min(admitted, key=rank)[1]


@dataclass(frozen=True)
class UserCatalog:
    """A parsed user catalog file: what it adds, changes and prices, and every entry it could not read."""

    path: Path
    gpus: tuple[Any, ...] = ()
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)  # GPU id -> the section that changed it (overrides/nodes)
    prices: dict[str, tuple[PriceOffer, ...]] = field(default_factory=dict)
    policy: PricePolicy = PricePolicy()
    errors: tuple[ItemError, ...] = ()


class _Bad(ValueError):
    pass


def _strings(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _Bad(f"{where} must be a list of names, got {short_repr(value)}")
    return tuple(v.strip() for v in value)


def _policy(raw: object) -> PricePolicy:
    if raw is None:
        return PricePolicy()
    if not isinstance(raw, dict) or set(raw) - _POLICY_KEYS:
        raise _Bad(f"must be a mapping of {', '.join(sorted(_POLICY_KEYS))}, got {short_repr(raw)}")
    commitments = []
    for name in _strings(raw.get("commitments"), "commitments"):
        try:
            commitments.append(Commitment(name))
        except ValueError:
            allowed = ", ".join(c.value for c in Commitment)
            raise _Bad(f"commitments: {name!r} is not one of {allowed}") from None
    return PricePolicy(
        _strings(raw.get("providers"), "providers"),
        _strings(raw.get("regions"), "regions"),
        tuple(commitments),
    )


def _offer(raw: object) -> PriceOffer:
    """One `prices:` item -> a PriceOffer, validated by the catalog's own field rules (a user price
    is the user's contract unless it says otherwise)."""
    if not isinstance(raw, dict):
        raise _Bad(f"a price must be a mapping, got {short_repr(raw)}")
    unknown = set(raw) - _OFFER_KEYS
    if unknown:
        raise _Bad(f"unknown field {sorted(unknown)[0]!r} (known: {', '.join(sorted(_OFFER_KEYS))})")
    if raw.get("usd_per_gpu_hour") is None:
        raise _Bad("usd_per_gpu_hour is missing")
    as_entry = {
        "id": "price",
        "name": "price",
        "vendor": "price",
        "memory_total_bytes": 2**30,
        "price_usd_per_gpu_hour": raw.get("usd_per_gpu_hour"),
        "price_basis": raw.get("basis", PriceBasis.CONTRACT.value),
        "price_provider": raw.get("provider"),
        "price_region": raw.get("region"),
        "price_commitment": raw.get("commitment"),
        "price_source": raw.get("source"),
        "price_date": raw.get("date"),
        "max_gpus_available": raw.get("max_gpus"),
    }
    try:
        offer = PriceOffer.of_record(validate_gpu_entry(as_entry))
    except ValueError as exc:
        reason = str(exc)
        for catalog_name, offer_name in (
            ("price_usd_per_gpu_hour", "usd_per_gpu_hour"),
            ("max_gpus_available", "max_gpus"),
            ("price_", ""),
        ):
            reason = reason.replace(catalog_name, offer_name)
        raise _Bad(reason) from None
    assert offer is not None
    return offer


def _mapping(document: dict[str, Any], key: str) -> dict[str, Any]:
    value = document.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"{key} must be a mapping of GPU id -> ..., got {short_repr(value)}")
    return value


def read_user_catalog(path: Path) -> UserCatalog:
    """The user catalog at `path`; each entry it cannot read is an ItemError naming file, entry and field."""
    gpus, errors = load_yaml(path, list_key="gpus")
    if errors:
        return UserCatalog(path, errors=tuple(errors))
    document = yaml.safe_load(path.read_bytes()) or {}  # again, for the sections beside `gpus` (it parses)
    problems: list[ItemError] = []

    def bad(key: str, reason: str, raw: object = None) -> None:
        problems.append(
            ItemError(
                "gpu",
                key,
                "user-catalog",
                one_line(f"{path.name}: {key}: {reason}"),
                str(path),
                excerpt(short_repr(raw)),
            )
        )

    unknown = set(document) - _TOP_KEYS
    if unknown:
        bad(sorted(unknown, key=str)[0], f"unknown section (known: {', '.join(sorted(_TOP_KEYS))})")
    known_gpus: list[Any] = []
    for position, entry in enumerate(gpus):  # a misspelt field would be ignored, and its value lost
        extra = sorted(set(entry) - GPU_FIELDS, key=str) if isinstance(entry, dict) else []
        if extra:
            named = f" ({entry.get('id')})" if isinstance(entry.get("id"), str) else ""
            bad(f"gpus[{position}]{named}", f"unknown field {extra[0]!r} (known: the fields of gpus.yaml)", entry)
        else:
            known_gpus.append(entry)
    overrides: dict[str, dict[str, Any]] = {}
    sections: dict[str, str] = {}
    offers: dict[str, tuple[PriceOffer, ...]] = {}
    policy = PricePolicy()
    for section in ("overrides", "nodes"):
        try:
            items = _mapping(document, section)
        except _Bad as exc:
            bad(section, str(exc))
            continue
        for gpu_id, fields_ in items.items():
            key = f"{section}.{gpu_id}"
            allowed = NODE_FIELDS if section == "nodes" else GPU_FIELDS
            if not isinstance(fields_, dict):
                bad(key, f"must be a mapping of fields, got {short_repr(fields_)}", fields_)
            elif "id" in fields_:
                bad(key, "id cannot be overridden; add a GPU under gpus: instead", fields_)
            elif set(fields_) - allowed:
                field_ = sorted(set(fields_) - allowed, key=str)[0]
                known = ", ".join(sorted(allowed)) if section == "nodes" else "the fields of gpus.yaml"
                bad(key, f"unknown field {field_!r} (known: {known})", fields_)
            else:
                overrides.setdefault(str(gpu_id), {}).update(fields_)
                sections.setdefault(str(gpu_id), section)
    try:
        price_lists = _mapping(document, "prices")
    except _Bad as exc:
        bad("prices", str(exc))
        price_lists = {}
    for gpu_id, items in price_lists.items():
        read: list[PriceOffer] = []
        for position, raw in enumerate(items if isinstance(items, list) else [items]):
            try:
                read.append(_offer(raw))
            except _Bad as exc:
                bad(f"prices.{gpu_id}[{position}]", str(exc), raw)
        offers[str(gpu_id)] = tuple(read)
    try:
        policy = _policy(document.get("price_policy"))
    except _Bad as exc:
        bad("price_policy", str(exc))
    return UserCatalog(path, tuple(known_gpus), overrides, sections, offers, policy, tuple(problems))


def layered_gpu_catalog(base: Path, user: UserCatalog | None) -> tuple[list[GpuRecord], list[ItemError]]:
    """The catalog at `base` (a gpus.yaml) with the user's GPUs added, fields overridden and prices chosen."""
    entries, errors = load_yaml(base, list_key="gpus")
    if user is None:
        return check_gpu_entries(entries, base, errors)
    errors += user.errors
    by_id = {e.get("id"): position for position, e in enumerate(entries) if isinstance(e, dict)}
    merged: list[Any] = list(entries)
    own_ids = {e.get("id") for e in user.gpus if isinstance(e, dict)}
    for gpu_id, fields_ in user.overrides.items():
        key = f"{user.sections.get(gpu_id, 'overrides')}.{gpu_id}"
        position = by_id.get(gpu_id)
        if position is None:
            if gpu_id not in own_ids:  # (the user's own GPUs take their node and overrides below)
                reason = one_line(f"{user.path.name}: {key}: no GPU {gpu_id!r} in the catalog or under gpus:")
                errors.append(ItemError("gpu", key, "user-catalog", reason, str(user.path)))
            continue
        candidate = {**merged[position], **fields_}
        try:
            validate_gpu_entry(candidate)
        except ValueError as exc:  # the override is the user's: say so, and keep the catalog's entry
            reason = one_line(f"{user.path.name}: {key}: {exc}")
            errors.append(ItemError("gpu", key, "user-catalog", reason, str(user.path), excerpt(short_repr(fields_))))
            continue
        merged[position] = candidate
    added: list[Any] = []
    for entry in user.gpus:
        if isinstance(entry, dict) and entry.get("id") in user.overrides:
            entry = {**entry, **user.overrides[str(entry.get("id"))]}
        added.append(entry)
    records, base_errors = check_gpu_entries(merged, base, [])
    user_records, user_errors = check_gpu_entries(added, user.path, [], taken=records, label="gpus")
    errors += base_errors + user_errors
    for gpu_id in sorted(set(user.prices) - {r.id for r in records + user_records}):
        reason = one_line(f"{user.path.name}: prices.{gpu_id}: no GPU {gpu_id!r} in the catalog or under gpus:")
        errors.append(ItemError("gpu", f"prices.{gpu_id}", "user-catalog", reason, str(user.path)))
    priced: list[GpuRecord] = []
    for record in records + user_records:
        own = PriceOffer.of_record(record)
        offers = ([own] if own else []) + list(user.prices.get(record.id, ()))
        chosen = user.policy.choose(offers)
        priced.append(replace(record, **(chosen.applied() if chosen else NO_PRICE)))
    return priced, errors


def default_catalog_dir() -> Path:
    """The base catalog directory: `CAPPLAN_CATALOG_DIR` when set, else the bundled one."""
    return Path(os.environ.get(CATALOG_DIR_ENV) or CATALOG_DIR)


def user_catalog_path() -> Path | None:
    """The user catalog file named by `CAPPLAN_USER_CATALOG` (None when unset)."""
    value = os.environ.get(USER_CATALOG_ENV, "").strip()
    return Path(value).expanduser() if value else None


def _stamp(path: Path | None) -> tuple[str, int, int] | None:
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return (str(path), -1, -1)
    return (str(path.resolve()), stat.st_mtime_ns, stat.st_size)


def gpu_catalog_for(
    base_dir: Path | None = None, user_file: Path | None = None
) -> tuple[list[GpuRecord], list[ItemError]]:
    """The layered GPU catalog every command uses: `base_dir` (default `default_catalog_dir()`) and the user
    catalog `user_file` (default `CAPPLAN_USER_CATALOG`'s)."""
    user_path = user_file or user_catalog_path()
    base = (base_dir or default_catalog_dir()) / GPUS_YAML
    records, errors = _layered(
        _stamp(base) or ("", 0, 0), _stamp(user_path), str(base), str(user_path) if user_path else None
    )
    return list(records), list(errors)  # copies: the cached lists stay as read


@lru_cache(maxsize=8)
def _layered(
    _base_stamp: tuple[str, int, int], _user_stamp: tuple[str, int, int] | None, base: str, user: str | None
) -> tuple[list[GpuRecord], list[ItemError]]:
    """Cached by the files' identity and modification time, so an edited catalog is read again."""
    return layered_gpu_catalog(Path(base), read_user_catalog(Path(user)) if user else None)


def effective_gpu_records() -> list[GpuRecord]:
    """The layered catalog's valid SKUs; UserCatalogError (one line) when the user catalog has an error,
    so a typo in your file is reported rather than leaving its GPU 'unknown'."""
    records, errors = gpu_catalog_for()
    user_path = user_catalog_path()
    if user_path is not None:
        for error in errors:
            if error.source_path == str(user_path):
                raise UserCatalogError(error.reason)
    return list(records)
