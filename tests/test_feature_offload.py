"""KV offload tiers and weight offload (issue 23 items 2 and 7), against the engines' own code and by hand.

Oracles: vLLM 0.33.0's `CPUOffloadingSpec` run on CPU in the engine-oracle venv (tools/engine_oracle/
vllm_offload_oracle.py); hand derivations from the source each rule cites (SGLang 0.5.23 pool_host/base.py and
kv_cache_builder.py, lmcache 0.5.6 gpu_connectors.py, TensorRT-LLM's host_cache_size, vLLM's uva.py); a
procurement plan whose every number is derived in its docstring.

Llama-3.1-8B's KV per token, used throughout: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes = 131,072 B.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from capacity.engines.command_line import read_command
from capacity.engines.kinds import Engine
from capacity.estimate import estimate
from capacity.explain import derivation
from capacity.features.offload import (
    ExpertOffload,
    HiCacheOffload,
    LMCacheOffload,
    OffloadSizing,
    TrtllmHostCache,
    UnsizedConnector,
    VllmNativeOffload,
    WeightOffload,
)
from capacity.features.offload_sizing import kv_offload_for
from capacity.offload_procurement import (
    CachedWorkload,
    CachePlacement,
    HostMemoryPrice,
    ReplicaShape,
    cheapest,
    tier_options,
)
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from tests.conftest import ROOT, require_oracle_venv, run_in_oracle_venv

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
PER_TOKEN = 131_072
GIB = 1 << 30


def _estimate(engine: str = "vllm", gpu: str = "l40s-48gb", **deployment: object):  # type: ignore[no-untyped-def]
    resolved = load_model(LLAMA)
    return estimate(
        resolved.spec,
        DeploymentSpec(engine=engine, **deployment),  # type: ignore[arg-type]
        gpu=find_gpu_sku(gpu),
        checkpoint_bytes=resolved.checkpoint_bytes,
    )


def _sizing(block_bytes: int, tp: int = 1, pp: int = 1, block_size: int = 16, is_mla: bool = False) -> OffloadSizing:
    return OffloadSizing(block_bytes // block_size, 100_000, block_bytes, block_size, tp, pp, is_mla)


# --- vLLM native offloading: CPUOffloadingSpec.num_chunks ---------------------------------------------------


@pytest.mark.engine_oracle
def test_vllm_native_chunks_match_vllms_own_spec() -> None:
    """Chunks = cpu_bytes_to_use // round_up(block bytes x world x blocks_per_chunk, 4096), by vLLM's own class:
    Llama-8B TP 1 (2 MiB blocks), TP 2 (1 MiB per rank, two copies), 4 blocks a chunk, and a block of 16,000 B
    that the page alignment pads (16 x 1,000 B: 32,000 B at TP 2 rounds up to 32,768)."""
    require_oracle_venv()
    cases = [
        {"worker_kv_bytes_per_block": 16 * PER_TOKEN, "tp": 1, "pp": 1, "blocks_per_chunk": 1, "gib": 40.0},
        {"worker_kv_bytes_per_block": 16 * PER_TOKEN // 2, "tp": 2, "pp": 1, "blocks_per_chunk": 1, "gib": 40.0},
        {"worker_kv_bytes_per_block": 16 * PER_TOKEN, "tp": 1, "pp": 1, "blocks_per_chunk": 4, "gib": 7.5},
        {"worker_kv_bytes_per_block": 16_000, "tp": 2, "pp": 1, "blocks_per_chunk": 1, "gib": 1.0},
    ]
    payload = [
        {**{k: v for k, v in c.items() if k != "gib"}, "tokens_per_block": 16, "cpu_bytes_to_use": c["gib"] * GIB}
        for c in cases
    ]
    reply = run_in_oracle_venv(ROOT / "tools" / "engine_oracle" / "vllm_offload_oracle.py", payload, 240)
    assert reply.returncode == 0, reply.stderr[-2000:]
    theirs = json.loads(reply.stdout.strip().splitlines()[-1])
    for case, answer in zip(cases, theirs, strict=True):
        block = int(case["worker_kv_bytes_per_block"])
        rule = VllmNativeOffload(float(case["gib"]), int(case["blocks_per_chunk"]))
        assert rule.chunks(_sizing(block, tp=int(case["tp"]))) == answer["num_chunks"], case
    assert [t["num_chunks"] for t in theirs][:2] == [20_480, 20_480]  # 40 GiB / 2 MiB either way


def test_vllm_native_tier_by_hand_and_the_gpu_pool_unchanged() -> None:
    """`--kv-offloading-size 40` on Llama-8B, TP 1: 40 GiB / (16 x 131,072 B) = 20,480 blocks = 327,680 tokens;
    the connector is built after the pool is sized (Worker.initialize_from_config), so the pool is the same."""
    plain = _estimate(gpu="h100-sxm-80gb")
    offloaded = _estimate(gpu="h100-sxm-80gb", kv_offload=VllmNativeOffload(40.0))
    assert offloaded.kv_cache_tokens == plain.kv_cache_tokens and offloaded.not_modelled is None
    gpu_tier, cpu_tier = offloaded.kv_tiers
    assert gpu_tier.tokens == plain.kv_cache_tokens
    assert (cpu_tier.tokens, cpu_tier.bytes_per_gpu) == (327_680, 40 * GIB)
    # a hit over PCIe Gen5 x16 (64 GB/s): 1,000 x 131,072 B / 64e9 B/s = 2.048 ms
    assert cpu_tier.load_ms_per_1k_tokens == pytest.approx(2.048)
    text = "\n".join(derivation(offloaded, load_model(LLAMA).spec))
    assert "327,680 tokens in 40.00 GiB of host RAM per GPU; a hit loads 1,000 tokens in 2.048 ms" in text


def test_an_mla_latent_at_tp_2_is_stored_once() -> None:
    """vLLM's replicated_layout (MLA, TP > 1, PP 1): one copy, so 1 GiB of 1 MiB blocks is 1,024 chunks, not 512."""
    rule = VllmNativeOffload(1.0)
    assert rule.chunks(_sizing(1 << 20, tp=2, is_mla=True)) == 1024
    assert rule.chunks(_sizing(1 << 20, tp=2, is_mla=False)) == 512


# --- LMCache ------------------------------------------------------------------------------------------------


def test_lmcache_buffer_comes_from_the_headroom_and_its_cpu_tier() -> None:
    """VLLMPagedMemGPUConnectorV2's gpu_buffer: [2, 32 layers, 256 tokens, 8 x 128] x 2 B = 33,554,432 B, built
    after vLLM 0.33 sized the pool (the pool does not shrink); the CPU tier: 5 GiB / 131,072 B = 40,960 tokens."""
    plain = _estimate()
    lm = _estimate(kv_offload=LMCacheOffload())
    assert lm.kv_cache_tokens == plain.kv_cache_tokens and lm.not_modelled is None
    assert any("0.03 GiB per GPU of GPU buffers" in n for n in lm.notes)
    assert LMCacheOffload().headroom_gpu_bytes(_sizing(16 * PER_TOKEN)) == 2 * 32 * 256 * 1024 * 2
    assert [(t.name, t.tokens) for t in lm.kv_tiers[1:]] == [("LMCache local CPU", 40_960)]
    assert lm.kv_tiers[1].gpu_bytes_per_gpu == 33_554_432
    disk = LMCacheOffload(cpu_gib=2.0, disk_gib=10.0).tiers(_sizing(16 * PER_TOKEN))
    assert [t.tokens for t in disk] == [16_384, 81_920]  # 2 GiB and 10 GiB over 131,072 B


# --- SGLang HiCache -----------------------------------------------------------------------------------------


def test_hicache_host_pool_and_its_staging_by_hand() -> None:
    """HostKVCache.__init__: ratio 2.0 -> int(device tokens x 2) + one page (page size 1); --hicache-size 30:
    30e9 // 131,072 = 228,881, + 1 = 228,882. The page_first staging (64 pages x 1 token x 131,072 B =
    8,388,608 B) comes off the budget before the pool is sized."""
    plain = _estimate("sglang")
    ratio = _estimate("sglang", kv_offload=HiCacheOffload())
    assert plain.kv_budget_bytes_per_gpu - ratio.kv_budget_bytes_per_gpu == 64 * PER_TOKEN
    device = ratio.kv_cache_tokens
    assert ratio.kv_tiers[1].tokens == device * 2 + 1 and ratio.kv_tiers[1].gpu_bytes_per_gpu == 64 * PER_TOKEN
    sized = _estimate("sglang", kv_offload=HiCacheOffload(size_gb=30))
    assert sized.kv_tiers[1].tokens == 228_882
    assert HiCacheOffload().pool_gpu_bytes(_sizing(16 * PER_TOKEN, is_mla=True)) == 0  # MLA pools: no MHA staging


# --- TensorRT-LLM host cache --------------------------------------------------------------------------------


def test_trtllm_host_cache_blocks() -> None:
    """host_cache_size 10e9 B in blocks of 32 tokens x 131,072 B = 4 MiB: 2,384 blocks = 76,288 tokens."""
    est = _estimate("trtllm", kv_offload=TrtllmHostCache(10_000_000_000))
    assert est.kv_tiers[1].tokens == 76_288 and est.not_modelled is None


# --- weights: --cpu-offload-gb ------------------------------------------------------------------------------


def test_weight_offload_shrinks_the_gpu_weights_up_to_the_decoder() -> None:
    """4 GiB per GPU leave the GPU (UVAOffloader stops at the byte limit); 100 GiB is capped at the decoder layers,
    leaving the embeddings and the head: 2 x 128,256 x 4,096 x 2 B = 2,101,346,304 B (+ the 8,192 B final norm)."""
    plain = _estimate()
    four = _estimate(weight_offload=WeightOffload(4.0))
    assert plain.weights_bytes_per_gpu - four.weights_bytes_per_gpu == 4 * GIB
    assert four.kv_budget_bytes_per_gpu > plain.kv_budget_bytes_per_gpu and four.not_modelled is None
    capped = _estimate(weight_offload=WeightOffload(100.0))
    assert capped.weights_bytes_per_gpu == pytest.approx(2_101_346_304 + 8_192, rel=0.01)
    assert _estimate(weight_offload=WeightOffload(None)).not_modelled  # on, amount unknown: flagged


def test_ktransformers_keeps_its_gpu_experts_and_runs_the_rest_on_the_cpu() -> None:
    """SGLang 0.5.23 kt_ep_wrapper.py `KTEPWrapperMethod.create_weights`: the GPU method creates
    `--kt-num-gpu-experts` experts per MoE layer. Qwen3-30B-A3B (48 MoE layers of 128 experts, each gate/up/down
    over hidden 2,048 and moe_intermediate 768) keeping 32: 48 x 96 x 3 x 2,048 x 768 x 2 B leave the GPU."""
    spec = load_model("Qwen/Qwen3-30B-A3B").spec
    gpu = find_gpu_sku("h100-sxm-80gb")
    d = DeploymentSpec(engine="sglang", gpu_memory_utilization=0.85, max_num_batched_tokens=4096)
    plain = estimate(spec, d, gpu=gpu)
    kt = estimate(spec, replace(d, expert_offload=ExpertOffload(32, "AMXINT8")), gpu=gpu)
    assert plain.weights_bytes_per_gpu - kt.weights_bytes_per_gpu == 48 * 96 * 3 * 2048 * 768 * 2
    assert kt.not_modelled is None and any("32 of 128 routed experts" in n for n in kt.notes)
    assert estimate(spec, replace(d, expert_offload=ExpertOffload(None)), gpu=gpu).not_modelled
    # the public KTransformers + SGLang log (sglang_public_measurements.yaml, H100, 0.85): "mem usage=16.41 GB",
    # "K size: 25.14 GB, V size: 25.14 GB", "#tokens: 549277" (SGLang's GB are GiB); the checkpoint's own bytes
    resolved = load_model("Qwen/Qwen3-30B-A3B")
    logged = estimate(spec, replace(d, expert_offload=ExpertOffload(32)), gpu=gpu, checkpoint_bytes=resolved.checkpoint_bytes)
    assert logged.weights_bytes_per_gpu / GIB == pytest.approx(16.41, rel=0.01)
    assert logged.kv_budget_bytes_per_gpu / GIB == pytest.approx(25.14 * 2, rel=0.01)
    assert logged.kv_cache_tokens == pytest.approx(549_277, rel=0.01)


def test_ktransformers_flags_from_a_pasted_command_and_the_cli() -> None:
    sg = read_command(
        "python -m sglang.launch_server --model Qwen/Qwen3-30B-A3B --kt-method AMXINT8 --kt-weight-path /m/int8 "
        "--kt-num-gpu-experts 32 --kt-cpuinfer 48"
    )
    assert sg.options == {"kt_method": "AMXINT8", "kt_weight_path": "/m/int8", "kt_num_gpu_experts": 32}
    assert not sg.unsized
    cli = CliRunner()
    run = cli.invoke(app, ["estimate", "Qwen/Qwen3-30B-A3B", "--gpu", "h100-sxm-80gb", "--engine", "sglang",
                           "--kt-weight-path", "/m/int8", "--kt-num-gpu-experts", "32", "--json"])  # fmt: skip
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["weights_bytes_per_gpu"] < 20 * GIB
    for bad, words in (
        (["--engine", "vllm"], "KTransformers' on SGLang"),
        (["--engine", "sglang", "--kt-num-gpu-experts", "-1"], "must be a number of experts >= 0"),
    ):
        failed = cli.invoke(app, ["estimate", "Qwen/Qwen3-30B-A3B", "--gpu", "h100-sxm-80gb", "--kt-weight-path", "/m", *bad])
        assert failed.exit_code == 2 and failed.stderr.count("\n") == 1 and words in failed.stderr, failed.output


# --- which offload a deployment's flags ask for ------------------------------------------------------------


def test_flags_choose_the_offload_and_wrong_engines_are_refused() -> None:
    assert kv_offload_for(Engine.VLLM, connector="LMCacheConnectorV1") == LMCacheOffload()
    assert isinstance(kv_offload_for(Engine.VLLM, connector="NixlConnector"), UnsizedConnector)
    assert kv_offload_for(Engine.VLLM, kv_offloading_size_gib=8.0) == VllmNativeOffload(8.0)
    assert isinstance(
        kv_offload_for(Engine.VLLM, kv_offloading_size_gib=8.0, kv_offloading_backend="lmcache"), UnsizedConnector
    )
    extra = {"cpu_bytes_to_use": 4 * GIB, "blocks_per_chunk": 2}
    assert kv_offload_for(Engine.VLLM, connector="OffloadingConnector", extra_config=extra) == VllmNativeOffload(4.0, 2)
    by_tokens = kv_offload_for(
        Engine.VLLM, connector="OffloadingConnector", extra_config={"cpu_bytes_to_use": GIB, "block_size": 64}
    )
    assert isinstance(
        by_tokens, VllmNativeOffload
    )  # 64 tokens a chunk over 16-token blocks: 4 blocks, as blocks_per_chunk 4
    assert by_tokens.chunks(_sizing(16 * PER_TOKEN)) == VllmNativeOffload(1.0, 4).chunks(_sizing(16 * PER_TOKEN)) == 128
    with pytest.raises(ValueError, match="native or lmcache"):
        kv_offload_for(Engine.VLLM, kv_offloading_size_gib=8.0, kv_offloading_backend="mooncake")
    assert kv_offload_for(Engine.SGLANG, hierarchical_cache=True, hicache_ratio=3.0) == HiCacheOffload(ratio=3.0)
    with pytest.raises(ValueError, match="SGLang"):
        kv_offload_for(Engine.VLLM, hierarchical_cache=True)
    with pytest.raises(ValueError, match="vLLM"):
        kv_offload_for(Engine.SGLANG, kv_offloading_size_gib=8.0)


def test_pasted_commands_apply_the_offload_flags() -> None:
    sg = read_command(
        f"python -m sglang.launch_server --model-path {LLAMA} --enable-hierarchical-cache --hicache-ratio 3"
    )
    assert sg.options == {"enable_hierarchical_cache": True, "hicache_ratio": 3.0} and not sg.unsized
    vl = read_command(f"vllm serve {LLAMA} --kv-offloading-size 64 --kv-offloading-backend native")
    assert vl.options == {"kv_offloading_size": 64.0, "kv_offloading_backend": "native"} and not vl.unsized


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from pipelines.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, "estimate", *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_cli_sizes_offload_and_refuses_bad_values_in_one_line() -> None:
    ok = _cli(LLAMA, "--gpu", "l40s-48gb", "--kv-offloading-size", "40", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["modelled"] is True and out["kv_tiers"][1]["tokens"] == 327_680
    for bad in (
        ["--kv-transfer-config", "{not json"],
        ["--enable-hierarchical-cache"],  # vLLM has no HiCache
        ["--kv-offloading-size", "-1"],
        ["--cpu-offload-gb", "-3"],
    ):
        run = _cli(LLAMA, "--gpu", "l40s-48gb", *bad)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, (bad, run.stderr)


# --- procurement: fewer GPUs plus host RAM ------------------------------------------------------------------

H100 = GpuSku(
    id="h100-test",
    name="NVIDIA H100 SXM5 80GB",
    vendor="nvidia",
    memory_total_bytes=80 * GIB,
    architecture="hopper",
    interconnect="NVLink4",
    interconnect_gbps=450,
    price_usd_per_gpu_hour=4.0,
)
# AWS us-east-1 on-demand list prices: r7i.large ($0.1323/h, 2 vCPU, 16 GiB) less c7i.large ($0.08925/h, 2 vCPU,
# 4 GiB), over the 12 GiB between them: $0.0035875 per GiB-hour, rounded to $0.0036
RAM = HostMemoryPrice(0.0036, "AWS us-east-1 on-demand r7i.large - c7i.large, per GiB of the difference")
SHAPE = ReplicaShape(H100, 1, 400_000, PER_TOKEN, PER_TOKEN, 20_000.0)


def _workload(slo_ms: float) -> CachedWorkload:
    return CachedWorkload(
        requests_per_second=4.0,
        concurrency=64,
        prompt_tokens=8_000,
        output_tokens=200,
        hit_rate=0.9,
        cached_tokens=2_000_000,
        ttft_slo_ms=slo_ms,
    )


def test_offload_beats_more_gpus_at_a_90_percent_hit_rate_and_a_200_ms_ttft() -> None:
    """Llama-8B on H100s ($4.00/GPU-h), one GPU a replica, a 400,000-token pool, prefill 20,000 tokens/s.
    Workload: 4 req/s, 64 in flight, 8,000-token prompts (hit rate 0.9: 7,200 cached, 800 new), 200 out,
    2,000,000 tokens of reused prefixes, TTFT SLO 200 ms. Tokens an hour: 4 x 8,200 x 3,600 = 118,080,000.

    * more GPUs: (64 x 8,200 + 2,000,000) / 400,000 = 2,524,800 / 400,000 -> 7 replicas = $28.00/h;
      TTFT 800 / 20,000 = 40 ms; $28 / 118.08 = $0.23713 per million tokens.
    * offload: 524,800 / 400,000 -> 2 replicas = $8.00/h, plus 2,000,000 x 131,072 B = 244.140625 GiB of host
      RAM x $0.0036 = $0.87890625/h: $8.87890625/h; a hit loads 7,200 x 131,072 B over PCIe Gen5 (64 GB/s) in
      14.7456 ms (recompute: 7,200 / 20,000 = 360 ms), TTFT 14.7456 + 40 = 54.7456 ms; $0.075194 per M tokens.
    * recompute: 2 replicas, $8.00/h, TTFT 8,000 / 20,000 = 400 ms: over the SLO.
    """
    options = {o.placement: o for o in tier_options(_workload(200.0), SHAPE, RAM)}
    gpu, host, none = options[CachePlacement.GPU], options[CachePlacement.HOST], options[CachePlacement.NONE]
    assert (gpu.replicas, gpu.usd_per_hour, gpu.ttft_ms) == (7, 28.0, pytest.approx(40.0))
    assert gpu.usd_per_million_tokens == pytest.approx(28.0 / 118.08)
    assert (host.replicas, host.host_gib) == (2, 244.140625)
    assert host.usd_per_hour == pytest.approx(8.87890625)
    assert host.ttft_ms == pytest.approx(54.7456)
    assert host.usd_per_million_tokens == pytest.approx(8.87890625 / 118.08)
    assert (none.replicas, none.ttft_ms, none.meets_slo) == (2, pytest.approx(400.0), False)
    chosen = cheapest(tuple(options.values()))
    assert chosen is not None and chosen.placement is CachePlacement.HOST
    assert chosen.usd_per_million_tokens < gpu.usd_per_million_tokens / 3


def test_a_tighter_slo_buys_the_gpus_and_no_ram_price_means_no_offload() -> None:
    """At 50 ms the offload's 54.7456 ms misses and the GPU-only 40 ms is chosen; without a host RAM price the
    host tier is not an option at all."""
    chosen = cheapest(tier_options(_workload(50.0), SHAPE, RAM))
    assert chosen is not None and chosen.placement is CachePlacement.GPU and chosen.replicas == 7
    assert CachePlacement.HOST not in {o.placement for o in tier_options(_workload(200.0), SHAPE, None)}


def test_a_hit_slower_than_recompute_is_never_bought() -> None:
    """A prefill of 2,000,000 tokens/s recomputes 7,200 tokens in 3.6 ms, faster than the 14.7456 ms load."""
    fast = ReplicaShape(H100, 1, 400_000, PER_TOKEN, PER_TOKEN, 2_000_000.0)
    host = next(o for o in tier_options(_workload(200.0), fast, RAM) if o.placement is CachePlacement.HOST)
    assert not host.meets_slo and "slower than recomputing" in host.reason


def test_the_workloads_file_prices_host_memory_with_its_source() -> None:
    from recommendations.workloads import parse_workloads

    priced = parse_workloads(
        {"workloads": [], "procurement": {"host_memory": {"usd_per_gib_hour": 0.0036, "source": RAM.source}}}, None
    )
    assert priced.procurement.host_memory == RAM and not priced.errors
    assert parse_workloads({"workloads": []}, None).procurement.host_memory is None
    for bad in (
        {"usd_per_gib_hour": 0.0036},
        {"usd_per_gib_hour": -1, "source": "x"},
        {"usd_per_gib_hour": "0.1", "source": "x"},
    ):
        errors = parse_workloads({"workloads": [], "procurement": {"host_memory": bad}}, None).errors
        assert errors and errors[0][0] == "<procurement>", bad


def test_capplan_offload_compares_the_three_options_on_a_catalog_gpu() -> None:
    """On a catalog H100 SXM (PCIe Gen5 to the host: 64 GB/s) with the performance model's prefill: the host
    option's TTFT is the GPU option's plus the load, 7,200 x 131,072 B / 64e9 B/s = 14.7456 ms; its RAM is
    2,000,000 x 131,072 B = 244.140625 GiB; the option chosen is the cheapest of those within the SLO."""
    from typer.testing import CliRunner

    from pipelines.cli import app

    args = ["offload", LLAMA, "--gpu", "h100-sxm-80gb", "--concurrency", "64", "--input-len", "8000"]
    args += ["--output-len", "200", "--request-rate", "4", "--hit-rate", "0.9", "--cached-tokens", "2000000"]
    args += ["--ttft-ms", "200", "--host-ram-usd-per-gib-hour", "0.0036", "--host-ram-source", RAM.source, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    rows = {row["placement"]: row for row in out["options"]}
    assert rows["host"]["ttft_ms"] - rows["gpu"]["ttft_ms"] == pytest.approx(14.7456, abs=2e-3)
    assert rows["host"]["host_gib"] == 244.140625
    meeting = [row for row in out["options"] if row["meets_slo"]]
    assert out["chosen"] == min(meeting, key=lambda row: row["usd_per_hour"])["placement"]
    for bad in (["--hit-rate", "1.5"], ["--host-ram-source", " "]):
        run = CliRunner().invoke(app, [*args[:-1], *bad])
        assert run.exit_code == 2 and len(run.stderr.strip().splitlines()) == 1, (bad, run.output)


def test_a_pasted_command_reads_lmcaches_environment() -> None:
    """LMCACHE_MAX_LOCAL_CPU_SIZE=20 (GiB): 20 x 2**30 / 131,072 B = 163,840 tokens; LMCACHE_CHUNK_SIZE=512: a GPU
    buffer of 512 x 131,072 B = 64 MiB. From a prefix and from `docker run -e`; without a connector, not read."""
    config = '\'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\''
    line = f"LMCACHE_MAX_LOCAL_CPU_SIZE=20 LMCACHE_CHUNK_SIZE=512 vllm serve {LLAMA} --kv-transfer-config {config}"
    docker = f"docker run --gpus all -e LMCACHE_MAX_LOCAL_CPU_SIZE=20 -e LMCACHE_CHUNK_SIZE=512 vllm/vllm-openai:v0.33.0 --model {LLAMA} --kv-transfer-config {config}"
    for text in (line, docker):
        options = read_command(text).options
        assert (options["lmcache_max_local_cpu_size"], options["lmcache_chunk_size"]) == (20.0, 512), text
    assert "lmcache_chunk_size" not in read_command(f"LMCACHE_CHUNK_SIZE=512 vllm serve {LLAMA}").options
    out = _cli("--from-command", line, "--gpu", "l40s-48gb", "--json")
    assert out.returncode == 0, out.stderr
    contract = json.loads(out.stdout)
    assert contract["kv_tiers"][1]["tokens"] == 163_840
    assert any("0.06 GiB per GPU of GPU buffers" in n for n in contract["notes"])  # 64 MiB = 0.0625 GiB


def test_lmcache_turns_the_hybrid_manager_off_and_the_native_connector_does_not() -> None:
    """vLLM 0.33 `VllmConfig`: a connector that is not `SupportsHMA` (LMCacheConnectorV1) turns the hybrid KV
    cache manager off, so Gemma 3's sliding layers become full attention (`unify_hybrid_kv_cache_specs`): one
    group of all 48 layers, num_blocks = budget // (16 x KV bytes per token); OffloadingConnector supports HMA and
    keeps the pool. A hybrid SSM model does not start without it."""
    resolved = load_model("google/gemma-3-12b-it")
    gpu = find_gpu_sku("h100-sxm-80gb")

    def run(kv_offload: object) -> object:
        deployment = DeploymentSpec(max_model_len=32_768, kv_offload=kv_offload)  # type: ignore[arg-type]
        return estimate(resolved.spec, deployment, gpu=gpu, checkpoint_bytes=resolved.checkpoint_bytes)

    plain, lm, native = run(None), run(LMCacheOffload()), run(VllmNativeOffload(1.0))
    assert lm.num_blocks == lm.kv_budget_bytes_per_gpu // (16 * lm.kv_bytes_per_token_per_gpu)  # type: ignore[attr-defined]
    assert lm.num_blocks < plain.num_blocks == native.num_blocks  # type: ignore[attr-defined]
    qwen_next = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    with pytest.raises(SpecError, match="fails at startup"):
        estimate(qwen_next.spec, DeploymentSpec(tp=2, kv_offload=LMCacheOffload()), gpu=find_gpu_sku("h200-sxm-141gb"))
