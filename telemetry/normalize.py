"""Names and units: model names -> registry ids, GPU names -> catalog SKUs, sizes -> bytes,
timestamps -> UTC, raw bytes -> text. Pure functions and two small resolvers."""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from capacity.spec import GpuSku
from models_registry.redact import redact_head

GIB = 1 << 30
MIB = 1 << 20

_UNIT_BYTES = {
    "b": 1,
    "kib": 1 << 10,
    "kb": 1 << 10,
    "mib": MIB,
    "mb": MIB,
    "gib": GIB,
    "gb": GIB,
    "tib": 1 << 40,
    "tb": 1 << 40,
}


class RowError(ValueError):
    """A row that cannot be accepted: a reason code (schema.REASON_CODES) and a one-line reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = one_line(reason)


def one_line(text: object, limit: int = 300) -> str:
    """`text` on one line, secrets redacted before it is cut (a cut never leaves half a token)."""
    line = redact_head(str(text), limit * 50, lambda head: re.sub(r"\s+", " ", head).strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def excerpt(text: str | None, limit: int = 200) -> str | None:
    """The start of a raw line, secrets redacted first (so a cut never leaves half a token)."""
    if text is None:
        return None
    text = redact_head(text, limit * 50, lambda head: head.rstrip("\r\n"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- numbers -------------------------------------------------------------------------------------

# Typed columns hold int64 at most; a value a typed column cannot hold is rejected here, never
# passed on to Polars / DuckDB / Parquet (where it would stop the whole run).
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
# Floats are read only up to 2**53 (every integer below it is exact): no count, size or fraction a
# deployment reports comes near it, and sums and products of such values stay finite.
FLOAT_LIMIT = float(1 << 53)
# ASCII only: str.isdigit() and float() also accept other scripts' digits ('١٢٣', '²').
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,4})?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d{1,19}", re.ASCII)
_DIGITS = re.compile(r"[+-]?\d+(?:\.\d*)?", re.ASCII)
_NON_FINITE = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def parse_number(text: str, what: str) -> float:
    """'1,234.5' -> 1234.5 (ASCII digits only, |value| <= 2**53); RowError otherwise."""
    cleaned = str(text).strip().replace(",", "").replace("_", "")
    if _NON_FINITE.fullmatch(cleaned):
        raise RowError("not_finite", f"{what} is {cleaned}")
    if len(cleaned) > 64 and _DIGITS.fullmatch(cleaned):
        raise RowError("out_of_range", f"{what}: a number of {len(cleaned):,} digits is beyond any plausible value")
    if len(cleaned) > 64 or not _DECIMAL.fullmatch(cleaned):
        raise RowError("bad_value", f"{what}: {short(text)!r} is not a number")
    value = float(cleaned)
    return check_float(value, what)


def check_float(value: float, what: str) -> float:
    """`value` when finite and |value| <= 2**53; RowError(not_finite / out_of_range) otherwise."""
    if not math.isfinite(value):
        raise RowError("not_finite", f"{what} is {value}")
    if abs(value) > FLOAT_LIMIT:
        raise RowError("out_of_range", f"{what} {value:g} is beyond any plausible value (|x| > 2^53)")
    return value


def check_int(value: int, what: str, limit: int = INT64_MAX) -> int:
    """`value` when |value| <= limit (int64 by default); RowError('out_of_range') otherwise."""
    if not -limit - 1 <= value <= limit:
        shown = f"{value:.3e}" if abs(value) < 10**300 else "a number of more than 300 digits"
        raise RowError("out_of_range", f"{what} {shown} does not fit a {limit.bit_length() + 1}-bit integer")
    return value


def parse_int(text: str | int | float, what: str) -> int:
    """A whole number (ASCII digits, '1,024', '4096.0', '1e3'), range-checked to int64."""
    if isinstance(text, bool):
        raise RowError("bad_value", f"{what}: {text!r} is not a number")
    if isinstance(text, int):
        return check_int(text, what)
    if isinstance(text, float):
        value = check_float(text, what)
    else:
        cleaned = str(text).strip().replace(",", "").replace("_", "")
        if _INTEGER.fullmatch(cleaned):
            return check_int(int(cleaned), what)
        value = parse_number(text, what)
    if not value.is_integer():
        raise RowError("bad_value", f"{what}: {short(text)!r} is not a whole number")
    return check_int(int(value), what)


def short(text: object, limit: int = 60) -> str:
    """The start of a value, for a reason (a 1 MB cell is not repeated in the message)."""
    value = redact_head(str(text), limit * 50)
    return value if len(value) <= limit else value[: limit - 1] + "…"


def human_int(text: str, what: str) -> int:
    """vLLM's human-readable integers: 32768, 32k (x1000), 32K (x1024), 1m, 1M."""
    m = re.fullmatch(r"\s*(-?[\d.,_]{1,40})\s*([kKmMgG]?)\s*", text, re.ASCII)
    if not m:
        raise RowError("bad_value", f"{what}: {short(text)!r} is not a number")
    number = parse_number(m.group(1), what)
    suffix = m.group(2)
    scale = {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 1 << 20, "g": 10**9, "G": 1 << 30}[suffix]
    value = check_float(number * scale, what)
    if not value.is_integer():
        raise RowError("bad_value", f"{what}: {short(text)!r} is not a whole number")
    return int(value)


def size_bytes(number: str | float, unit: str, what: str) -> int:
    """A size as vLLM prints it -> bytes. vLLM's 'GB'/'MB' labels are GiB/MiB (it divides by 2**30)."""
    value = parse_number(number, what) if isinstance(number, str) else check_float(float(number), what)
    try:
        scale = _UNIT_BYTES[unit.strip().lower()]
    except KeyError:
        raise RowError("wrong_unit", f"{what}: unknown unit {short(unit)!r}") from None
    return round(check_float(value * scale, what))


def parse_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise RowError("bad_value", f"{what}: {value!r} is not true/false")


def null_text(value: object) -> str | None:
    """'' / None / 'None' / 'null' / 'nan' -> None, else the stripped string."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    text = str(value).strip()
    return None if text.lower() in ("", "none", "null", "nan", "n/a", "na") else text


def canonical_dtype(value: str | None) -> str | None:
    """'torch.bfloat16' -> 'bfloat16'; 'bf16' -> 'bfloat16'; others lowercased."""
    text = null_text(value)
    if text is None:
        return None
    text = text.strip("'\"").lower().removeprefix("torch.")
    return {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}.get(
        text, text
    )


# --- time ----------------------------------------------------------------------------------------


# Times outside this window are rejected: no fleet reported before 2000 or after 2100, and the
# extremes (year 1, 9999) overflow when moved to UTC or turned into epoch microseconds.
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_EPOCH = re.compile(r"\d{9,13}(\.\d{1,9})?", re.ASCII)


def parse_timestamp(value: object, what: str = "timestamp") -> dt.datetime:
    """ISO 8601 (naive = UTC), or epoch seconds / milliseconds -> an aware UTC datetime in 2000-2100."""
    try:
        parsed = _timestamp(value, what)
    except RowError:
        raise
    except (ValueError, OverflowError, OSError, TypeError):
        raise RowError("bad_timestamp", f"{what}: {short(value)!r} is not a time capplan can hold") from None
    if not EARLIEST <= parsed < LATEST:
        raise RowError("bad_timestamp", f"{what}: {parsed.isoformat()} is outside 2000-2100")
    return parsed


def _timestamp(value: object, what: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _from_epoch(float(value), what)
    text = str(value).strip()
    if _EPOCH.fullmatch(text):
        return _from_epoch(float(text), what)
    if len(text) > 64 or not text.isascii():
        raise RowError("bad_timestamp", f"{what}: {short(text)!r} is not an ISO 8601 time or epoch seconds")
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RowError("bad_timestamp", f"{what}: {short(text)!r} is not an ISO 8601 time or epoch seconds") from None
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def _from_epoch(seconds: float, what: str) -> dt.datetime:
    if not math.isfinite(seconds):
        raise RowError("bad_timestamp", f"{what}: epoch {seconds} is not a time")
    if seconds > 1e11:  # milliseconds
        seconds /= 1000
    if not EARLIEST.timestamp() <= seconds <= LATEST.timestamp():
        raise RowError("bad_timestamp", f"{what}: epoch {seconds:.10g} is outside 2000-2100")
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


# --- text ----------------------------------------------------------------------------------------

# A line longer than this is rejected unread: no telemetry line comes near it, and the patterns a
# line is matched against stay fast on anything shorter.
MAX_LINE_CHARS = 16_384


def line_too_long(length: int) -> RowError:
    return RowError("too_large", f"line of {length:,} characters, above the {MAX_LINE_CHARS:,}-character limit")


@dataclass(frozen=True, slots=True)
class DecodedText:
    """A file's text split into lines; `bad_lines` are 1-based numbers of lines that were not UTF-8."""

    lines: list[str]
    encoding: str
    bad_lines: frozenset[int] = frozenset()


def decode_text(raw: bytes) -> DecodedText:
    """UTF-8 (BOM stripped), UTF-16 with a BOM, or UTF-8 line by line (undecodable lines marked).

    Raises RowError('encoding') for binary content: NUL bytes without a UTF-16 BOM, or more than
    two lines and more than half of them undecodable.
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return DecodedText(raw.decode("utf-16").splitlines(), "utf-16")
        except UnicodeDecodeError as exc:
            raise RowError("encoding", f"UTF-16 BOM but undecodable at byte {exc.start}") from None
    if b"\x00" in raw:
        nul = raw.index(b"\x00")
        raise RowError("encoding", f"binary content (NUL byte at {nul}), not text")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return DecodedText(raw.decode("utf-8").splitlines(), "utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    lines: list[str] = []
    bad: set[int] = set()
    for number, chunk in enumerate(raw.splitlines(), start=1):
        try:
            lines.append(chunk.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(chunk.decode("utf-8", errors="replace"))
            bad.add(number)
    if len(bad) > 2 and len(bad) * 2 > len(lines):
        raise RowError("encoding", f"not UTF-8 text: {len(bad)} of {len(lines)} lines undecodable (byte {first_bad})")
    return DecodedText(lines, "utf-8 (with undecodable lines)", frozenset(bad))


# --- models --------------------------------------------------------------------------------------

# Hugging Face renamed these repos; pasted logs still use the old names.
_RENAMES = {
    "meta-llama/meta-llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/meta-llama-3.1-70b-instruct": "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/meta-llama-3.1-405b-instruct": "meta-llama/Llama-3.1-405B-Instruct",
}
_HF_CACHE = re.compile(r"models--([^/]+)--([^/]+)(?:/snapshots/[0-9a-f]+)?/?$")


def catalog_model_ids() -> list[str]:
    """The registry ids of the bundled catalog (models_registry/catalog/models.yaml)."""
    from models_registry.sources.bundled import bundled_ids

    return bundled_ids()


@dataclass
class ModelResolver:
    """Model names as engines report them -> registry ids (Hugging Face repo ids).

    Order: exact id; case-insensitive id; a Hugging Face cache path (models--org--name); a known
    repo rename; the basename of a path or repo (`/models/Llama-3.1-8B-Instruct`) when exactly one
    registry id has that basename. Anything else is an unknown model.
    """

    ids: tuple[str, ...]
    _folded: dict[str, str] = field(init=False, repr=False)
    _by_base: dict[str, list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._folded = {i.casefold(): i for i in self.ids}
        self._by_base = {}
        for i in self.ids:
            self._by_base.setdefault(i.rsplit("/", 1)[-1].casefold(), []).append(i)

    @classmethod
    def from_ids(cls, ids: Iterable[str]) -> ModelResolver:
        return cls(tuple(dict.fromkeys(ids)))

    def resolve(self, name: str) -> str:
        """The registry id for `name`; RowError('unknown_model') with a one-line reason otherwise."""
        raw = name
        text = name.strip().strip("'\"").strip()
        text = re.sub(r"^(https?://)?(www\.)?(huggingface\.co|hf\.co)/", "", text)
        text = text.rstrip("/")
        if not text:
            raise RowError("missing_field", "empty model name")
        cache = _HF_CACHE.search(text)
        if cache:
            text = f"{cache.group(1)}/{cache.group(2)}"
        folded = text.casefold()
        if folded in self._folded:
            return self._folded[folded]
        renamed = _RENAMES.get(folded)
        if renamed and renamed.casefold() in self._folded:
            return self._folded[renamed.casefold()]
        base = PurePosixPath(text.replace("\\", "/")).name.casefold()
        candidates = self._by_base.get(base, [])
        if not candidates:
            for old, new in _RENAMES.items():
                if old.rsplit("/", 1)[-1] == base and new.casefold() in self._folded:
                    candidates = [self._folded[new.casefold()]]
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            raise RowError("unknown_model", f"model {raw!r} is ambiguous: {', '.join(sorted(candidates))}")
        raise RowError("unknown_model", f"unknown model {raw!r}: no registry id matches it or its basename")


# --- GPUs ----------------------------------------------------------------------------------------


@dataclass
class GpuResolver:
    """GPU names (nvidia-smi, DCGM modelName, vLLM device_name, catalog ids) -> catalog SKUs."""

    skus: tuple[GpuSku, ...]
    _cache: dict[str, GpuSku | RowError] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_catalog(cls) -> GpuResolver:
        from models_registry.sources.gpu_catalog import load_gpu_skus

        return cls(tuple(load_gpu_skus()))

    def resolve(self, name: str) -> GpuSku:
        key = name.strip()
        hit = self._cache.get(key)
        if hit is None:
            hit = self._lookup(key)
            self._cache[key] = hit
        if isinstance(hit, RowError):
            raise hit
        return hit

    def _lookup(self, name: str) -> GpuSku | RowError:
        from models_registry.sources.gpu_catalog import find_gpu_sku

        if not name:
            return RowError("missing_field", "empty GPU name")
        try:
            return find_gpu_sku(name, self.skus)
        except LookupError as exc:
            return RowError("unknown_gpu", str(exc))
