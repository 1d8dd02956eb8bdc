"""The GPU catalog every command reads, and any name resolved to one of its SKUs.

`load_gpu_skus()` is the bundled catalog (or `CAPPLAN_CATALOG_DIR`) with the user catalog
(`CAPPLAN_USER_CATALOG`, `user_catalog`) layered over it; `find_gpu_sku` resolves a catalog id or any
alias (nvidia-smi / DCGM product names included) ignoring case, spaces, dashes and underscores. The
entries themselves are validated in `gpu_entries` (re-exported here).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

from capacity.spec import GpuSku
from models_registry.sources.common import one_line
from models_registry.sources.gpu_entries import GPUS_YAML as GPUS_YAML
from models_registry.sources.gpu_entries import Commitment as Commitment
from models_registry.sources.gpu_entries import GpuRecord as GpuRecord
from models_registry.sources.gpu_entries import check_gpu_entries as check_gpu_entries
from models_registry.sources.gpu_entries import normalize_alias
from models_registry.sources.gpu_entries import read_gpu_catalog as read_gpu_catalog
from models_registry.sources.gpu_entries import validate_gpu_entry as validate_gpu_entry
from models_registry.sources.user_catalog import effective_gpu_records

_VENDOR_PREFIXES = ("nvidia", "amd", "intel")


def _without_vendor(key: str) -> str:
    for vendor in _VENDOR_PREFIXES:
        if key.startswith(vendor) and len(key) > len(vendor):
            return key[len(vendor) :]
    return key


@lru_cache(maxsize=8)
def _cached_skus(path: Path) -> tuple[GpuSku, ...]:
    records, _ = read_gpu_catalog(path)
    return tuple(record.to_sku() for record in records)


def load_gpu_skus(path: Path | str | None = None) -> list[GpuSku]:
    """The valid SKUs of one gpus.yaml, or (no path) of the catalog every command uses: `CAPPLAN_CATALOG_DIR`
    or the bundled one, with `CAPPLAN_USER_CATALOG` layered over it (`user_catalog`). Bad entries of a
    catalog are skipped (the ingest records them); an error in the user's file raises UserCatalogError."""
    if path is not None:
        return list(_cached_skus(Path(path)))
    return [record.to_sku() for record in effective_gpu_records()]


def find_gpu_sku(name: str, skus: list[GpuSku] | tuple[GpuSku, ...] | None = None) -> GpuSku:
    """The SKU whose id, name or an alias matches `name` (case, spaces, dashes, underscores ignored).

    Raises LookupError with a one-line message that suggests close matches.
    """
    candidates = list(skus) if skus is not None else load_gpu_skus()
    query = normalize_alias(name)
    index: dict[str, GpuSku] = {}
    for sku in candidates:
        for spelling in (sku.id, sku.name, *sku.aliases):
            index.setdefault(normalize_alias(spelling), sku)
    if query in index:
        return index[query]
    # 'NVIDIA A100-SXM4-80GB' vs 'A100-SXM4-80GB': try again without a vendor prefix on both sides.
    stripped: dict[str, set[str]] = {}
    for key, sku in index.items():
        stripped.setdefault(_without_vendor(key), set()).add(sku.id)
    matches = stripped.get(_without_vendor(query), set())
    if len(matches) == 1:
        (sku_id,) = matches
        return next(sku for sku in candidates if sku.id == sku_id)
    if not name.strip():
        raise LookupError("empty GPU name; pass a catalog id such as h100-sxm-80gb or an nvidia-smi name")
    close = difflib.get_close_matches(query, list(index), n=8, cutoff=0.6)
    suggestions: list[str] = []
    for key in close:
        if index[key].id not in suggestions:
            suggestions.append(index[key].id)
    hint = f"; did you mean {', '.join(suggestions[:4])}?" if suggestions else ""
    raise LookupError(one_line(f"unknown GPU {name!r}{hint} (see `capplan registry list --gpus`)"))
