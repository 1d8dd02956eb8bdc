"""The startup-log parser every engine dialect shares: segmenting a log into engine starts, reading
settings from command lines, config lines and argument dumps, combining values printed per worker,
and the checks that turn a segment into one observation (or reject its lines with the reason).

A *row* is a line capplan recognises (a memory-profiling line, "GPU KV cache size", the command
line, the engine config line...); every other line is ignored. A line whose key phrase is present
but whose numbers cannot be read (a truncated paste) is rejected. Recognised lines are grouped
into segments, one per engine start (a new banner / command / config line after measurements
starts a new one), and each segment becomes one observation, or all its lines are rejected with
the segment's reason (unknown model, unknown GPU, nothing measured, duplicate).

Values printed once per worker (TP ranks print their own "Model loading took") are combined the
way the engine does: overhead terms take the most loaded rank (max), the KV pool the tightest
rank (min). Settings come from the most authoritative line: the engine config line, then the
non-default args, then the command line, then anything else.

A `LogDialect` says what one engine's log prints in its own words (vllm_log.py, sglang_log.py,
trtllm_log.py); this module imports none of them: `log_dialects` is the registry that picks one.
The engine config line and the `non-default args:` dict are read in every log, as vLLM spells them.
"""

from __future__ import annotations

import ast
import datetime as dt
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from telemetry.common import FileContext, FileReport, checked_deployment_id, observation_id
from telemetry.normalize import (
    MAX_LINE_CHARS,
    DecodedText,
    RowError,
    canonical_dtype,
    human_int,
    null_text,
    parse_bool,
    parse_int,
    parse_number,
    parse_timestamp,
    size_bytes,
)
from telemetry.observation import field_problems, fingerprint, has_measurement
from telemetry.prometheus import Dedupe
from telemetry.speculative_log import SPECULATIVE_KEYS, fold_speculative, vllm_config_fields

NUM = r"(-?\d+(?:,\d{3})*(?:\.\d+)?)"
SIZE = NUM + r"\s*(GiB|GB|MiB|MB|KiB|KB|TiB|TB)\b"

# How repeated values of a field combine within one segment.
_MAX = frozenset(
    {
        "weights_bytes",
        "activation_peak_bytes",
        "non_torch_bytes",
        "cuda_graph_bytes",
        "cuda_graph_estimate_bytes",
        "peak_torch_bytes",
        "non_kv_bytes",
        "peak_kv_usage",
        "peak_requests_running",
        "peak_requests_waiting",
    }
)
_MIN = frozenset({"kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency"})
_INTERNAL = frozenset({"cuda_graph_estimate_bytes", "peak_torch_bytes", "gpu_name", "model"})

# Priorities of settings sources (higher wins).
P_FORCED, P_CONFIG, P_ARGS, P_COMMAND, P_BANNER, P_OTHER = 6, 5, 4, 3, 2, 1

Values = dict[str, Any]


def size_field(field_name: str) -> Callable[[re.Match[str]], Values]:
    def handler(m: re.Match[str]) -> Values:
        return {field_name: size_bytes(m.group(1), m.group(2), field_name)}

    return handler


def count_field(field_name: str, integer: bool = True) -> Callable[[re.Match[str]], Values]:
    def handler(m: re.Match[str]) -> Values:
        value = parse_int(m.group(1), field_name) if integer else parse_number(m.group(1), field_name)
        return {field_name: value}

    return handler


def text_field(field_name: str) -> Callable[[re.Match[str]], Values]:
    """The first group of the match, as the field's text (a name, a version)."""

    def handler(m: re.Match[str]) -> Values:
        return {field_name: m.group(1)}

    return handler


@dataclass(frozen=True, slots=True)
class Rule:
    """A key phrase and how to read its line. `strict`: the phrase present but the pattern not
    matching means a broken line (rejected); otherwise the rule just does not apply."""

    label: str
    trigger: str
    pattern: re.Pattern[str]
    read: Callable[[re.Match[str]], Values]
    strict: bool = True
    priority: int = P_OTHER
    marker: bool = False  # a line that starts an engine (version banner, config line)
    exclusive: bool = False  # when it matches, no later rule reads the line


def rx(text: str) -> re.Pattern[str]:
    """Rules read ASCII digits only (`\\d` would also match other scripts' digits)."""
    return re.compile(text, re.ASCII)


def failed_start(message: str) -> Callable[[re.Match[str]], Values]:
    return lambda m: {"startup_outcome": "failed", "startup_error": message}


def sized(label: str, trigger: str, before: str, field_name: str) -> Rule:
    """A rule that reads one size (`before` it, the pattern up to the number and its unit) into `field_name`."""
    return Rule(label, trigger, rx(before + SIZE), size_field(field_name))


def counted(label: str, trigger: str, before: str, field_name: str) -> Rule:
    """A rule that reads one integer (`before` it, the pattern up to the number) into `field_name`."""
    return Rule(label, trigger, rx(before + NUM), count_field(field_name))


def started_on(phrase: str) -> Rule:
    """The line by which an engine says it serves: `phrase` itself (plain words, no pattern characters)."""
    return Rule("started", phrase, rx(phrase), lambda m: {"startup_outcome": "started"}, strict=False)


# Failures, the server-up line and GPU names read the same in every engine's log.
OUT_OF_MEMORY = Rule(
    "out of memory",
    "out of memory",
    rx(r"CUDA out of memory|OutOfMemoryError"),
    failed_start("CUDA out of memory"),
    strict=False,
)
SERVER_UP = started_on("Application startup complete")
# GPU names: opportunistic (the word NVIDIA appears in many unrelated lines).
GPU_NAME_RULES: tuple[Rule, ...] = (
    Rule(
        "nvidia-smi",
        "|",
        rx(r"^\|\s+\d+\s+((?:NVIDIA|Tesla|Quadro)\b[^|]*?)\s+(?:On|Off)\s+\|"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule(
        "nvidia-smi -L",
        "UUID",
        rx(r"\bGPU\s*\d+:\s*((?:NVIDIA|Tesla|AMD)[^(]*?)\s*\(UUID"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule(
        "nvidia-smi csv",
        "MiB",
        rx(r"^\s*((?:NVIDIA|Tesla)[^,]+),\s*\d+\s*MiB\s*$"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule(
        "device name",
        "device_name=",
        rx(r"device_name=([A-Za-z0-9_\-]+?)(?:\.json|,|\s|$)"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule(
        "torch GPU",
        "Found GPU",
        rx(r"Found GPU\d+\s+(.+?)\s+which is of cuda capability"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule(
        "rocm GPU",
        "Marketing Name",
        rx(r"Marketing Name:\s*(AMD .+?)\s*$"),
        text_field("gpu_name"),
        strict=False,
    ),
    Rule("rocm GPU", "Card Series", rx(r"Card Series:\s*(.+?)\s*$"), text_field("gpu_name"), strict=False),
)
SHARED_RULES: tuple[Rule, ...] = (OUT_OF_MEMORY, SERVER_UP, *GPU_NAME_RULES)

_DIRECTIVE = re.compile(r"^#\s*(observed_at|scraped_at|deployment_id)\s*:\s*(.*?)\s*$", re.IGNORECASE)
_CONFIG = re.compile(r"Initializing an? (?:(V\d) )?LLM engine(?: \(v?([^)]+)\))? with config:")
_CONFIG_KEYS = {
    "model": "model",
    "served_model_name": "served_model_name",
    "dtype": "weight_dtype",
    "max_seq_len": "max_model_len",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching",
    "enforce_eager": "enforce_eager",
    "disable_custom_all_reduce": "disable_custom_all_reduce",
}
# engine settings that switch on what capplan does not size -> `feature:<name>` fields, folded into the
# observation's `unmodelled_features` (`_fold_features`); a value that says "off" (0, None, False) is no feature
FEATURE_KEYS = {
    "enable_lora": "feature:lora",
    "speculative_config": "feature:speculative",  # its method and tokens: `telemetry.speculative_log`
    "cpu_offload_gb": "feature:cpu_offload",
    "enable_dp_attention": "feature:dp_attention",
    "enable_expert_parallel": "feature:expert_parallel",  # vLLM: EP over tp x dp ranks
    "enable_ep_moe": "feature:expert_parallel",  # SGLang before --ep-size: EP over tp ranks
    "kv_transfer_config": "feature:kv_connector",
}
ARG_KEYS = {
    "model": "model",
    "model_tag": "model",
    "served_model_name": "served_model_name",
    "tensor_parallel_size": "tp",
    "tp": "tp",
    "pipeline_parallel_size": "pp",
    "pp": "pp",
    "data_parallel_size": "dp",
    "dp": "dp",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "dtype": "weight_dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "q": "quantization",
    "block_size": "block_size",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching",
    "enforce_eager": "enforce_eager",
    "disable_custom_all_reduce": "disable_custom_all_reduce",
    **FEATURE_KEYS,
    **SPECULATIVE_KEYS,
    "speculative_model": "spec:model",  # vLLM V0's draft and its tokens
    "num_speculative_tokens": "spec:num_speculative_tokens",
}
_SWITCHES = frozenset({"enforce_eager", "disable_custom_all_reduce"})  # settings a bare flag turns on


@dataclass(frozen=True, slots=True)
class LogDialect:
    """What one engine's startup log says in its own words; everything else is shared."""

    engine: str
    rules: tuple[Rule, ...]
    command: re.Pattern[str]  # a launch command line; group `cmd` is the program (and module / subcommand)
    image: re.Pattern[str]  # the engine's docker image (group 1: its version tag)
    arg_keys: dict[str, str]  # argument / flag name -> observation field
    boolean_flags: frozenset[str]  # flags that take no value
    namespace_markers: tuple[str, ...]  # "name=Class(key=value, ...)" settings dumps
    markers: tuple[str, ...]  # phrases only this engine's logs print (which dialect reads a file)
    max_fields: frozenset[str] = frozenset()  # fields whose repeats combine by max here (not by _MIN's min)
    last_fields: frozenset[str] = frozenset()  # fields whose last line wins (a pool sized twice: the final one)


@dataclass
class _Segment:
    index: int
    values: dict[str, list[tuple[Any, int, int]]] = field(default_factory=dict)  # field -> (value, priority, line)
    lines: dict[int, str] = field(default_factory=dict)  # accepted line number -> raw text
    measured: bool = False

    def add(self, number: int, raw: str, values: Values, priority: int) -> None:
        self.lines[number] = raw
        for key, value in values.items():
            if value is None:
                continue
            self.values.setdefault(key, []).append((value, priority, number))
        if has_measurement(values) or "cuda_graph_estimate_bytes" in values or "peak_torch_bytes" in values:
            self.measured = True

    def drop_line(self, number: int) -> None:
        self.lines.pop(number, None)
        for key in list(self.values):
            self.values[key] = [v for v in self.values[key] if v[2] != number]
            if not self.values[key]:
                del self.values[key]

    def resolve(
        self, max_fields: frozenset[str] = frozenset(), last_fields: frozenset[str] = frozenset()
    ) -> dict[str, tuple[Any, int]]:
        """field -> (value, line it came from)."""
        out: dict[str, tuple[Any, int]] = {}
        for key, candidates in self.values.items():
            if key in last_fields:
                value, _, line = max(candidates, key=lambda c: c[2])
            elif key in _MAX or key in max_fields:
                value, _, line = max(candidates, key=lambda c: c[0])
            elif key in _MIN:
                value, _, line = min(candidates, key=lambda c: c[0])
            elif key == "startup_outcome":
                value, _, line = max(candidates, key=lambda c: (c[0] == "failed", c[2]))
            else:
                value, _, line = max(candidates, key=lambda c: (c[1], -c[2]))
            out[key] = (value, line)
        if "max_concurrency" in out:  # keep the pair from the same line
            line = out["max_concurrency"][1]
            for value, _, number in self.values.get("max_concurrency_tokens", []):
                if number == line:
                    out["max_concurrency_tokens"] = (value, number)
        return out


def _convert(key: str, value: Any) -> Any:
    """A settings value as args/commands/configs spell it -> the observation's type."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    text = null_text(value)
    if text is None:
        return None
    text = text.strip("'\"")
    if key in ("tp", "pp", "dp", "ep", "max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens"):
        return human_int(text, key)
    if key == "gpu_memory_utilization":
        return parse_number(text, key)
    if key in ("weight_dtype", "kv_cache_dtype"):
        return canonical_dtype(text)
    if key == "quantization":
        return text.lower()
    if key == "enable_prefix_caching" or key in _SWITCHES:
        return parse_bool(text, key)
    if key.startswith("feature:"):
        return text.strip().lower() not in ("", "0", "0.0", "none", "null", "false", "{}")
    return text


def _fold_features(values: Values) -> Values:
    """The `feature:<name>` fields that are on, as the observation's sorted, comma-separated
    `unmodelled_features` (absent when none is on)."""
    values = fold_speculative(values)
    on = sorted({k.removeprefix("feature:") for k, v in values.items() if k.startswith("feature:") and v})
    out = {k: v for k, v in values.items() if not k.startswith("feature:")}
    if on:
        out["unmodelled_features"] = ",".join(on)
    return out


def _read_config(line: str, m: re.Match[str]) -> Values:
    values: Values = {}
    if m.group(1):
        values["engine_generation"] = m.group(1).lower()
    elif "an LLM engine" in m.group(0):
        values["engine_generation"] = "v0"
    if m.group(2):
        values["engine_version"] = m.group(2)
    tail = line[m.end() :]
    for key, target in _CONFIG_KEYS.items():
        km = re.search(r"(?<![\w.])" + key + r"=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,\s)]+)", tail)
        if km:
            values[target] = _convert(target, km.group(1))
    if not any(k in values for k in ("model", "tp", "max_model_len", "weight_dtype")):
        raise RowError("malformed", "engine config line without model, dtype, max_seq_len or tensor_parallel_size")
    return values


def _read_args_dict(text: str) -> Values:
    start = text.index("{", text.index("non-default args:"))
    try:
        args = ast.literal_eval(text[start:].strip())
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise RowError("malformed", "non-default args is not a complete Python dict (truncated line?)") from None
    if not isinstance(args, dict):
        raise RowError("malformed", "non-default args is not a dict")
    values = {ARG_KEYS[k]: _convert(ARG_KEYS[k], str(v)) for k, v in args.items() if k in ARG_KEYS}
    return _fold_features(values | vllm_config_fields(args.get("speculative_config")))


def _read_namespace(text: str, marker: str = "Namespace(", keys: dict[str, str] | None = None) -> Values:
    values: Values = {}
    body = text[text.index(marker) + len(marker) :]
    for key, target in (ARG_KEYS if keys is None else keys).items():
        km = re.search(r"(?<![\w.])" + key + r"=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|\[[^\]]*\]|[^,)\s]+)", body)
        if km:
            raw = km.group(1)
            if raw.startswith("["):
                raw = raw.strip("[]").split(",")[0]
            values[target] = _convert(target, raw)
    if "model" not in values:
        raise RowError("malformed", f"settings dump {marker}...) without the model (truncated line?)")
    return _fold_features(values)


def _read_command(text: str, m: re.Match[str], dialect: LogDialect) -> Values:
    try:
        tokens = shlex.split(text[m.start("cmd") :], comments=False, posix=True)
    except ValueError as exc:
        raise RowError("malformed", f"command line does not split ({exc}; truncated?)") from None
    values: Values = {}
    if tokens[0] == "docker":
        image = next((i for i, t in enumerate(tokens) if dialect.image.match(t)), None)
        if image is None:
            raise RowError("malformed", f"docker run without a {dialect.engine} image")
        version = dialect.image.match(tokens[image])
        if version and version.group(1):
            values["engine_version"] = version.group(1)
        args = tokens[image + 1 :]
        if args and args[0].startswith("python"):  # an image that takes the whole launch command
            args = args[3:]
    else:
        program = shlex.split(m.group("cmd"))
        args = tokens[len(program) :]
        if not program[0].startswith("python") and args and not args[0].startswith("-"):
            values["model"] = args.pop(0)  # `vllm serve MODEL`, `trtllm-serve MODEL`
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            continue
        name, eq, inline = token.lstrip("-").partition("=")
        key = name.replace("-", "_")
        if key in dialect.boolean_flags and not eq:
            if key in ("enable_prefix_caching", "no_enable_prefix_caching"):
                values["enable_prefix_caching"] = key == "enable_prefix_caching"
            elif dialect.arg_keys.get(key) in _SWITCHES:  # --enforce-eager (SGLang's --disable-cuda-graph) ...
                values[dialect.arg_keys[key]] = True
            elif key in FEATURE_KEYS:  # --enable-lora, --enable-dp-attention
                values[FEATURE_KEYS[key]] = True
            continue
        value: str | None = inline if eq else None
        if value is None and i < len(args) and not args[i].startswith("--"):
            value = args[i]
            i += 1
        if key in dialect.arg_keys and value is not None:
            values[dialect.arg_keys[key]] = _convert(dialect.arg_keys[key], value)
            values |= vllm_config_fields(value) if key == "speculative_config" else {}
    return _fold_features(values)


def _prefix_free(line: str) -> bool:
    """A physical line that continues a wrapped one: no log level / worker prefix at its start."""
    return not re.match(r"^\s*(\(|\[|INFO|DEBUG|WARNING|ERROR|CRITICAL|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} \d)", line)


@dataclass
class _Row:
    """What one line says: its values, how authoritative they are, whether it starts an engine."""

    values: Values
    priority: int
    marker: bool
    recognized: bool
    problem: RowError | None
    next_index: int  # the line after this row (a command line takes its continuation lines)


def _read_row(raw: str, lines: list[str], i: int, dialect: LogDialect) -> _Row:
    """One line of the log read by the first reader that recognises it (command line, config line,
    args dict, settings dump, then the dialect's rules in order)."""
    values: Values = {}
    priority = P_OTHER
    marker = False
    problem: RowError | None = None
    recognized = False
    command = dialect.command.match(raw)
    namespace = next((marker for marker in dialect.namespace_markers if marker in raw), None)
    config = _CONFIG.search(raw) if "LLM engine" in raw else None
    try:
        if command:
            recognized, marker, priority = True, True, P_COMMAND
            joined = raw
            while joined.rstrip().endswith("\\") and i < len(lines) and len(joined) <= MAX_LINE_CHARS:
                joined = joined.rstrip()[:-1] + " " + lines[i]
                i += 1  # continuation lines belong to this row
            values = _read_command(joined, dialect.command.match(joined) or command, dialect)
        elif config:
            recognized, marker, priority = True, True, P_CONFIG
            values = _read_config(raw, config)
        elif "non-default args:" in raw and "{" in raw:
            recognized, marker, priority = True, True, P_ARGS
            try:
                values = _read_args_dict(raw)
            except RowError:
                joined, extra = raw, 0
                while extra < 3 and i + extra < len(lines) and _prefix_free(lines[i + extra]):
                    joined += lines[i + extra].rstrip("\r\n")
                    extra += 1
                    try:
                        values = _read_args_dict(joined)
                        i += extra
                        break
                    except RowError:
                        continue
                else:
                    raise
        elif namespace:
            recognized, marker, priority = True, True, P_ARGS
            values = _read_namespace(raw, namespace, dialect.arg_keys)
        else:
            for rule in dialect.rules:
                if rule.trigger not in raw:
                    continue
                m = rule.pattern.search(raw)
                if m is None:
                    if rule.strict:
                        recognized = True
                        problem = problem or RowError("malformed", f"unreadable {rule.label} line (truncated?)")
                    continue
                recognized = True
                marker = marker or rule.marker
                priority = max(priority, rule.priority)
                try:
                    values.update(rule.read(m))
                except RowError as exc:
                    problem = problem or exc
                if rule.exclusive:
                    break
    except RowError as exc:
        problem = exc
    return _Row(values, priority, marker, recognized, problem, i)


def parse_engine_log(
    ctx: FileContext, text: DecodedText, report: FileReport, dedupe: Dedupe, dialect: LogDialect
) -> None:
    lines = text.lines
    report.lines_total = len(lines)
    segments = [_Segment(0)]
    observed: tuple[dt.datetime, str] | None = None
    deployment = ctx.deployment_id
    i = 0
    while i < len(lines):
        number, raw = i + 1, lines[i]
        i += 1
        if not raw.strip():
            report.lines_ignored += 1
            continue
        if report.rejects_unreadable(text, number, raw, len(raw), deployment):
            continue
        directive = _DIRECTIVE.match(raw.strip())
        if directive:
            try:
                if directive.group(1).lower() == "deployment_id":
                    deployment = checked_deployment_id(directive.group(2)) or deployment
                    report.lines_ignored += 1
                    continue
                observed = (parse_timestamp(directive.group(2), f"# {directive.group(1)}"), "comment")
            except RowError as exc:
                report.reject(number, exc, raw, deployment)
                continue
            segments[-1].add(number, raw, {}, P_OTHER)
            report.accepted += 1
            continue
        row = _read_row(raw, lines, i, dialect)
        i = row.next_index
        if not row.recognized:
            report.lines_ignored += 1
            continue
        if row.problem is not None:
            report.reject(number, row.problem, raw, deployment)
            continue
        values = row.values
        negatives = [k for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool) and v < 0]
        if negatives:
            report.reject(number, RowError("negative", f"negative {negatives[0].replace('_', ' ')}"), raw, deployment)
            continue
        if row.marker and segments[-1].measured:
            segments.append(_Segment(len(segments)))
        segments[-1].add(number, raw, values, row.priority)
        report.accepted += 1

    # The GPU is a fact about the machine, not one engine start: an nvidia-smi paste at the top
    # of a log names the GPU of every start in it.
    file_gpu = next((v[0][0] for s in segments if (v := s.values.get("gpu_name"))), None)
    for segment in segments:
        if segment.lines:
            if file_gpu is not None and "gpu_name" not in segment.values:
                segment.values["gpu_name"] = [(file_gpu, P_OTHER, min(segment.lines))]
            _finish(ctx, report, dedupe, segment, observed, deployment, dialect)


def _derive(values: Values) -> None:
    """Fields a log states only through others: the activation peak from torch's peak less the
    weights, the CUDA-graph memory from its estimate, the utilization from the requested bytes."""
    if values.get("activation_peak_bytes") is None and values.get("peak_torch_bytes") and values.get("weights_bytes"):
        values["activation_peak_bytes"] = values["peak_torch_bytes"] - values["weights_bytes"]
    if values.get("cuda_graph_bytes") is None:
        values["cuda_graph_bytes"] = values.get("cuda_graph_estimate_bytes")
    if (
        values.get("gpu_memory_utilization") is None
        and values.get("requested_memory_bytes")
        and values.get("total_gpu_memory_bytes")
    ):
        values["gpu_memory_utilization"] = round(values["requested_memory_bytes"] / values["total_gpu_memory_bytes"], 4)


def _finish(
    ctx: FileContext,
    report: FileReport,
    dedupe: Dedupe,
    segment: _Segment,
    observed: tuple[dt.datetime, str] | None,
    deployment: str,
    dialect: LogDialect,
) -> None:
    def reject_all(error: RowError) -> None:
        for number, raw in sorted(segment.lines.items()):
            report.reject(number, error, raw, deployment)
            report.accepted -= 1

    sidecar = ctx.sidecar
    for _ in range(4):
        resolved = segment.resolve(dialect.max_fields, dialect.last_fields)
        values: Values = {k: v for k, (v, _) in resolved.items()}
        model_raw = values.get("model")
        try:
            if sidecar.model_id:
                model_id = sidecar.model_id
            elif model_raw:
                model_id = ctx.models.resolve(model_raw)
            else:
                raise RowError("missing_field", "no model name in the log (add a deployment.yaml sidecar with model:)")
            gpu_raw = values.get("gpu_name")
            sku = ctx.gpus.resolve(gpu_raw) if gpu_raw else None
        except RowError as exc:
            reject_all(exc)
            return
        gpu_sku = sku.id if sku else sidecar.gpu_sku
        gpu_memory = sku.memory_total_bytes if sku else None
        if gpu_memory is None and sidecar.gpu_sku:
            gpu_memory = ctx.gpus.resolve(sidecar.gpu_sku).memory_total_bytes
        _derive(values)
        problems = field_problems(values, gpu_memory)
        if not problems:
            break
        for name, error in problems:
            if name in resolved:
                number = resolved[name][1]
                if number in segment.lines:
                    report.reject(number, error, segment.lines[number], deployment)
                    report.accepted -= 1
                    segment.drop_line(number)
            else:  # derived from several lines: drop the derived value
                values[name] = None
        if not segment.lines:
            return
    else:
        reject_all(RowError("malformed", "inconsistent values"))
        return
    if not has_measurement(values) and values.get("startup_outcome") != "failed":
        reject_all(RowError("missing_field", "no measured value in this engine start (only settings lines)"))
        return
    try:
        when, when_source = observed or ctx.default_time()
    except RowError as exc:
        reject_all(exc)
        return
    if sidecar.observed_at is not None and observed is None:
        when, when_source = sidecar.observed_at, "sidecar"
    first_line = min(segment.lines)
    observation = {
        "observation_id": observation_id(ctx.rel, first_line, str(segment.index)),
        "deployment_id": deployment,
        "source_kind": ctx.kind,
        "observed_at": when,
        "observed_at_source": when_source,
        "model_id": model_id,
        "model_name_raw": model_raw or sidecar.model_raw,
        "served_model_name": values.get("served_model_name"),
        "gpu_sku": gpu_sku,
        "gpu_name_raw": values.get("gpu_name") or sidecar.gpu_raw,
        "tp": values.get("tp") or sidecar.tp,
        "pp": values.get("pp") or sidecar.pp,
        "engine": sidecar.engine or dialect.engine,
        "engine_version": values.get("engine_version") or sidecar.engine_version,
        "startup_outcome": values.get("startup_outcome", "unknown"),
        **{k: v for k, v in values.items() if k not in _INTERNAL and k not in ("startup_outcome",)},
        "input_rows": len(segment.lines),
        "file": ctx.rel,
        "line": first_line,
    }
    fp = fingerprint({**observation, "segment": segment.index})
    first = dedupe.observation_seen(fp, (ctx.rel, first_line))
    if first is not None:
        reject_all(RowError("duplicate", f"same engine start as {first[0]} line {first[1]}"))
        return
    report.observations.append(observation)
