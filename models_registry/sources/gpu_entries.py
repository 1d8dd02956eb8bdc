"""The GPU catalog's entries (`catalog/gpus.yaml`, or a user catalog's `gpus:`): validate each into a
GpuRecord; a bad entry becomes an `ItemError` (recorded by the ingest), never an exception.

`gpu_catalog` resolves names against the catalog every command reads; `user_catalog` layers the user's
file over these entries.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from capacity.spec import GpuSku, PriceBasis
from models_registry.sources.bundled import CATALOG_DIR, load_yaml
from models_registry.sources.common import ItemError, excerpt, one_line, short_repr

GPUS_YAML = "gpus.yaml"
_SLUG = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
GIB = 2**30
_Choice = TypeVar("_Choice", bound=StrEnum)


def normalize_alias(name: str) -> str:
    """Case-folded, with spaces, dashes and underscores removed: 'NVIDIA H100 80GB HBM3' -> 'nvidiah10080gbhbm3'."""
    return re.sub(r"[\s_\-]+", "", name).casefold()


class Commitment(StrEnum):
    """The term a price is for: on demand, interruptible, or reserved for one or three years."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    ONE_YEAR = "1y"
    THREE_YEAR = "3y"


@dataclass(frozen=True, slots=True)
class GpuRecord(GpuSku):
    """One validated catalog entry: every field of gpus.yaml, a GpuSku's and the catalog's own below
    (`to_sku()` gives the domain type alone)."""

    form_factor: str | None = None
    memory_marketing_gb: float | None = None
    memory_type: str | None = None
    memory_total_basis: str | None = None
    price_source: str | None = None
    price_date: dt.date | None = None
    price_provider: str | None = None
    price_region: str | None = None
    price_commitment: Commitment | None = None
    sources: tuple[str, ...] = field(default_factory=tuple)

    def to_sku(self) -> GpuSku:
        """The domain type: every field a GpuSku has, as this record has it (the rest are catalog-only)."""
        return GpuSku(**{f.name: getattr(self, f.name) for f in fields(GpuSku)})

    @property
    def content_sha256(self) -> str:
        """sha256 of the canonical JSON of every field: equal content, equal hash."""
        payload = asdict(self)
        payload["price_date"] = self.price_date.isoformat() if self.price_date else None
        payload["aliases"] = list(self.aliases)
        payload["sources"] = list(self.sources)
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def alias_keys(self) -> dict[str, str]:
        """normalized key -> the spelling it came from: id, name and every alias."""
        keys: dict[str, str] = {}
        for spelling in (self.id, self.name, *self.aliases):
            keys.setdefault(normalize_alias(spelling), spelling)
        return keys


class _Invalid(ValueError):
    pass


def _str(entry: dict[str, Any], key: str, *, required: bool = False, limit: int = 200) -> str | None:
    value = entry.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise _Invalid(f"{key} is missing")
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{key} must be a string, got {short_repr(value)}")
    if len(value) > limit:
        raise _Invalid(f"{key} is longer than {limit} characters")
    return value.strip()


def _int(entry: dict[str, Any], key: str, low: int, high: int, *, required: bool = False) -> int | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise _Invalid(f"{key} is missing")
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{key} must be an integer, got {short_repr(value)}")
    if not low <= value <= high:
        raise _Invalid(f"{key} = {value:,} is out of range [{low:,}, {high:,}]")
    return value


def _float(entry: dict[str, Any], key: str, high: float, *, allow_zero: bool = False) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Invalid(f"{key} must be a number, got {short_repr(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        raise _Invalid(f"{key} must be positive, got {value}")
    if value > high:
        raise _Invalid(f"{key} = {value:,} is implausibly large")
    return float(value)


def _bool(entry: dict[str, Any], key: str, default: bool) -> bool:
    value = entry.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _Invalid(f"{key} must be true or false, got {short_repr(value)}")
    return value


def _strings(entry: dict[str, Any], key: str) -> tuple[str, ...]:
    value = entry.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Invalid(f"{key} must be a list, got {short_repr(value)}")
    out: list[str] = []
    for item in value:
        if isinstance(item, int | float) and not isinstance(item, bool):
            item = str(item)  # YAML reads an unquoted alias like 4090 as a number
        if not isinstance(item, str) or not item.strip():
            raise _Invalid(f"{key} must hold non-empty strings, got {short_repr(item)}")
        if key == "aliases" and len(item.strip()) > 200:
            raise _Invalid(f"alias {item[:40]!r}... is longer than 200 characters")
        out.append(item.strip())
    return tuple(out)


def _date(entry: dict[str, Any], key: str) -> dt.date | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise _Invalid(f"{key} must be a date (YYYY-MM-DD), got {short_repr(value)}")


def _choice(entry: dict[str, Any], key: str, kind: type[_Choice]) -> _Choice | None:
    value = entry.get(key)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise _Invalid(f"{key} must be one of {allowed}, got {short_repr(value)}") from None


def validate_gpu_entry(entry: object) -> GpuRecord:
    """One gpus.yaml entry -> a GpuRecord; ValueError with a one-line reason otherwise."""
    if not isinstance(entry, dict):
        raise _Invalid(f"entry must be a mapping, got {type(entry).__name__}")
    sku_id = _str(entry, "id", required=True, limit=64)
    assert sku_id is not None
    if not _SLUG.match(sku_id):
        raise _Invalid(f"id {sku_id!r} must be lowercase letters, digits, '.', '-' or '_'")
    memory = _int(entry, "memory_total_bytes", GIB, 2**44, required=True)
    assert memory is not None
    smi_mib = _int(entry, "memory_total_mib_smi", 1024, 2**24)
    if smi_mib is not None and memory > smi_mib * 2**20:
        raise _Invalid(
            f"memory_total_bytes {memory:,} exceeds memory_total_mib_smi ({smi_mib} MiB = {smi_mib * 2**20:,} B)"
        )
    marketing = _float(entry, "memory_marketing_gb", 16384)
    if marketing is not None and not 0.5 * marketing * 1e9 <= memory <= 1.2 * marketing * GIB:
        raise _Invalid(
            f"memory_total_bytes {memory:,} does not match memory_marketing_gb {marketing:g} "
            f"(expected about {marketing * 1e9:,.0f}-{marketing * GIB:,.0f} B)"
        )
    name = _str(entry, "name", required=True)
    vendor = _str(entry, "vendor", required=True, limit=32)
    assert name is not None and vendor is not None
    price = _float(entry, "price_usd_per_gpu_hour", 1000, allow_zero=True)
    return GpuRecord(
        id=sku_id,
        name=name,
        vendor=vendor,
        memory_total_bytes=memory,
        architecture=_str(entry, "architecture", limit=32),
        form_factor=_str(entry, "form_factor", limit=32),
        memory_marketing_gb=marketing,
        memory_type=_str(entry, "memory_type", limit=32),
        memory_total_mib_smi=smi_mib,
        memory_total_basis=_str(entry, "memory_total_basis", limit=2000),
        memory_bandwidth_gbps=_float(entry, "memory_bandwidth_gbps", 1e6),
        bf16_dense_tflops=_float(entry, "bf16_dense_tflops", 1e6),
        fp8_dense_tflops=_float(entry, "fp8_dense_tflops", 1e6),
        fp4_dense_tflops=_float(entry, "fp4_dense_tflops", 1e6),
        fp8_support=_bool(entry, "fp8_support", False),
        fp4_support=_bool(entry, "fp4_support", False),
        int8_support=_bool(entry, "int8_support", True),
        interconnect=_str(entry, "interconnect", limit=2000),
        interconnect_gbps=_float(entry, "interconnect_gbps", 1e6),
        gpus_per_node=_int(entry, "gpus_per_node", 1, 1024) or 8,
        price_usd_per_gpu_hour=price,
        price_source=_str(entry, "price_source", limit=2000),
        price_date=_date(entry, "price_date"),
        # a price that does not say what it rests on is not one someone was seen to pay
        price_basis=(_choice(entry, "price_basis", PriceBasis) or PriceBasis.ESTIMATE) if price is not None else None,
        price_provider=_str(entry, "price_provider", limit=64),
        price_region=_str(entry, "price_region", limit=64),
        price_commitment=_choice(entry, "price_commitment", Commitment),
        max_gpus_available=_int(entry, "max_gpus_available", 1, 10**7),
        aliases=_strings(entry, "aliases"),
        sources=_strings(entry, "sources"),
    )


def read_gpu_catalog(path: Path | None = None) -> tuple[list[GpuRecord], list[ItemError]]:
    """Every valid SKU of one gpus.yaml (the bundled one by default), and an error for each bad entry
    (duplicate ids and aliases claimed by an earlier SKU included)."""
    source = path or CATALOG_DIR / GPUS_YAML
    entries, errors = load_yaml(source, list_key="gpus")
    return check_gpu_entries(entries, source, errors)


def check_gpu_entries(
    entries: list[Any],
    source: Path,
    errors: list[ItemError],
    *,
    taken: Sequence[GpuRecord] = (),
    label: str | None = None,
) -> tuple[list[GpuRecord], list[ItemError]]:
    """`entries` validated in order; an id or alias already used (by `taken` or an earlier entry) is an
    error. With `label` (a user catalog's section), each reason names the file, the entry and its id."""
    records: list[GpuRecord] = []
    owners: dict[str, str] = {}  # normalized alias -> sku id
    for record in taken:
        for normalized in record.alias_keys():
            owners[normalized] = record.id
    for position, entry in enumerate(entries, start=1):
        raw_id = entry.get("id") if isinstance(entry, dict) else None
        key = raw_id if isinstance(raw_id, str) and raw_id else f"{source.name}#{position}"
        try:
            record = validate_gpu_entry(entry)
            if normalize_alias(record.id) in owners:
                raise _Invalid(f"duplicate id {record.id!r} (already used by {owners[normalize_alias(record.id)]})")
            for normalized, spelling in record.alias_keys().items():
                owner = owners.get(normalized)
                if owner is not None:
                    raise _Invalid(f"{spelling!r} already names {owner}")
        except Exception as exc:  # whatever one entry provokes, the others are still read
            reason = one_line(exc) if isinstance(exc, ValueError) else one_line(f"{type(exc).__name__}: {exc}")
            if label is not None:
                named = f" ({raw_id})" if isinstance(raw_id, str) and raw_id else ""
                reason = f"{source.name}: {label}[{position - 1}]{named}: {reason}"
            errors.append(ItemError("gpu", key, "validate", reason, str(source), excerpt(short_repr(entry))))
            continue
        for normalized in record.alias_keys():
            owners[normalized] = record.id
        records.append(record)
    return records, errors
