"""Read a pasted engine command line (`vllm serve ...`, SGLang's `launch_server`, `trtllm-serve ...`).

Every flag the engine's own parser accepts is accepted (capacity/engines/command_flags.py, generated
from the parsers by tools/engine_flags.py). Each flag is one of three things here:

* applied: it maps to a `capplan estimate` option (`-tp 2` -> tp=2, `--quantization fp8` -> weight dtype fp8);
* unsized: it moves memory capplan does not size (a draft model, CPU offload, a KV connector, ...):
  the estimate is flagged not modelled, the flag named;
* ignored: it does not change the memory or the batch (`--host`, `--port`, `--served-model-name`,
  `--api-key`, logging, `--enable-chunked-prefill`, ...): named in one note line.

A flag the engine does not know is a `CommandLineError` naming it, the engine and release, and the
closest flag, unless the command is of an older release than the table's (named by the image tag or by
`--engine-version`): the flags an engine has since retired (`--swap-space`, `--num-scheduler-steps`, ...)
are then taken as that release's, skipped and named in a note, so a working command is never refused. Values are read only for applied flags and are never echoed (an `--api-key`'s value, an
`HF_TOKEN=` prefix stay out of every message). Handled around the command: `NAME=value` environment
prefixes (and `env`), `\\` line continuations, `docker run [options] IMAGE [args]` (the image tag gives
the release; vLLM's image runs `vllm serve`), `python -m ...` launchers.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import PurePosixPath

from capacity.engine_constants import parse_version
from capacity.engines.command_flags import ENGINE_FLAGS
from capacity.engines.kinds import Engine


class CommandLineError(ValueError):
    """The command line cannot be read (one line, no values echoed)."""


@dataclass(frozen=True, slots=True)
class EngineCommand:
    """What a pasted engine command asks for, in `capplan estimate`'s terms."""

    engine: Engine
    release: str | None  # the release the command names (a docker image tag), else None
    model: str
    options: dict[str, object]  # capplan estimate parameter name -> value
    applied: tuple[str, ...]  # the flags applied, as spelled
    ignored: tuple[str, ...]  # flags that do not change capacity, as spelled
    unsized: tuple[str, ...]  # flags whose memory capplan does not size, as spelled
    notes: tuple[str, ...] = field(default=())  # how an applied flag was read, where it needs saying
    retired: tuple[str, ...] = field(default=())  # not in the table; taken as an older release's flags

    def unsized_text(self) -> str | None:
        """The not-modelled reason for the flags the named estimate options do not already flag."""
        return f"engine flags not sized: {', '.join(self.unsized)}" if self.unsized else None


# --quantization methods that set the weights' storage dtype (online quantization of a 16-bit checkpoint,
# or the format's own element size); any other method names the checkpoint's own quantization config,
# which the weight sizing reads from the checkpoint
_QUANTIZATION_DTYPES = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "fp8_e4m3": "fp8",
    "w8a8_fp8": "fp8",
    "modelopt": "fp8",
    "mxfp4": "mxfp4",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "experts_int8": "int8",
    "w8a8_int8": "int8",
    "int8": "int8",
}

# destination -> capplan estimate parameter, per engine; the value is converted by the parameter's kind
_INT, _FLOAT, _TEXT, _SWITCH = "int", "float", "text", "switch"
_OFF = "off"  # a `--disable-x` switch of an `enable_x` option (SGLang's --disable-radix-cache: prefix caching off)
_EPLB = "eplb"  # vLLM --eplb-config JSON (or --eplb-config.num_redundant_experts N): its redundant experts
_PRESENT = "present"  # on when given, whatever its value (SGLang's --lora-paths turns LoRA on)
_QUANTIZATION = "quantization"  # a --quantization method: the weight dtype it sets (`_QUANTIZATION_DTYPES`)
_LARGEST = "largest"  # a list of integers, read as its largest (SGLang's --cuda-graph-bs-decode 1 2 4 8: 8)


def _read_as(kind: str, *same_name: str, **renamed: str) -> dict[str, tuple[str, str]]:
    """Destinations read as `kind` into the `capplan estimate` option of the same name, or of the name given."""
    return {name: (name, kind) for name in same_name} | {dest: (name, kind) for dest, name in renamed.items()}


# destinations vLLM's and SGLang's parsers both have, with the same meaning
_VLLM_SGLANG_ALIKE: dict[str, tuple[str, str]] = {
    **_read_as(_TEXT, "dtype", "lora_target_modules", kv_cache_dtype="kv_dtype"),
    **_read_as(_QUANTIZATION, quantization="dtype"),
    **_read_as(_SWITCH, "enable_lora"),
    **_read_as(_INT, "max_lora_rank"),
    **_read_as(_FLOAT, "cpu_offload_gb"),
}
_APPLIED: dict[Engine, dict[str, tuple[str, str]]] = {
    Engine.VLLM: {
        **_VLLM_SGLANG_ALIKE,
        **_read_as(_INT, "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
            "kv_cache_memory_bytes", "max_loras", "max_cpu_loras",
            tensor_parallel_size="tp", pipeline_parallel_size="pp", data_parallel_size="dp",
            decode_context_parallel_size="dcp"),
        **_read_as(_FLOAT, "gpu_memory_utilization", "kv_offloading_size"),
        **_read_as(_SWITCH, "enforce_eager", "async_scheduling", "disable_custom_all_reduce", "language_model_only",
            "enable_prefix_caching", "fully_sharded_loras", "enable_expert_parallel"),
        **_read_as(_TEXT, "speculative_config", "kv_transfer_config", "kv_offloading_backend", "limit_mm_per_prompt",
            "lora_dtype", "hf_overrides"),
        **_read_as(_EPLB, eplb_config="redundant_experts"),
        **_read_as(_SWITCH, enable_extensible_kv_cache="extensible_kv_cache"),
    },
    Engine.SGLANG: {
        **_VLLM_SGLANG_ALIKE,
        # dp_size: attention DP only with --enable-dp-attention (`_sglang_replicas`)
        **_read_as(_INT, "max_total_tokens", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens", "hicache_size",
            tp_size="tp", pp_size="pp", context_length="max_model_len", max_running_requests="max_num_seqs",
            chunked_prefill_size="max_num_batched_tokens", page_size="block_size", max_loras_per_batch="max_loras",
            max_loaded_loras="max_cpu_loras", dp_size="dp", attn_dp_size="dp", ep_size="ep",
            ep_num_redundant_experts="redundant_experts"),
        **_read_as(_FLOAT, "hicache_ratio", mem_fraction_static="gpu_memory_utilization"),
        **_read_as(_SWITCH, "enable_dp_attention", "enable_hierarchical_cache", disable_cuda_graph="enforce_eager"),
        **_read_as(_INT, cuda_graph_max_bs_decode="cuda_graph_max_batch"),
        **_read_as(_LARGEST, cuda_graph_bs_decode="cuda_graph_max_batch"),
        **_read_as(_TEXT, "speculative_algorithm", "speculative_draft_model_path",
            json_model_override_args="hf_overrides"),
        **_read_as(_PRESENT, lora_paths="enable_lora"),
        **_read_as(_OFF, disable_radix_cache="enable_prefix_caching"),
        # KTransformers: with --kt-weight-path only --kt-num-gpu-experts experts per MoE layer stay on the GPU
        **_read_as(_TEXT, "kt_weight_path", "kt_method"),
        **_read_as(_INT, "kt_num_gpu_experts"),
    },
    Engine.TRTLLM: {
        **_read_as(_INT, tensor_parallel_size="tp", pipeline_parallel_size="pp", max_seq_len="max_model_len",
            max_batch_size="max_num_seqs", max_num_tokens="max_num_batched_tokens"),
        **_read_as(_FLOAT, free_gpu_memory_fraction="gpu_memory_utilization"),
    },
}

# flags that move the memory and that capplan does not size (beyond the named estimate options); SGLang's
# --enable-torch-compile moves nothing in 0.5.23's fraction, but in 0.5.10-0.5.13 it turned the piecewise prefill
# graphs off and with them their reserve (`_handle_piecewise_cuda_graph`), which is not modelled
_UNSIZED: dict[Engine, frozenset[str]] = {
    Engine.VLLM: frozenset({
        "prefill_context_parallel_size", "compilation_config",
        "cudagraph_capture_sizes", "max_cudagraph_capture_size", "swap_space", "num_gpu_blocks_override", "calculate_kv_scales", "kv_sharing_fast_prefill",
        "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_mode", "mm_encoder_tp_mode",
        "mm_processor_kwargs", "max_logprobs", "override_generation_config", "load_format",
        "pooler_config", "runner", "convert", "enable_sleep_mode", "config", "optimization_level",
    }),
    Engine.SGLANG: frozenset({
        "moe_a2a_backend", "attn_cp_size",
        "mamba_ssm_dtype", "max_mamba_cache_size", "mamba_full_memory_ratio",
        "load_format", "enable_mixed_chunk", "disaggregation_mode", "config", "enable_memory_saver",
        "enable_torch_compile", "torch_compile_max_bs", "piecewise_cuda_graph_max_tokens",
        # the per-phase graph settings beside the two sized ones (--disable-cuda-graph, the decode graphs' batch)
        "disable_decode_cuda_graph", "disable_prefill_cuda_graph", "cuda_graph_backend_decode",
        "cuda_graph_backend_prefill", "cuda_graph_max_bs_prefill", "cuda_graph_bs_prefill", "cuda_graph_config",
        "cuda_graph_max_seq_len_prefill", "cuda_graph_prefill_max_context",
    }),
    Engine.TRTLLM: frozenset({
        "extra_llm_api_options", "context_parallel_size", "moe_expert_parallel_size", "moe_cluster_parallel_size",
        "max_beam_width", "backend", "custom_module_dirs", "server_role", "disagg_cluster_uri",
        "metadata_server_config_file",
    }),
}


# an older release's spelling of a flag the table's release spells otherwise, as the table's (destination, arity),
# read where the command names that release: SGLang's decode CUDA-graph batch, split into -decode / -prefill in
# 0.5.14 (nargs "+" for the list in 0.4.6-0.5.13's server_args.py)
_RETIRED_SPELLINGS: dict[Engine, dict[str, tuple[str, str]]] = {
    Engine.SGLANG: {"--cuda-graph-max-bs": ("cuda_graph_max_bs_decode", "1"), "--cuda-graph-bs": ("cuda_graph_bs_decode", "+")},
}


@dataclass(frozen=True, slots=True)
class _CommandRules:
    """How one engine's server command reads: its names, what its flags mean for capacity, and the
    quirks of its parser and image."""

    label: str
    command: str
    applied: dict[str, tuple[str, str]]
    unsized: frozenset[str]
    model_positional: bool  # `vllm serve MODEL`, `trtllm-serve MODEL`; SGLang names it with --model-path only
    flexible_parser: bool  # vLLM's FlexibleArgumentParser: `_` for `-`, `--x.y` for `--x`, `-O3`
    image_runs_server: bool  # the engine's docker image starts its server (vllm/vllm-openai: `vllm serve`)

    @property
    def named(self) -> str:
        return f"{self.label} {self.command}"


_RULES = {
    Engine.VLLM: _CommandRules(
        "vLLM", "vllm serve", _APPLIED[Engine.VLLM], _UNSIZED[Engine.VLLM],
        model_positional=True, flexible_parser=True, image_runs_server=True,
    ),
    Engine.SGLANG: _CommandRules(
        "SGLang", "sglang.launch_server", _APPLIED[Engine.SGLANG], _UNSIZED[Engine.SGLANG],
        model_positional=False, flexible_parser=False, image_runs_server=False,
    ),
    Engine.TRTLLM: _CommandRules(
        "TensorRT-LLM", "trtllm-serve", _APPLIED[Engine.TRTLLM], _UNSIZED[Engine.TRTLLM],
        model_positional=True, flexible_parser=False, image_runs_server=False,
    ),
}

# docker run options that take a value (the rest are switches)
_DOCKER_VALUED = frozenset({
    "-e", "--env", "--env-file", "-v", "--volume", "-p", "--publish", "--name", "--gpus", "--ipc", "--shm-size",
    "--runtime", "--network", "--net", "-w", "--workdir", "--entrypoint", "--mount", "--device", "--ulimit",
    "-u", "--user", "-l", "--label", "--restart", "--cpus", "-m", "--memory", "--platform", "-h", "--hostname",
    "--add-host", "--security-opt", "--cap-add", "--cap-drop", "--pid", "--cpuset-cpus", "--log-driver",
    "--log-opt", "--memory-swap", "--tmpfs", "--pull", "--stop-signal", "--group-add", "--dns",
})
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_MODULES = {
    "vllm.entrypoints.openai.api_server": Engine.VLLM,
    "vllm.entrypoints.api_server": Engine.VLLM,
    "sglang.launch_server": Engine.SGLANG,
}
# (launcher, subcommand) -> engine; a None subcommand: the launcher alone, an optional `serve` after it
_LAUNCHERS = {("vllm", "serve"): Engine.VLLM, ("sglang", "serve"): Engine.SGLANG, ("trtllm-serve", None): Engine.TRTLLM}
# words in an image's name -> the engine it runs
_IMAGE_WORDS = (("vllm", Engine.VLLM), ("sglang", Engine.SGLANG), ("tensorrt-llm", Engine.TRTLLM),
                ("tensorrt_llm", Engine.TRTLLM), ("trtllm", Engine.TRTLLM))
_RELEASE_IN_TAG = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)")
_HUMAN_INT = re.compile(r"^(-?\d+(?:\.\d+)?)([kKmMgGtT]?)$")


def read_command(text: str, release: str | None = None) -> EngineCommand:
    """The engine command in `text`, read against the engine's flag table; `release` is the one the user
    names (`--engine-version`), used where the command itself names none."""
    tokens = _tokens(text)
    env = _env_prefix(tokens)
    allow_long = _long_length_override(env)
    settings = _lmcache_settings(env)
    tokens = _without_env(tokens)
    image_engine: Engine | None = None
    if tokens and PurePosixPath(tokens[0]).name in ("docker", "podman", "nerdctl"):
        args, image = _after_image(tokens)
        container = _container_env(tokens[: len(tokens) - len(args) - 1])
        allow_long = allow_long or _long_length_override([value for value in container if _ENV_ASSIGNMENT.match(value)])
        settings |= _lmcache_settings(_env_prefix(container))
        env = env + container
        tokens = args
        image_engine, tagged = _image_engine(image)
        release = tagged or release
    engine, args = _launcher(tokens, image_engine)
    command = _read_args(engine, release, args)
    if allow_long:
        command = replace(command, options={**command.options, "allow_long_max_model_len": True})
    if engine is Engine.VLLM and _v0_engine(env):
        command = replace(command, options={**command.options, "vllm_v0_engine": True})
    if settings and "kv_transfer_config" in command.options:
        command = replace(command, options={**command.options, **settings})
    return _sglang_replicas(command)


def _sglang_replicas(command: EngineCommand) -> EngineCommand:
    """SGLang's --dp-size without DP attention: router replicas, each a whole TP group sized alone (no attention
    DP ranks); --attn-dp-size and --dp-size with --enable-dp-attention are attention DP."""
    spelled = ("--dp-size", "--data-parallel-size", "--dp")
    if command.engine is not Engine.SGLANG or command.options.get("enable_dp_attention"):
        return command
    if not any(flag in spelled for flag in command.applied) or any("attn" in flag for flag in command.applied):
        return command
    options = {name: value for name, value in command.options.items() if name != "dp"}
    note = f"--dp-size {command.options['dp']} without DP attention: replicas, each sized alone"
    return replace(command, options=options, notes=(*command.notes, note))


# LMCache's settings from its environment (lmcache/v1/config.py: `LMCACHE_<NAME>` with its env_converter), as
# `capplan estimate` options: they size LMCacheConnectorV1's CPU and disk tiers and its GPU staging buffer
_LMCACHE_ENV = {
    "LMCACHE_MAX_LOCAL_CPU_SIZE": ("lmcache_max_local_cpu_size", float),
    "LMCACHE_MAX_LOCAL_DISK_SIZE": ("lmcache_max_local_disk_size", float),
    "LMCACHE_CHUNK_SIZE": ("lmcache_chunk_size", int),
}


def _lmcache_settings(assignments: list[str]) -> dict[str, object]:
    """The LMCache settings among `NAME=value` assignments (a value that is not a number is an error)."""
    out: dict[str, object] = {}
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        if name in _LMCACHE_ENV:
            option, kind = _LMCACHE_ENV[name]
            try:
                out[option] = kind(value)
            except ValueError:
                raise CommandLineError(f"{name} wants a number") from None
    return out


def _env_prefix(tokens: list[str]) -> list[str]:
    """The `NAME=value` assignments before the command (`env`, `sudo`, `exec`, `nohup` among them skipped), up to
    the first token that is neither: the environment the other readers take."""
    out: list[str] = []
    for token in tokens:
        if token in ("env", "sudo", "exec", "nohup"):
            continue
        if not _ENV_ASSIGNMENT.match(token):
            break
        out.append(token)
    return out


def _v0_engine(assignments: list[str]) -> bool:
    """Whether `VLLM_USE_V1=0` is among them (vLLM's envs.py: `bool(int(os.getenv("VLLM_USE_V1", "1")))`)."""
    values = [a.partition("=")[2].strip() for a in assignments if a.partition("=")[0] == "VLLM_USE_V1"]
    return bool(values) and values[-1] == "0"


def _container_env(options: list[str]) -> list[str]:
    """The `NAME=value` a container's `-e` / `--env` / `--env=` options set."""
    values = [value for flag, value in pairwise(options) if flag in ("-e", "--env")]
    return values + [option.split("=", 1)[1] for option in options if option.startswith("--env=")]


# the engines' variables that let max_model_len exceed the model's limit (vLLM config/model.py, SGLang environ.py)
_LONG_LENGTH_OVERRIDES = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")


def _long_length_override(assignments: list[str]) -> bool:
    """Whether a `NAME=value` assignment sets one of the long-length overrides to a true value ("1" or "true",
    as the engines read them)."""
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        if name in _LONG_LENGTH_OVERRIDES and value.strip().lower() in ("1", "true"):
            return True
    return False


def _tokens(text: str) -> list[str]:
    joined = re.sub(r"\\[ \t]*\r?\n", " ", text)
    try:
        return shlex.split(joined)
    except ValueError as exc:
        raise CommandLineError(f"cannot split the command line: {exc}") from None


def _without_env(tokens: list[str]) -> list[str]:
    """The command without `NAME=value` prefixes (and `env`, `sudo`, `exec`, `nohup` before or between them);
    the values are never kept."""
    i = 0
    while i < len(tokens) and (_ENV_ASSIGNMENT.match(tokens[i]) or tokens[i] in ("env", "sudo", "exec", "nohup")):
        i += 1
    return tokens[i:]


def _after_image(tokens: list[str]) -> tuple[list[str], str]:
    """`docker run [options] IMAGE [args]` -> (args, IMAGE)."""
    if len(tokens) < 2 or tokens[1] != "run":
        raise CommandLineError(f"only `{PurePosixPath(tokens[0]).name} run ...` is read, not `{tokens[0]} {tokens[1] if len(tokens) > 1 else ''}`")
    i = 2
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            return tokens[i + 1 :], token
        i += 2 if token in _DOCKER_VALUED else 1
    raise CommandLineError("the docker command names no image")


def _image_engine(image: str) -> tuple[Engine | None, str | None]:
    """The engine an image runs and the release its tag names (`vllm/vllm-openai:v0.33.0` -> vLLM, 0.33.0)."""
    name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    lowered = name.lower()
    engine = next((e for word, e in _IMAGE_WORDS if word in lowered), None)
    match = _RELEASE_IN_TAG.match(tag)
    return engine, match.group(1) if match else None


def _launcher(tokens: list[str], image_engine: Engine | None) -> tuple[Engine, list[str]]:
    """The engine and its arguments after the launcher (`vllm serve`, `python -m sglang.launch_server`, ...)."""
    if not tokens:
        if image_engine is not None and _RULES[image_engine].image_runs_server:
            return image_engine, []
        raise CommandLineError("no engine command found (vllm serve, python -m sglang.launch_server, trtllm-serve)")
    head = PurePosixPath(tokens[0]).name
    second = tokens[1] if len(tokens) > 1 else None
    if (head, second) in _LAUNCHERS:
        return _LAUNCHERS[(head, second)], tokens[2:]
    if (head, None) in _LAUNCHERS:
        return _LAUNCHERS[(head, None)], tokens[2:] if second == "serve" else tokens[1:]
    if _PYTHON.match(head):
        i = 1
        while i < len(tokens) and tokens[i].startswith("-") and tokens[i] != "-m":
            i += 1
        if tokens[i : i + 1] == ["-m"] and i + 1 < len(tokens) and tokens[i + 1] in _MODULES:
            return _MODULES[tokens[i + 1]], tokens[i + 2 :]
    if (
        image_engine is not None
        and _RULES[image_engine].image_runs_server
        and (tokens[0].startswith("-") or len(tokens) == 1 or tokens[1].startswith("-"))
    ):
        return image_engine, tokens  # the image's entrypoint is the server: these are its arguments
    raise CommandLineError(
        f"not an engine command: {head!r} (read: vllm serve, python -m vllm.entrypoints.openai.api_server, "
        "sglang serve, python -m sglang.launch_server, trtllm-serve, docker run IMAGE ...)"
    )


def flag_table(engine: Engine, release: str | None = None) -> dict[str, tuple[str, str]]:
    """The engine's flags as the table's release parses them, plus those a newer release the command names adds
    (`ENGINE_FLAGS[engine]["later"]`, tools/engine_flags.py --later)."""
    flags: dict[str, tuple[str, str]] = ENGINE_FLAGS[engine]["flags"]
    later: dict[str, dict[str, tuple[str, str]]] = ENGINE_FLAGS[engine].get("later", {})
    if not release or not later:
        return flags
    try:
        asked = parse_version(release)
    except ValueError:
        return flags
    added = [extra for first, extra in later.items() if parse_version(first) <= asked]
    return {**flags, **{option: entry for extra in added for option, entry in extra.items()}} if added else flags


def table_release(engine: Engine) -> str:
    release: str = ENGINE_FLAGS[engine]["release"]
    return release


def _lookup(engine: Engine, option: str, release: str | None = None) -> tuple[str, tuple[str, str]] | None:
    """The table's spelling and entry for `option` (vLLM also takes `_` for `-` and `--x.y` for `--x`), the flags of
    the release the command names included."""
    flags = flag_table(engine, release)
    candidates = [option]
    if _RULES[engine].flexible_parser:  # `_` for `-` in long options, `--x.y` / `-x.y` for `--x`
        base = option.split(".", 1)[0]
        candidates += [option.replace("_", "-"), base, base.replace("_", "-")] if option.startswith("--") else [base]
    for candidate in candidates:
        if candidate in flags:
            return candidate, flags[candidate]
    if ENGINE_FLAGS[engine]["abbrev"] and option.startswith("--"):  # argparse: a unique prefix of a long option
        prefix = candidates[-1]
        matches = sorted(flag for flag in flags if flag.startswith(prefix) and flag.startswith("--"))
        if len(matches) == 1:
            return matches[0], flags[matches[0]]
        if len(matches) > 1:
            raise CommandLineError(f"{option} is ambiguous for {_RULES[engine].label} {table_release(engine)}: "
                                   f"{', '.join(matches[:4])}{', ...' if len(matches) > 4 else ''}")
    return None


def _find_flag(
    engine: Engine, option: str, release: str | None, older: bool, notes: list[str]
) -> tuple[str, tuple[str, str]] | None:
    """The table's spelling and entry for `option` (`_lookup`); else a known older spelling of it
    (`_RETIRED_SPELLINGS`) where the command is of an older release or names none: the spelling itself says which
    releases ran it, and refusing it would refuse what the engine ran (where no release is named, a note says how it
    was read). None: not in the table. Raises where the table finds `option` ambiguous and nothing older explains it."""
    respelled = _RETIRED_SPELLINGS.get(engine, {}).get(option) if older or not release else None
    try:
        found = _lookup(engine, option, release)
    except CommandLineError:  # ambiguous in the table's release: a retired flag's prefix of newer ones
        if not (older or respelled):
            raise
        found = None
    if found is None and respelled is not None:
        found = option, respelled
        if not release:
            notes.append(
                f"{option} is a flag of older {_RULES[engine].label} releases ({table_release(engine)} spells it "
                f"--{respelled[0].replace('_', '-')}): read as that (name the release with --engine-version)"
            )
    return found


def _older_than_table(engine: Engine, release: str | None) -> bool:
    """The command is of a release before the flag table's (whose retired flags the table lacks)."""
    if not release:
        return False
    try:
        return parse_version(release) < parse_version(table_release(engine))
    except ValueError:
        return False


def _unknown(engine: Engine, option: str, release: str | None) -> CommandLineError:
    flags = flag_table(engine, release)
    close = difflib.get_close_matches(option, list(flags), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    named = f"{_RULES[engine].label} {table_release(engine)}"
    asked = "; a flag of an older release? name it with --engine-version" if not release else ""
    if release and not table_release(engine).startswith(release):
        asked = f"; the command names {release}"
    return CommandLineError(f"{option} is not a flag of {named}'s {_RULES[engine].command}{hint}{asked}")


def _vllm_optimization_level(args: list[str]) -> list[str]:
    """vLLM's `-O3`, `-O=3`, `-O 3` as `--optimization-level 3` (FlexibleArgumentParser.parse_args)."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("-O") and arg != "-O" and (i == 0 or args[i - 1] != "-O"):
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _read_args(engine: Engine, release: str | None, args: list[str]) -> EngineCommand:
    rules = _RULES[engine]
    if rules.flexible_parser:
        args = _vllm_optimization_level(args)
    applied_map = rules.applied
    options: dict[str, object] = {}
    applied: list[str] = []
    ignored: list[str] = []
    unsized: list[str] = []
    retired: list[str] = []
    older = _older_than_table(engine, release)  # an older release's retired flags are kept, not refused
    notes: list[str] = []
    positionals: list[str] = []
    model: str | None = None
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            positionals += args[i:]
            break
        if not token.startswith("-") or token == "-" or re.match(r"^-\d", token):
            positionals.append(token)
            continue
        option, eq, inline = token.partition("=")
        found = _find_flag(engine, option, release, older, notes)
        if found is None and older:
            retired.append(option)
            # its values, if it takes any: SGLang's server takes no positional argument, so every value up to the
            # next flag is the retired flag's (`--piecewise-cuda-graph-tokens 256 512` in 0.5.9); vLLM's takes the
            # model, so one value at most
            while not eq and i < len(args) and not (args[i].startswith("-") and not re.match(r"^-\d", args[i])):
                i += 1
                if rules.model_positional:
                    break
            continue
        if found is None:
            raise _unknown(engine, option, release)
        spelled, (dest, arity) = found
        values: list[str] = [inline] if eq else []
        if not eq and arity == "1":
            if i >= len(args):
                raise CommandLineError(f"{option} needs a value ({rules.named})")
            values = [args[i]]
            i += 1
        elif not eq and arity in ("?", "+", "*"):
            while i < len(args) and not (args[i].startswith("-") and not re.match(r"^-\d", args[i])):
                values.append(args[i])
                i += 1
                if arity == "?":
                    break
            if arity == "+" and not values:
                raise CommandLineError(f"{option} needs a value ({rules.named})")
        if dest in ("model", "model_path", "model_tag"):
            model = values[0] if values else model
            continue
        if dest == "help":
            raise CommandLineError(f"{option} asks the engine for its help; nothing to size")
        if dest in applied_map:
            name, kind = applied_map[dest]
            value = _value(option, spelled, dest, kind, values, notes)
            if value is not None:  # None: a part of a structured flag capacity does not read
                options[name] = value
            applied.append(option)
        elif dest in rules.unsized:
            unsized.append(option)
        else:
            ignored.append(option)
    if positionals and rules.model_positional and model is None:
        model = positionals.pop(0)
    if positionals:
        raise CommandLineError(
            f"unexpected argument #{len(args) - len(positionals) + 1} after the model "
            f"({rules.named} takes one model)"
        )
    if model is None:
        raise CommandLineError(f"the command names no model ({rules.named})")
    if retired:
        notes.append(
            f"not flags of {rules.label} {table_release(engine)}'s parser: "
            f"{', '.join(_unique(retired))}; taken as {release}'s own (since retired), not sized"
        )
    return EngineCommand(
        engine, release, model, options, tuple(applied), tuple(_unique(ignored)), tuple(_unique(unsized)),
        tuple(notes), tuple(_unique(retired)),
    )


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _value(option: str, spelled: str, dest: str, kind: str, values: list[str], notes: list[str]) -> object:
    """An applied flag's value, converted for its capplan option (None: nothing capacity reads in it)."""
    if kind == _SWITCH:
        if values:  # --flag=false, as some parsers accept
            return values[0].lower() not in ("0", "false", "no", "off")
        negative = spelled.startswith("--no-") or (spelled.startswith("--disable-") and not dest.startswith("disable"))
        return not negative
    if kind == _PRESENT:
        return True
    if kind == _OFF:  # present: off, unless given a false value (--disable-radix-cache=false)
        return bool(values) and values[0].lower() in ("0", "false", "no", "off")
    if kind == _LARGEST:
        try:
            return max(_human_int(v) for v in " ".join(values).replace(",", " ").split())
        except ValueError:
            raise CommandLineError(f"{option} wants integers") from None
    value = " ".join(values)
    if kind == _TEXT:
        return value
    if kind == _EPLB:
        return _redundant_experts(option, value)
    if kind == _QUANTIZATION:
        method = value.lower()
        if method in _QUANTIZATION_DTYPES:
            return _QUANTIZATION_DTYPES[method]
        notes.append(f"{option} {method}: the checkpoint's own quantization config sizes the weights")
        return "auto"
    try:
        if kind == _FLOAT:
            return float(value)
        return _human_int(value)
    except ValueError:
        raise CommandLineError(f"{option} wants a number") from None


def _redundant_experts(option: str, value: str) -> int | None:
    """EPLB's redundant experts from vLLM's --eplb-config (config/parallel.py EPLBConfig.num_redundant_experts):
    a JSON object, or the dotted `--eplb-config.num_redundant_experts N`; None for any other field."""
    _, dot, field_name = option.partition(".")
    if dot:
        raw: object = value if field_name.replace("-", "_") == "num_redundant_experts" else None
    else:
        try:
            parsed = json.loads(value)
        except ValueError:
            raise CommandLineError(f"{option} wants a JSON object") from None
        raw = parsed.get("num_redundant_experts", 0) if isinstance(parsed, dict) else None
        if raw is None:
            raise CommandLineError(f"{option} wants a JSON object")
    if raw is None:
        return None
    try:
        return int(str(raw))
    except ValueError:
        raise CommandLineError(f"{option}: num_redundant_experts wants a whole number") from None


def _human_int(value: str) -> int:
    """vLLM's human-readable integers: 32k = 32,000, 32K = 32,768 (m/M, g/G alike); plain integers as is."""
    if value.strip().lower() == "auto":  # vLLM's human_readable_int_or_auto (--max-model-len auto = -1)
        return -1
    match = _HUMAN_INT.match(value.strip())
    if match is None:
        raise ValueError(value)
    number, suffix = match.groups()
    if not suffix:
        return int(number)
    power = "kmgt".index(suffix.lower()) + 1
    base = 1000 if suffix.islower() else 1024
    return int(float(number) * base**power)
