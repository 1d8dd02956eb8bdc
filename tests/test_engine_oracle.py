"""The engines' own code as the oracle: capplan's vLLM profile against vLLM 0.33.0's planner.

Every bundled catalog model x a GPU of each vLLM batch-default tier x the valid TP sizes of
{1, 2, 4, 8} x KV dtype {auto, fp8} x max_model_len {8,192, the model's limit}, at the GPU's
default max_num_batched_tokens (plus 2,048 and 16,384 for models with windowed or state layers):
capplan's layers become vLLM's own per-layer `KVCacheSpec`s, and vLLM's planning functions and
capplan's `estimate()` get the same KV memory per GPU (capplan's own budget for that GPU, given to
both as `kv_cache_memory_bytes`). Compared, case by case and exactly: the block size, the KV cache
groups, num_blocks, blocks one request of max_model_len takes, the printed "Maximum concurrency"
and "GPU KV cache size", whether the engine starts, the largest max_model_len that starts, the
in-flight tokens windowed layers are charged, and the per-sequence state page of hybrid models.
Also: vLLM's batch defaults per GPU and the KV dtypes the release accepts.

vLLM runs in its own venv (`tools/engine_oracle/setup_venv.sh` builds `.venv-oracle/`; `.ci/run`
calls it), once per session, as a subprocess: `tools/engine_oracle/vllm_oracle.py`. The inputs a
live GPU would give vLLM (the attention backend's block size, which GDN prefill kernel runs) are
set below from the 0.33.0 source, each with the function it comes from.

Without the oracle venv the group is skipped with the reason; under CI (CI=true) it fails.
The capplan side is `capplan_result()`: the one place to re-point when the capacity API moves.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from capacity.dtypes import KV_DTYPES as CAPPLAN_KV_DTYPES
from capacity.dtypes import serving_dtype
from capacity.hf_config import parse_config
from capacity.kv_bytes import kv_heads_per_gpu
from capacity.numeric import cdiv
from capacity.parallel import valid_tp_sizes
from capacity.spec import DeploymentSpec, GpuSku, KVKind, ModelSpec, SpecError
from tests.conftest import ROOT, require_oracle_venv, run_in_oracle_venv
from tests.estimating import estimate_model

pytestmark = pytest.mark.engine_oracle

CATALOG = ROOT / "models_registry" / "catalog"
RUNNER = ROOT / "tools" / "engine_oracle" / "vllm_oracle.py"
MARKER = "@@vllm-oracle@@ "
VLLM_VERSION = "0.33"  # capplan's release row the oracle checks
VLLM_WHEEL_VERSION = "0.33.0"

TP_SIZES = (1, 2, 4, 8)
KV_DTYPES = ("auto", "fp8")
SHORT_MAX_MODEL_LEN_TOKENS = 8192
WINDOWED_BATCHED_TOKENS = (2048, 16384)  # extra max_num_batched_tokens for windowed / state models
PP_GPU = "h100-sxm-80gb"  # PP = 2 cases (windowed, state and MLA models): the V2 runner keeps PP + 1 batches


@dataclass(frozen=True)
class OracleGpu:
    """A GPU as vLLM sees it: torch.cuda.get_device_name() and the compute capability."""

    sku: GpuSku
    device_name: str
    capability: tuple[int, int]


# One GPU per vLLM 0.33 batch-default tier (engine/arg_utils.py EngineArgs.get_batch_defaults):
# < 70 GiB (L4), >= 70 GiB but A100 (A100-80GB), >= 70 GiB (H100, H200), >= 160 GiB (B200), and GB10
# (capability 12.1: the small tier whatever its memory). GB10 is not in the catalog: its row is built
# here (DGX Spark, 128 GB unified memory; the total vLLM reads is an assumption, ~119.7 GiB).
CATALOG_GPUS = {
    "l4-24gb": ("NVIDIA L4", (8, 9)),
    "a100-sxm-80gb": ("NVIDIA A100-SXM4-80GB", (8, 0)),
    "h100-sxm-80gb": ("NVIDIA H100 80GB HBM3", (9, 0)),
    "h200-sxm-141gb": ("NVIDIA H200", (9, 0)),
    "b200-180gb": ("NVIDIA B200", (10, 0)),
}
GB10 = GpuSku(
    id="gb10-128gb",
    name="NVIDIA GB10",
    vendor="nvidia",
    memory_total_bytes=128_500_000_000,
    architecture="blackwell",
    gpus_per_node=1,
    aliases=("NVIDIA GB10", "GB10"),
)

# GDN hybrids (Qwen3-Next, Qwen3.5): align-mode prefill checkpoints exist only with the FlashInfer
# GDN prefill kernel (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py
# _resolve_gdn_prefill_backend: SM90, or SM100/SM120 with head_k_dim 128 and CUDA >= 13; the 0.33.0
# wheel is a CUDA 13 build), aligned to FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64 tokens.
GDN_FAMILIES = frozenset({"qwen3_next", "qwen3_5"})
# MambaMixer2 (Nemotron-H, Granite-4.0-H, Bamba, Falcon-H1): one prefill checkpoint block per request
# (model_executor/layers/mamba/mamba_mixer2.py get_kv_cache_spec); MambaMixer (Jamba): none.
MAMBA2_FAMILIES = frozenset({"nemotron_h", "granitemoehybrid", "bamba", "falcon_h1", "zamba2"})


def vllm_attention_block_size(model: ModelSpec, gpu: OracleGpu, kv_dtype: str) -> int:
    """The block size vLLM's CUDA platform starts from, before hybrid alignment.

    16 (CacheConfig.DEFAULT_BLOCK_SIZE) for FlashAttention / FlashInfer. MLA: the first backend of
    platforms/cuda.py _get_backend_priorities that supports the GPU and dtype, then
    Platform._preferred_block_size_for_backends: SM90 FLASH_ATTN_MLA (MultipleOf(16), no fp8) ->
    16, fp8 -> FLASHMLA (64); SM100 FLASHINFER_MLA ([32, 64]) -> 32; others TRITON_MLA -> 16."""
    if not model.is_mla:
        return 16
    major = gpu.capability[0]
    if major == 9:
        return 64 if kv_dtype.startswith("fp8") else 16
    if major == 10:
        return 32
    return 16


def vllm_state_inputs(model: ModelSpec, gpu: OracleGpu) -> tuple[int, int | None]:
    """(prefill checkpoint blocks per state layer, checkpoint alignment) on this GPU."""
    if model.model_type in MAMBA2_FAMILIES:
        return 1, None
    if model.model_type in GDN_FAMILIES:
        major, minor = gpu.capability
        flashinfer = (major, minor) == (9, 0) or major in (10, 12)
        return (1, 64) if flashinfer else (0, None)
    return 0, None


# --- the catalog --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogModel:
    repo_id: str
    spec: ModelSpec
    config: dict[str, Any]
    checkpoint_bytes: int | None


def catalog_models() -> list[CatalogModel]:
    from models_registry.sources.bundled import read_catalog_entries
    from models_registry.sources.common import checkpoint_bytes_from_index

    entries, _errors = read_catalog_entries(CATALOG)
    out = []
    for entry in entries:
        raw = json.loads(entry.config_path.read_text())
        try:
            spec = parse_config(raw, name=entry.repo_id)
        except ValueError:
            continue  # refused with a reason; the registry tests cover those
        checkpoint = checkpoint_bytes_from_index(entry.index_path) if entry.index_path else None
        out.append(CatalogModel(entry.repo_id, spec, raw, checkpoint))
    return out


def oracle_gpus() -> list[OracleGpu]:
    from models_registry.sources.gpu_catalog import load_gpu_skus

    skus = {g.id: g for g in load_gpu_skus(CATALOG / "gpus.yaml")}
    gpus = [OracleGpu(skus[gpu_id], name, cap) for gpu_id, (name, cap) in CATALOG_GPUS.items()]
    return [*gpus, OracleGpu(GB10, "NVIDIA GB10", (12, 1))]


def vllm_batch_tier_tokens(gpu: OracleGpu) -> int:
    """The API server's default max_num_batched_tokens on this GPU in vLLM 0.33 (checked against
    vLLM's own get_batch_defaults by test_batch_defaults)."""
    gib = 1 << 30
    total = gpu.sku.memory_total_bytes
    if total >= 160 * gib:
        return 16384
    if total >= 70 * gib and "a100" not in gpu.device_name.lower() and gpu.capability != (12, 1):
        return 8192
    return 2048


# --- one case: the deployment, capplan's answer, vLLM's input ------------------------------------


@dataclass(frozen=True)
class OracleCase:
    id: str
    model: CatalogModel
    gpu: OracleGpu
    tp: int
    kv_dtype: str
    max_model_len: int
    max_num_batched_tokens: int
    kv_memory_bytes: int
    capplan: dict[str, Any] = field(compare=False)
    pp: int = 1

    def deployment(self, **overrides: Any) -> DeploymentSpec:
        fields: dict[str, Any] = {
            "tp": self.tp,
            "pp": self.pp,
            "kv_dtype": self.kv_dtype,
            "engine": "vllm",
            "engine_version": VLLM_VERSION,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "kv_cache_memory_bytes": self.kv_memory_bytes,
        }
        fields.update(overrides)
        return DeploymentSpec(**fields)


def _estimate(model: CatalogModel, gpu: OracleGpu, deployment: DeploymentSpec, context_tokens: int) -> Any:
    return estimate_model(model, deployment, gpu=gpu.sku, context_tokens=context_tokens)


def capplan_result(
    model: CatalogModel, gpu: OracleGpu, deployment: DeploymentSpec, max_model_len: int
) -> dict[str, Any]:
    """capplan's answer for one deployment, in the oracle's terms. The one adapter to re-point when
    the capacity API changes; fields not (yet) in the Estimate come back as None and are not compared."""
    est = _estimate(model, gpu, deployment, max_model_len)
    pool = est.pool
    groups = sorted((str(g.kind), int(g.num_layers)) for g in pool.groups)
    # the per-sequence state of one state layer, as the estimate charges it (PP = 1: every layer)
    num_state_layers = sum(1 for layer in model.spec.layers if layer.kind is KVKind.STATE)
    state_page = None
    if num_state_layers and deployment.pp == 1:
        state_page = est.state_bytes_per_sequence_per_gpu // num_state_layers
    return {
        "block_size": est.block_size,
        "groups": groups,
        "num_blocks": est.num_blocks,
        "blocks_per_request": pool.sequence_units(max_model_len, max_model_len),
        "max_concurrency": est.max_concurrency,
        "kv_cache_size_tokens": est.kv_cache_tokens,
        "starts": getattr(est, "starts", None),
        "max_model_len_that_starts": getattr(est, "max_model_len_that_starts", None),
        "max_in_flight_tokens": getattr(pool, "max_in_flight_tokens", None),
        "state_page_size_bytes": state_page,
        "fits": est.fits,
    }


def _layers_json(model: CatalogModel, tp: int) -> list[dict[str, Any]]:
    """capplan's LayerKVSpecs as the oracle's per-rank layer list. Shared layers hold no cache but
    keep their place: pipeline stages split decoder layers, cached or not."""
    out: list[dict[str, Any]] = []
    for layer in model.spec.layers:
        kind, cache = layer.kind, layer.cache
        if kind is KVKind.SHARED:
            out.append({"kind": "shared"})
            continue
        if kind is KVKind.STATE:
            out.append(
                {
                    "kind": "state",
                    "state_shapes": [
                        [cdiv(cache.conv_state_elements, tp)],
                        [cdiv(cache.recurrent_state_elements, tp)],
                    ],
                    "state_dtypes": [_model_dtype(model), _ssm_dtype(model)],
                }
            )
            continue
        if kind is KVKind.MLA:
            out.append({"kind": "mla", "num_kv_heads": 1, "head_size": cache.kv_lora_rank + cache.rope_head_dim})
            continue
        entry: dict[str, Any] = {
            "kind": str(kind),
            "num_kv_heads": kv_heads_per_gpu(layer, tp),
            "head_size": cache.k_head_dim,
            "head_size_v": cache.v_head_dim,
        }
        if kind in (KVKind.SLIDING, KVKind.CHUNKED):
            entry["window"] = cache.window_tokens
        out.append(entry)
    return out


def _model_dtype(model: CatalogModel) -> str:
    return serving_dtype(model.spec)


def _ssm_dtype(model: CatalogModel) -> str:
    ssm = model.spec.mamba_ssm_cache_dtype
    return _model_dtype(model) if ssm == "auto" else ssm


def oracle_case_json(case: OracleCase) -> dict[str, Any]:
    model, gpu = case.model, case.gpu
    checkpoint_blocks, checkpoint_alignment = vllm_state_inputs(model.spec, gpu)
    layers = _layers_json(model, case.tp)
    for layer in layers:
        if layer["kind"] == "state":
            layer["prefill_checkpoint_blocks"] = checkpoint_blocks
    body: dict[str, Any] = {
        "id": case.id,
        "tp": case.tp,
        "pp": case.pp,
        "layers": layers,
        "model_dtype": _model_dtype(model),
        "kv_cache_dtype": case.kv_dtype,
        "block_size": vllm_attention_block_size(model.spec, gpu, case.kv_dtype),
        "max_model_len": case.max_model_len,
        "max_num_batched_tokens": case.max_num_batched_tokens,
        "async_scheduling": True,
        "available_memory_bytes": case.kv_memory_bytes,
        "prefill_checkpoint_alignment": checkpoint_alignment,
    }
    if model.config.get("quantization_config") is not None:
        # vLLM resolves `auto` from the checkpoint's quantization config itself (a declared FP8 KV cache)
        body["quantization_config"] = model.config["quantization_config"]
    limit = model.spec.context_limit_tokens
    if case.kv_dtype == "auto" and case.max_model_len < limit:
        body["auto_fit_limit"] = limit  # what `--max-model-len -1` would run with
    if model.spec.has_state_layers:
        # vLLM derives the state shapes and dtypes from the config itself (the model class).
        text = model.config.get("text_config") or {}
        body["hf_config"] = {**model.config, **text}
        body["architecture"] = (model.config.get("architectures") or [""])[0]
    return body


def _deployments(model: CatalogModel) -> Iterator[tuple[OracleGpu, int, int, str, int, int]]:
    """(GPU, TP, PP, KV dtype, max_model_len, batched tokens) for one model."""
    special = any(layer.kind in (KVKind.SLIDING, KVKind.CHUNKED, KVKind.STATE) for layer in model.spec.layers)
    limit = model.spec.context_limit_tokens
    lengths = sorted({min(SHORT_MAX_MODEL_LEN_TOKENS, limit), limit})
    for gpu in oracle_gpus():
        batched_set = {vllm_batch_tier_tokens(gpu)}
        if special and gpu.sku.id == PP_GPU:
            batched_set |= set(WINDOWED_BATCHED_TOKENS)
        for tp in valid_tp_sizes(model.spec, TP_SIZES, gpu.sku):
            for kv in KV_DTYPES:
                for max_len in lengths:
                    for batched in sorted(batched_set):
                        yield gpu, tp, 1, kv, max_len, batched
        if (special or model.spec.is_mla) and gpu.sku.id == PP_GPU:
            tps = valid_tp_sizes(model.spec, TP_SIZES, gpu.sku, pp=2)
            for max_len in lengths:
                if tps:
                    yield gpu, tps[-1], 2, "auto", max_len, vllm_batch_tier_tokens(gpu)


def build_cases() -> tuple[list[OracleCase], list[str]]:
    """Every catalog model x GPU tier x valid TP x KV dtype x max_model_len x batched tokens."""
    cases: list[OracleCase] = []
    not_compared: list[str] = []
    for model in catalog_models():
        for gpu, tp, pp, kv, max_len, batched in _deployments(model):
            case_id = f"{model.repo_id}|{gpu.sku.id}|tp{tp}|pp{pp}|{kv}|L{max_len}|B{batched}"
            probe = OracleCase(case_id, model, gpu, tp, kv, max_len, batched, 0, {}, pp)
            base = probe.deployment(kv_cache_memory_bytes=None)
            try:
                budget = _estimate(model, gpu, base, max_len).kv_budget_bytes_per_gpu
            except SpecError as exc:
                not_compared.append(f"{case_id}: {exc}")
                continue
            if budget <= 0:
                not_compared.append(f"{case_id}: weights leave no KV memory ({budget} B)")
                continue
            probe = OracleCase(case_id, model, gpu, tp, kv, max_len, batched, budget, {}, pp)
            try:
                answer = capplan_result(model, gpu, probe.deployment(), max_len)
            except SpecError as exc:
                not_compared.append(f"{case_id}: capplan refuses: {exc}")
                continue
            cases.append(OracleCase(case_id, model, gpu, tp, kv, max_len, batched, budget, answer, pp))
    return cases, not_compared


# --- the oracle run (one subprocess per session) -------------------------------------------------


@dataclass(frozen=True)
class OracleRun:
    cases: list[OracleCase]
    not_compared: list[str]
    vllm: dict[str, dict[str, Any]]
    version: str
    batch_defaults: dict[str, dict[str, Any]]
    kv_dtypes_accepted: dict[str, bool]
    sglang_defaults: dict[str, dict[str, Any]]


def run_oracle(request: dict[str, Any]) -> dict[str, Any]:
    proc = run_in_oracle_venv(RUNNER, request, timeout_s=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise AssertionError(f"the vLLM oracle failed (exit {proc.returncode}): " + " | ".join(tail))
    reply: dict[str, Any] = json.loads(lines[-1][len(MARKER) :])
    return reply


def load_oracle_run() -> OracleRun:
    """Build every case, ask vLLM once, keep both answers."""
    cases, not_compared = build_cases()
    dtypes = sorted(set(CAPPLAN_KV_DTYPES) | {"fp8_e4m3", "fp8_e5m2", "nvfp4", "int8_per_token_head"})
    request = {
        "cases": [oracle_case_json(c) for c in cases],
        "batch_defaults": [
            {
                "id": g.sku.id,
                "memory_bytes": g.sku.memory_total_bytes,
                "name": g.device_name,
                "capability": g.capability,
            }
            for g in oracle_gpus()
        ],
        "kv_cache_dtypes": dtypes,
        "sglang_defaults": [
            {"id": f"{g.sku.id}|tp{tp}", "memory_mib": mib, "tp": tp}
            for g, mib in smi_memory_mib().items()
            for tp in SGLANG_TP_SIZES
        ]
        + [
            {"id": f"{g.sku.id}|tp8|dp{dp}|mla{int(mla)}", "memory_mib": mib, "tp": 8, "attn_dp": dp, "mla": mla,
             "prefill_breakable": True}
            for g, mib in smi_memory_mib().items()
            for dp in SGLANG_ATTENTION_DP_SIZES
            for mla in (False, True)
        ]
        + [
            {"id": f"{g.sku.id}|tp{tp}|no-graphs", "memory_mib": mib, "tp": tp, "disable_cuda_graph": True}
            for g, mib in smi_memory_mib().items()
            for tp in SGLANG_TP_SIZES
        ]
        + [
            {"id": f"{g.sku.id}|tp{tp}|running{n}", "memory_mib": mib, "tp": tp, "max_running_requests": n,
             "prefill_breakable": True}
            for g, mib in smi_memory_mib().items()
            for tp in SGLANG_TP_SIZES
            for n in SGLANG_RUNNING_CAPS
        ]
        + [
            {"id": f"{g.sku.id}|tp{tp}|decode-graphs{n}", "memory_mib": mib, "tp": tp, "cuda_graph_max_bs_decode": n,
             "max_running_requests": 16, "prefill_breakable": True}
            for g, mib in smi_memory_mib().items()
            for tp in SGLANG_TP_SIZES
            for n in SGLANG_RUNNING_CAPS
        ],
    }
    reply = run_oracle(request)
    return OracleRun(
        cases=cases,
        not_compared=not_compared,
        vllm={r["id"]: r for r in reply["cases"]},
        version=reply["vllm_version"],
        batch_defaults={b["id"]: b for b in reply["batch_defaults"]},
        kv_dtypes_accepted=reply.get("kv_cache_dtypes_accepted", {}),
        sglang_defaults={r.get("id", "error"): r for r in reply.get("sglang_defaults", [])},
    )


@pytest.fixture(scope="session")
def oracle() -> OracleRun:
    require_oracle_venv()
    return load_oracle_run()


# --- comparisons ---------------------------------------------------------------------------------


def _padded(groups: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Groups as (kind, group size): vLLM pads every group to the largest one's layer count
    (_get_kv_cache_groups_uniform_page_size) and sizes a block by it."""
    size = max((n for _, n in groups), default=0)
    return sorted((kind, size) for kind, _ in groups)


def _vllm_groups(v: dict[str, Any]) -> list[tuple[str, int]]:
    """The first pipeline stage's groups (the whole model's at PP = 1): vLLM groups the whole model
    (get_global_kv_cache_groups) and projects the groups onto each stage
    (_project_kv_cache_groups_to_worker); capplan's pool is the most loaded stage's, the first."""
    first_stage = v.get("worker_groups", [v["groups"]])[0]
    return _padded([(g["kind"], g["num_layers"]) for g in first_stage])


def _same_float(ours: float, theirs: float) -> bool:
    """capplan rounds max_concurrency to 4 decimals (the contract); vLLM prints 2."""
    return math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=5e-5 + 1e-12)


def _q_block_size(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    return c["block_size"], v["block_size"]


def _q_groups(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    return _padded(c["groups"]), _vllm_groups(v)


def _q_starts(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    starts = c["starts"] if c["starts"] is not None else c["fits"]
    return starts, v["starts"]


def _only_started(get: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, Any]]) -> Any:
    def compare(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
        if not v.get("starts"):
            return None
        return get(c, v)

    return compare


def _q_max_len_that_starts(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    if v.get("starts") or c["max_model_len_that_starts"] is None or v.get("max_model_len_that_starts") is None:
        return None
    return c["max_model_len_that_starts"], v["max_model_len_that_starts"]


def _q_auto_fit(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    """capplan's largest max_model_len that starts against vLLM's auto-fit (`--max-model-len -1`,
    _auto_fit_max_model_len) up to the model's limit, for deployments that start below it."""
    if v.get("auto_fit_max_model_len") is None or c["max_model_len_that_starts"] is None:
        return None
    return c["max_model_len_that_starts"], v["auto_fit_max_model_len"]


def _q_in_flight(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    if c["max_in_flight_tokens"] is None or not any(k in ("sliding", "chunked") for k, _ in _vllm_groups(v)):
        return None
    return c["max_in_flight_tokens"], v["max_in_flight_tokens"]


def _q_state_page(c: dict[str, Any], v: dict[str, Any]) -> tuple[Any, Any] | None:
    """One state layer's state: vLLM's MambaSpec page before padding (the shapes and dtypes of the
    model class) against capplan's per-sequence state per state layer. The padded page shows in
    block_size and num_blocks."""
    if c["state_page_size_bytes"] is None or "state_page_size_bytes" not in v:
        return None
    return c["state_page_size_bytes"], v["state_page_size_bytes"]


QUANTITIES: dict[str, Callable[[dict[str, Any], dict[str, Any]], tuple[Any, Any] | None]] = {
    "block_size": _q_block_size,
    "groups": _q_groups,
    "num_blocks": _only_started(lambda c, v: (c["num_blocks"], v["num_blocks"])),
    "blocks_per_request": _only_started(lambda c, v: (c["blocks_per_request"], sum(v["blocks_per_request"]))),
    "max_concurrency": _only_started(lambda c, v: (c["max_concurrency"], v["max_concurrency"])),
    "kv_cache_size_tokens": _only_started(lambda c, v: (c["kv_cache_size_tokens"], v["kv_cache_size_tokens"])),
    "starts": _q_starts,
    "max_model_len_that_starts": _q_max_len_that_starts,
    "auto_fit_max_model_len": _q_auto_fit,
    "max_in_flight_tokens": _q_in_flight,
    "state_page_size_bytes": _q_state_page,
}


@dataclass
class Tally:
    compared: int = 0
    agree: int = 0
    disagreements: list[tuple[OracleCase, Any, Any]] = field(default_factory=list)


def tally(run: OracleRun, quantity: str) -> Tally:
    get = QUANTITIES[quantity]
    out = Tally()
    for case in run.cases:
        v = run.vllm[case.id]
        if "oracle_error" in v:
            continue
        pair = get(case.capplan, v)
        if pair is None:
            continue
        out.compared += 1
        ours, theirs = pair
        same = _same_float(ours, theirs) if isinstance(theirs, float) else ours == theirs
        if same:
            out.agree += 1
        else:
            out.disagreements.append((case, ours, theirs))
    return out


def _summary(quantity: str, t: Tally, limit: int = 12) -> str:
    by_model: dict[str, list[tuple[OracleCase, Any, Any]]] = defaultdict(list)
    for d in t.disagreements:
        by_model[d[0].model.repo_id].append(d)
    lines = [f"{quantity}: capplan agrees with vLLM {VLLM_WHEEL_VERSION} in {t.agree} of {t.compared} cases"]
    for model, rows in sorted(by_model.items(), key=lambda kv: -len(kv[1]))[:limit]:
        case, ours, theirs = rows[0]
        lines.append(f"  {model}: {len(rows)} cases, e.g. {case.id}: capplan {ours!r} vs vLLM {theirs!r}")
    return "\n".join(lines)


def test_oracle_is_vllm_0_33_and_answers_every_case(oracle: OracleRun) -> None:
    assert oracle.version == VLLM_WHEEL_VERSION
    assert len(oracle.cases) >= 1000, f"only {len(oracle.cases)} cases built ({len(oracle.not_compared)} not compared)"
    errors = [f"{i}: {r['oracle_error']}" for i, r in oracle.vllm.items() if "oracle_error" in r]
    assert not errors, f"{len(errors)} cases the oracle could not plan, e.g. {errors[:3]}"


@pytest.mark.parametrize("quantity", list(QUANTITIES))
def test_capplan_matches_vllm(oracle: OracleRun, quantity: str) -> None:
    t = tally(oracle, quantity)
    assert t.compared > 0, f"no case compares {quantity}"
    assert not t.disagreements, _summary(quantity, t)


def test_batch_defaults(oracle: OracleRun) -> None:
    """capplan's default max_num_batched_tokens / max_num_seqs per GPU against
    EngineArgs.get_batch_defaults (API server context) run for that GPU's memory and name."""
    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    wrong = []
    for gpu in oracle_gpus():
        expected = oracle.batch_defaults[gpu.sku.id]
        assert expected["api_server_max_num_batched_tokens"] == vllm_batch_tier_tokens(gpu)
        est = _estimate(model, gpu, DeploymentSpec(engine="vllm", engine_version=VLLM_VERSION), 8192)
        ours = (est.pool.max_num_batched_tokens, est.max_num_seqs)
        theirs = (expected["api_server_max_num_batched_tokens"], expected["max_num_seqs"])
        if ours != theirs:
            wrong.append(f"{gpu.sku.id}: capplan {ours} vs vLLM {theirs}")
    assert not wrong, "; ".join(wrong)


SGLANG_TP_SIZES = (1, 8)
SGLANG_ATTENTION_DP_SIZES = (1, 2, 8)
SGLANG_RUNNING_CAPS = (16, 128)  # --max-running-requests below and above the default decode graph batches


def smi_memory_mib() -> dict[OracleGpu, float]:
    """`nvidia-smi --query-gpu=memory.total` in MiB, what SGLang sizes its defaults by
    (utils/common.py get_nvgpu_memory_capacity); catalog GPUs that record it."""
    import yaml

    rows = yaml.safe_load((CATALOG / "gpus.yaml").read_text())
    rows = rows.get("gpus", rows) if isinstance(rows, dict) else rows
    mib = {row["id"]: row.get("memory_total_mib_smi") for row in rows}
    return {g: float(mib[g.sku.id]) for g in oracle_gpus() if mib.get(g.sku.id)}


def capplan_sglang_defaults(model: CatalogModel, gpu: OracleGpu, tp: int) -> dict[str, Any]:
    """capplan's SGLang profile defaults (the adapter to re-point, like capplan_result)."""
    est = _estimate(model, gpu, DeploymentSpec(tp=tp, engine="sglang"), 8192)
    from capacity.engines import sglang as sglang_profile

    max_bs = getattr(sglang_profile, "decode_cuda_graph_max_bs", None)
    return {
        "chunked_prefill_size": est.pool.max_num_batched_tokens,
        "mem_fraction_static": est.gpu_memory_utilization,
        "decode_cuda_graph_max_bs": max_bs(gpu.sku.memory_total_bytes, tp) if max_bs else None,
    }


def test_sglang_defaults(oracle: OracleRun) -> None:
    """capplan's SGLang 0.5.23 defaults against SGLang's own handle_gpu_memory_settings, per GPU
    and TP, for a text model without MLA (Llama-3.1-8B-Instruct)."""
    assert "error" not in oracle.sglang_defaults, oracle.sglang_defaults.get("error")
    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    wrong = []
    for gpu in smi_memory_mib():
        for tp in SGLANG_TP_SIZES:
            theirs = oracle.sglang_defaults[f"{gpu.sku.id}|tp{tp}"]
            ours = capplan_sglang_defaults(model, gpu, tp)
            for key, value in ours.items():
                if key == "mem_fraction_static" and theirs["prefill_cuda_graph_backend"] == "disabled":
                    # SGLang on this CPU host turns prefill CUDA graphs off (cuda_graph_hook.py), so its
                    # fraction lacks the reserve a CUDA host adds (reserve_for_graph_mb): not comparable.
                    continue
                if value is not None and value != theirs[key]:
                    wrong.append(f"{gpu.sku.id} tp{tp} {key}: capplan {value} vs SGLang {theirs[key]}")
    assert not wrong, "; ".join(wrong)


def test_sglang_dp_attention_fraction(oracle: OracleRun) -> None:
    """The default fraction with DP attention (`reserve_for_graph_mb`'s padding per attention-DP rank) against
    SGLang 0.5.23's own `handle_gpu_memory_settings`, at TP 8 with and without MLA, prefill graphs stated
    "breakable" as a CUDA host resolves them (so the oracle's reserve is the one capplan sizes)."""
    from capacity.engines import sglang as sg

    wrong, compared = [], 0
    for gpu, mib in smi_memory_mib().items():
        for dp in SGLANG_ATTENTION_DP_SIZES:
            for mla in (False, True):
                theirs = oracle.sglang_defaults[f"{gpu.sku.id}|tp8|dp{dp}|mla{int(mla)}"]
                assert theirs["prefill_cuda_graph_backend"] != "disabled", theirs
                ours = sg.mem_fraction_static(int(mib) * 2**20, 8, 1, mla=mla, attention_dp=dp)
                compared += 1
                if ours != theirs["mem_fraction_static"]:
                    wrong.append(f"{gpu.sku.id} dp{dp} mla={mla}: capplan {ours} vs SGLang {theirs['mem_fraction_static']}")
    assert compared >= 8 and not wrong, "; ".join(wrong)


def test_sglang_fraction_without_cuda_graphs(oracle: OracleRun) -> None:
    """`--disable-cuda-graph` (capplan: --enforce-eager, or the flag in --from-command) against SGLang 0.5.23's own
    `handle_gpu_memory_settings` with it set: neither the decode nor the prefill graphs are reserved for, per GPU and
    TP, and the estimate's fraction is that one."""
    from capacity.engines import sglang as sg

    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    wrong, moved = [], 0
    for gpu, mib in smi_memory_mib().items():
        for tp in SGLANG_TP_SIZES:
            theirs = oracle.sglang_defaults[f"{gpu.sku.id}|tp{tp}|no-graphs"]
            assert theirs["prefill_cuda_graph_backend"] == "disabled", theirs
            ours = sg.mem_fraction_static(int(mib) * 2**20, tp, 1, cuda_graphs=False)
            est = _estimate(model, gpu, DeploymentSpec(tp=tp, engine="sglang", enforce_eager=True), 8192)
            moved += ours != sg.mem_fraction_static(int(mib) * 2**20, tp, 1)
            if ours != theirs["mem_fraction_static"] or est.gpu_memory_utilization != ours:
                wrong.append(f"{gpu.sku.id} tp{tp}: capplan {ours} (estimate {est.gpu_memory_utilization}) vs SGLang "
                             f"{theirs['mem_fraction_static']}")  # fmt: skip
    assert moved and not wrong, "; ".join(wrong)


def test_sglang_fraction_with_a_running_request_cap(oracle: OracleRun) -> None:
    """`--max-running-requests N` (capplan: --max-num-seqs) below the default decode graph batch lowers it, and the
    reserve with it (0.5.22 on), against SGLang 0.5.23's own `handle_gpu_memory_settings` per GPU, TP and N; prefill
    graphs stated "breakable" as a CUDA host resolves them, so the oracle's reserve is the one capplan sizes."""
    from capacity.engines import sglang as sg

    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    wrong, moved = [], 0
    for gpu, mib in smi_memory_mib().items():
        for tp in SGLANG_TP_SIZES:
            for n in SGLANG_RUNNING_CAPS:
                theirs = oracle.sglang_defaults[f"{gpu.sku.id}|tp{tp}|running{n}"]
                assert theirs["prefill_cuda_graph_backend"] != "disabled", theirs
                est = _estimate(model, gpu, DeploymentSpec(tp=tp, engine="sglang", max_num_seqs=n), 8192)
                moved += est.gpu_memory_utilization != sg.mem_fraction_static(int(mib) * 2**20, tp, 1)
                if est.gpu_memory_utilization != theirs["mem_fraction_static"]:
                    wrong.append(f"{gpu.sku.id} tp{tp} running {n}: capplan {est.gpu_memory_utilization} vs SGLang "
                                 f"{theirs['mem_fraction_static']} (decode graphs up to {theirs['decode_cuda_graph_max_bs']})")  # fmt: skip
    assert moved and not wrong, "; ".join(wrong)


def test_sglang_fraction_with_the_decode_graphs_batch_given(oracle: OracleRun) -> None:
    """`--cuda-graph-max-bs-decode N` (capplan: --cuda-graph-max-batch) sets the decode graphs' batch the reserve
    counts, and a --max-running-requests below it does not lower a batch the user gave: against SGLang 0.5.23's own
    `handle_gpu_memory_settings` per GPU, TP and N, with 16 running requests."""
    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    wrong = []
    for gpu in smi_memory_mib():
        for tp in SGLANG_TP_SIZES:
            for n in SGLANG_RUNNING_CAPS:
                theirs = oracle.sglang_defaults[f"{gpu.sku.id}|tp{tp}|decode-graphs{n}"]
                assert theirs["decode_cuda_graph_max_bs"] == n, theirs
                spec = DeploymentSpec(tp=tp, engine="sglang", max_num_seqs=16, cuda_graph_max_batch=n)
                ours = _estimate(model, gpu, spec, 8192).gpu_memory_utilization
                if ours != theirs["mem_fraction_static"]:
                    wrong.append(f"{gpu.sku.id} tp{tp} decode graphs {n}: capplan {ours} vs {theirs['mem_fraction_static']}")
    assert not wrong, "; ".join(wrong)


def test_kv_dtypes_accepted(oracle: OracleRun) -> None:
    """The KV dtypes capplan's vLLM 0.33 profile accepts are the ones vLLM's CacheDType lists."""
    model = next(m for m in catalog_models() if m.repo_id == "meta-llama/Llama-3.1-8B-Instruct")
    gpu = oracle_gpus()[2]
    wrong = []
    for dtype, accepted in sorted(oracle.kv_dtypes_accepted.items()):
        try:
            _estimate(model, gpu, DeploymentSpec(kv_dtype=dtype, engine="vllm", engine_version=VLLM_VERSION), 8192)
            ours = True
        except SpecError as exc:
            # capplan says when vLLM accepts a dtype whose page it does not size, rather than guessing one
            ours = "does not model" in str(exc)
        if ours != accepted:
            wrong.append(
                f"{dtype}: capplan {'accepts' if ours else 'refuses'}, vLLM {'accepts' if accepted else 'refuses'}"
            )
    assert not wrong, "; ".join(wrong)


def iter_summaries(run: OracleRun) -> Iterator[str]:
    """Every quantity's tally, for a report (`.venv/bin/python tools/engine_oracle/report.py`)."""
    yield f"{len(run.cases)} cases compared against vLLM {run.version}; {len(run.not_compared)} not compared"
    reasons = Counter(line.split(": ", 1)[1].split(" (")[0][:60] for line in run.not_compared)
    for reason, n in reasons.most_common(5):
        yield f"  not compared: {n} x {reason}"
    for quantity in QUANTITIES:
        yield _summary(quantity, tally(run, quantity), limit=40)
    for gpu_id, row in run.batch_defaults.items():
        yield f"get_batch_defaults {gpu_id}: {row}"
    refused = sorted(d for d, ok in run.kv_dtypes_accepted.items() if not ok)
    yield f"KV dtypes vLLM refuses among those asked: {refused}"
    for key, row in run.sglang_defaults.items():
        yield f"SGLang defaults {key}: {row}"
