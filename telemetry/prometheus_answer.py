"""One Prometheus HTTP API answer, read series by series into compact columns.

`json.loads` of a 50 MB answer builds a Python list and float and str per point (about 150 bytes
each, 2 million points: 300 MB) and a dict per series, all alive until the last one is read.
`read_answer` walks the JSON text instead: the envelope's small values are decoded as usual, the
`data.result` entries one at a time, and each series' points are matched in place and kept as two
`array('d')` columns (16 bytes a point). What the answer cost is counted against the `Budget` of
the whole ingest (points kept, and a deadline): when it is spent the series read so far are kept
whole, the rest of the answer is not read, and the answer says why in one line.

Each point is checked here, on its own: a timestamp that is not a number, not finite or outside
2000-2100, a value that is not a number string, reject that point (`bad_timestamp`, `malformed`)
and never its neighbours. Each series' labels are checked once: its name must be the queried
metric's, its label names must be ones the text format can carry, and its deployment id comes from
the one label the settings name (`deployment_label`), nothing else; an id with control, format
(right-to-left marks, zero-width...) or line-separator characters, or longer than
`MAX_DEPLOYMENT_ID_CHARS`, is refused (`bad_value`).
"""

from __future__ import annotations

import json
import math
import re
import time
from array import array
from dataclasses import dataclass, field

from telemetry.normalize import EARLIEST, LATEST, RowError, one_line
from telemetry.prometheus import DEPLOYMENT_LABELS, deployment_problem

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# The usual point, `[1764547200.123, "3.5"]`, matched without building Python objects for it.
_POINT = re.compile(r'\[\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*,\s*"([^"\\\s]{1,64})"\s*\]')
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.ASCII)
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*", re.ASCII)
_EARLIEST_S = EARLIEST.timestamp()
_LATEST_S = LATEST.timestamp()
_CHECK_EVERY = 16_384  # points between two looks at the clock


class BudgetSpent(RowError):
    """The ingest's budget (points kept or time) is spent: what follows is not read."""


@dataclass
class Budget:
    """What one whole Prometheus ingest may cost: `max_points` points kept, `budget_s` seconds."""

    max_points: int
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    points: int = 0

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def check_time(self) -> None:
        if self.left_s() <= 0:
            raise BudgetSpent("too_large", f"the ingest's time budget ({self.budget_s:g} s) is spent")

    def take(self, points: int) -> None:
        """Count `points` more kept; BudgetSpent (nothing counted) when they do not fit."""
        if self.points + points > self.max_points:
            raise BudgetSpent(
                "too_large", f"the ingest's budget of {self.max_points:,} points is spent ({self.points:,} kept)"
            )
        self.points += points


@dataclass(slots=True)
class Series:
    """One series of an answer: its points as columns, the points rejected on their own (index in
    the series, error, excerpt), and `problem`: a reason that rejects all its points."""

    name: str
    labels: dict[str, str]
    deployment: str | None = None
    problem: RowError | None = None
    stamps: array[float] = field(default_factory=lambda: array("d"))
    values: array[float] = field(default_factory=lambda: array("d"))
    bad: list[tuple[int, RowError, str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.stamps) + len(self.bad)

    def group(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """The series with its `le` set aside: the buckets of one histogram share it."""
        return self.name, tuple(sorted((k, v) for k, v in self.labels.items() if k != "le"))

    def sort_key(self) -> tuple[str, tuple[tuple[str, str], ...], float, str]:
        le = self.labels.get("le", "")
        try:
            bound = float(le) if le else -math.inf
        except ValueError:
            bound = math.inf
        return (*self.group(), bound, le)


@dataclass
class Answer:
    series: list[Series]
    entries: list[tuple[RowError, str]]  # result entries that are not series: (error, excerpt)
    stopped: RowError | None = None  # the budget ran out: the rest of the answer was not read


@dataclass
class _Reader:
    text: str
    metric: str
    points_key: str
    deployment_label: str
    budget: Budget
    result_type: str
    answer: Answer = field(default_factory=lambda: Answer([], []))

    # --- the envelope ---------------------------------------------------------------------

    def read(self) -> Answer:
        result_type = self.result_type
        start = self.skip(0)
        top, end = self.members(start, {"data": self.data})
        if self.skip(end) != len(self.text):
            raise RowError("malformed", "the answer is not JSON (extra data after the document)")
        if top.get("status") != "success":
            error = top.get("error")
            detail = f": {one_line(error, 160)}" if isinstance(error, str) else ""
            raise RowError("malformed", f"status {one_line(top.get('status'), 40)!r}, not 'success'{detail}")
        data = top.get("data")
        if not isinstance(data, dict) or "result" not in data:
            raise RowError("malformed", "no data.result list in the answer")
        if data.get("resultType") != result_type:
            raise RowError(
                "malformed", f"resultType {one_line(data.get('resultType'), 40)!r}, expected {result_type!r}"
            )
        if data["result"] != "read":  # the result came before resultType: read it now
            self.results(data["result"])
        return self.answer

    def data(self, i: int) -> tuple[object, int]:
        found: dict[str, object] = {}

        def result(j: int) -> tuple[object, int]:
            if found.get("resultType") == self.result_type:
                return "read", self.results(j)
            return j, self.skip_value(j)  # read once resultType is known

        if self.text[i : i + 1] != "{":
            return self.decode(i)
        value, end = self.members(i, {"result": result}, found)
        return value, end

    def results(self, i: int) -> int:
        """Every entry of the `result` array starting at `i`; the index after it."""
        if self.text[i : i + 1] != "[":
            raise RowError("malformed", "no data.result list in the answer")
        i = self.skip(i + 1)
        if self.text[i : i + 1] == "]":
            return i + 1
        while True:
            i = self.entry(i) if self.answer.stopped is None else self.skip_value(i)
            i = self.skip(i)
            char = self.text[i : i + 1]
            if char == "]":
                return i + 1
            if char != ",":
                raise RowError("malformed", "the answer is not JSON (a result list that does not close)")
            i = self.skip(i + 1)

    # --- one entry: a series ------------------------------------------------------------------

    def entry(self, i: int) -> int:
        """One entry of `result` (a series, or a row rejected whole); the index after it."""
        start = i
        series = Series(self.metric, {})
        budget_before = self.budget.points
        try:
            self.budget.take(1)  # the entry itself: a series costs its points and one
            if self.text[i : i + 1] != "{":
                end = self.skip_value(i)
                problem: RowError | None = RowError("malformed", "a result entry without a metric label set")
            else:
                members, end = self.members(i, {self.points_key: lambda j: self.points(j, series)})
                problem = self.labels(series, members.get("metric"))
                if problem is None and members.get(self.points_key) != "read":
                    problem = RowError("malformed", f"a series without its {self.points_key!r}")
        except BudgetSpent as exc:
            self.budget.points = budget_before  # the series is not whole: none of it is kept
            self.answer.stopped = exc
            return self.skip_value(start)
        if problem is not None:
            self.budget.points = budget_before + 1
            self.answer.entries.append((problem, self.text[start : min(end, start + 200)]))
        else:
            self.answer.series.append(series)
        return end

    def labels(self, series: Series, labels: object) -> RowError | None:
        """Fill `series` from its label set; the reason the entry is not a series, if it is not."""
        if not isinstance(labels, dict):
            return RowError("malformed", "a result entry without a metric label set")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            return RowError("malformed", "a label name or value that is not a string")
        name = labels.get("__name__") or self.metric
        series.labels = {k: v for k, v in labels.items() if k not in ("__name__", *DEPLOYMENT_LABELS)}
        if name != self.metric:
            series.problem = RowError(
                "malformed", f"a series named {one_line(name, 80)!r} in the answer for {self.metric}"
            )
        elif not _METRIC_NAME.fullmatch(name) or not all(_LABEL_NAME.fullmatch(k) for k in labels if k != "__name__"):
            series.problem = RowError("malformed", "a metric or label name the Prometheus text format cannot carry")
        deployment = labels.get(self.deployment_label)
        if series.problem is None and not deployment:
            series.problem = RowError(
                "missing_field",
                f"no {self.deployment_label!r} label on the series (the deployment label; add one with relabel_configs)",
            )
        elif series.problem is None and (problem := deployment_problem(str(deployment))) is not None:
            series.problem = RowError("bad_value", f"{self.deployment_label} label: {problem}")
        series.deployment = deployment if series.problem is None else None
        series.labels.pop(self.deployment_label, None)
        return None

    def points(self, i: int, series: Series) -> tuple[str, int]:
        """The points at `i` (a list of `[ts, "v"]`, or one for an instant vector) into `series`:
        ('read', the index after them), or ('not a list', ...) when `values` is not a list."""
        if self.points_key == "value":
            return "read", self.point(i, series)
        if self.text[i : i + 1] != "[":
            return "not a list", self.skip_value(i)
        i = self.skip(i + 1)
        if self.text[i : i + 1] == "]":
            return "read", i + 1
        while True:
            i = self.skip(self.point(i, series))
            char = self.text[i : i + 1]
            if char == "]":
                return "read", i + 1
            if char != ",":
                raise RowError("malformed", "the answer is not JSON (a list of points that does not close)")
            i = self.skip(i + 1)

    def point(self, i: int, series: Series) -> int:
        index = series.size
        if self.budget.points % _CHECK_EVERY == 0:
            self.budget.check_time()
        self.budget.take(1)
        m = _POINT.match(self.text, i)
        if m is not None:
            stamp_text, value_text = m.group(1), m.group(2)
            end = m.end()
            try:
                stamp = float(stamp_text)
                problem = _stamp_problem(stamp) or _value_problem(value_text)
            except (ValueError, OverflowError):  # float() of an exponent that is too large is inf, not an error
                problem = RowError("malformed", "a point timestamp that is not a number")
            if problem is None:
                series.stamps.append(stamp)
                series.values.append(float(value_text))
                return end
            series.bad.append((index, problem, self.text[i:end]))
            return end
        value, end = self.decode(i)  # anything else: decoded, then told apart
        series.bad.append((index, _point_problem(value), self.text[i : min(end, i + 200)]))
        return end

    # --- JSON pieces --------------------------------------------------------------------------

    def members(
        self, i: int, handlers: dict[str, object], found: dict[str, object] | None = None
    ) -> tuple[dict[str, object], int]:
        """The object at `i`: `handlers[key](j) -> (value, end)` reads the value of `key` at `j`,
        every other value is decoded; (members, the index after the object)."""
        members = found if found is not None else {}
        if self.text[i : i + 1] != "{":
            value, _ = self.decode(i)
            raise RowError("malformed", f"the answer is a JSON {type(value).__name__}, not a Prometheus response")
        i = self.skip(i + 1)
        if self.text[i : i + 1] == "}":
            return members, i + 1
        while True:
            key, i = self.decode(i)
            if not isinstance(key, str):
                raise RowError("malformed", "the answer is not JSON (an object key that is not a string)")
            i = self.skip(i)
            if self.text[i : i + 1] != ":":
                raise RowError("malformed", "the answer is not JSON (no ':' after an object key)")
            i = self.skip(i + 1)
            handler = handlers.get(key)
            members[key], i = handler(i) if callable(handler) else self.decode(i)
            i = self.skip(i)
            char = self.text[i : i + 1]
            if char == "}":
                return members, i + 1
            if char != ",":
                raise RowError("malformed", "the answer is not JSON (an object that does not close)")
            i = self.skip(i + 1)

    def decode(self, i: int) -> tuple[object, int]:
        try:
            return _DECODER.raw_decode(self.text, i)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else one_line(exc, 120)
            raise RowError("malformed", f"the answer is not JSON ({reason})") from None

    def skip_value(self, i: int) -> int:
        """The index after the value at `i`, without keeping it."""
        return self.decode(i)[1]

    def skip(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i


def _stamp_problem(stamp: float) -> RowError | None:
    if not math.isfinite(stamp) or not _EARLIEST_S <= stamp < _LATEST_S:
        return RowError("bad_timestamp", f"a point timestamp {stamp:g} that is not a time in 2000-2100")
    return None


def _value_problem(value: str) -> RowError | None:
    """A value Prometheus writes: a decimal or `NaN` / `+Inf` / `-Inf` (not `1_000`, not `0x10`)."""
    if not value.isascii() or "_" in value:
        return RowError("malformed", "a point value that is not a number string")
    try:
        float(value)
    except ValueError:
        return RowError("malformed", "a point value that is not a number string")
    return None


def _point_problem(point: object) -> RowError:
    """Why a point that is not the usual `[number, "number"]` is rejected."""
    if not isinstance(point, list) or len(point) != 2:
        return RowError("malformed", "a point that is not [timestamp, value]")
    stamp, value = point
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return RowError("malformed", "a point timestamp that is not a number")
    if not isinstance(value, str) or not value or any(c.isspace() for c in value) or len(value) > 64:
        return RowError("malformed", "a point value that is not a number string")
    problem = _stamp_problem(float(stamp)) or _value_problem(value)
    return problem or RowError("malformed", "a point written in a form capplan does not read")


def read_answer(body: bytes, result_type: str, metric: str, deployment_label: str, budget: Budget) -> Answer:
    """The series of one answer (`matrix`: `values`, `vector`: `value`); RowError('malformed')
    when it is not a successful Prometheus answer of that type. The budget running out is not an
    error: `Answer.stopped` says so and the series read whole until then are kept."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RowError("malformed", "the answer is not JSON (not UTF-8)") from None
    points_key = "values" if result_type == "matrix" else "value"
    return _Reader(text, metric, points_key, deployment_label, budget, result_type).read()
