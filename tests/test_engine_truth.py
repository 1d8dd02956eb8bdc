"""vLLM 0.33's own rules, derived by hand from its source (the 0.33.0 wheel), against capplan.

Every expected number below is worked out in the comment beside it from the engine's rules
(`v1/kv_cache_interface.py`, `v1/core/kv_cache_planning.py`, `config/vllm.py`,
`engine/arg_utils.py`) and the model's config.json, not from what capplan printed.
"""

from __future__ import annotations

import pytest

from capacity.engines import Engine
from capacity.engines.registry import engine_profile
from capacity.engines.vllm.profile import VllmProfile
from capacity.engines.vllm.releases import batch_defaults, max_concurrent_batches
from capacity.estimate import AUTO_MAX_MODEL_LEN, estimate
from capacity.spec import DeploymentSpec, GpuSku, KVKind, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

GIB = 1 << 30
V033 = VllmProfile.for_version("0.33")


def _estimate(model_id: str, gpu: str, **deployment: object):  # type: ignore[no-untyped-def]
    resolved = load_model(model_id)
    context = deployment.pop("context", None)
    return estimate(
        resolved.spec,
        DeploymentSpec(**deployment),  # type: ignore[arg-type]
        gpu=find_gpu_sku(gpu),
        checkpoint_bytes=resolved.checkpoint_bytes,
        context_tokens=context,  # type: ignore[arg-type]
    )


# --- in-flight batches: VllmConfig.max_concurrent_batches ---------------------------------------


@pytest.mark.parametrize(
    ("version", "pp", "async_scheduling", "batches"),
    [
        ("0.33", 1, None, 2),  # V2 model runner (the 0.33 default): PP + 1 with async scheduling
        ("0.33", 2, None, 3),
        ("0.33", 4, None, 5),
        ("0.33", 1, False, 1),  # async scheduling off (the CPU build): PP
        ("0.33", 4, False, 4),
        ("0.30", 2, None, 3),  # every model on the V2 runner from 0.29: PP + 1
        ("0.29", 2, None, 3),
        ("0.28", 1, None, 2),  # the release's V1 rule: 2 at PP = 1 ...
        ("0.28", 2, None, 2),  # ... PP at PP > 1
        ("0.25", 1, None, 1),  # before the recycling-aware specs: one batch
    ],
)
def test_max_concurrent_batches(version: str, pp: int, async_scheduling: bool | None, batches: int) -> None:
    release = VllmProfile.for_version(version).release
    assert max_concurrent_batches(release, pp, async_scheduling) == batches


# --- batch defaults: arg_utils.get_batch_defaults (the API server column) --------------------------


@pytest.mark.parametrize(
    ("gpu", "seqs", "batched"),
    [
        ("b200-180gb", 1024, 16384),  # >= 160 GiB: the largest tier
        ("mi300x-192gb", 1024, 16384),
        ("b300-288gb", 1024, 16384),
        ("h200-sxm-141gb", 1024, 8192),  # >= 70 GiB, not A100
        ("h100-sxm-80gb", 1024, 8192),
        ("a100-sxm-80gb", 256, 2048),  # A100 stays small (PR vllm#17885)
        ("l4-24gb", 256, 2048),
    ],
)
def test_batch_default_tiers(gpu: str, seqs: int, batched: int) -> None:
    sku = find_gpu_sku(gpu)
    assert batch_defaults(V033.release, sku, sku.memory_total_bytes, 8192) == (seqs, batched)


def test_batch_tiers_by_release() -> None:
    """The >= 160 GiB tier appears in 0.28.0 (not in 0.27.0's get_batch_defaults), GB10's small tier in 0.33.0
    (not in 0.32.0: there it is a >= 70 GiB, non-A100 card)."""
    b200 = find_gpu_sku("b200-180gb")
    gb10 = GpuSku("gb10-128gb", "NVIDIA GB10", "nvidia", 128 * GIB, architecture="blackwell")
    got = {v: (batch_defaults(VllmProfile.for_version(v).release, b200, b200.memory_total_bytes, 8192),
               batch_defaults(VllmProfile.for_version(v).release, gb10, gb10.memory_total_bytes, 8192))
           for v in ("0.27.0", "0.28.0", "0.32.0", "0.33.0")}  # fmt: skip
    assert got == {
        "0.27.0": ((1024, 8192), (1024, 8192)),
        "0.28.0": ((1024, 16384), (1024, 8192)),
        "0.32.0": ((1024, 16384), (1024, 8192)),
        "0.33.0": ((1024, 16384), (256, 2048)),
    }


def test_batch_defaults_of_the_first_v1_releases() -> None:
    """arg_utils._set_default_args_v1 for `vllm serve`, read in the wheels: 0.8.0-0.8.3 `"h100" in device_name or
    "h200" in device_name` picks 8192 batched tokens (else 2048) and max_num_seqs is 1024 on every GPU; 0.8.4 the
    same name test picks 1024 / 8192, else 256 / 2048; 0.8.5 `device_memory >= 70 GiB` (an A100 80 GB too); 0.9.0
    adds `and "a100" not in device_name`, as every release since."""
    skus = {g: find_gpu_sku(g) for g in ("h100-pcie-80gb", "gh200-96gb", "a100-sxm-80gb", "mi300x-192gb", "l40s-48gb")}
    got = {
        v: tuple(batch_defaults(VllmProfile.for_version(v).release, sku, sku.memory_total_bytes, 8192)
                 for sku in skus.values())
        for v in ("0.8.0", "0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.9.2")
    }  # fmt: skip
    big, small = (1024, 8192), (256, 2048)
    assert got == {
        "0.8.0": (big, big, (1024, 2048), (1024, 2048), (1024, 2048)),
        "0.8.3": (big, big, (1024, 2048), (1024, 2048), (1024, 2048)),
        "0.8.4": (big, big, small, small, small),  # by name: MI300X is not an H100
        "0.8.5": (big, big, big, big, small),  # by memory, A100 80 GB included
        "0.9.0": (big, big, small, big, small),
        "0.9.2": (big, big, small, big, small),
    }


@pytest.mark.parametrize(
    ("version", "bytes_per_token_per_layer"),
    [
        # config.py get_head_size: 256 for deepseek_v2 ("pad head_size 192 to 256"), K and V per KV head:
        # get_total_num_kv_heads reads num_key_value_heads (16 in DeepSeek-V2-Lite's config) // TP 2 = 8 heads
        ("0.5.1", 2 * 8 * 256 * 2),
        ("0.6.6", 2 * 8 * 256 * 2),
        ("0.7.0", 2 * 8 * (128 + 64) * 2),  # qk_nope_head_dim + qk_rope_head_dim, no padding
        ("0.7.1", (512 + 64) * 2),  # use_mla: kv_lora_rank + qk_rope_head_dim, one latent on every rank
    ],
)
def test_deepseek_mla_is_cached_per_head_before_vllm_0_7_1(version: str, bytes_per_token_per_layer: int) -> None:
    """A block of vLLM's V0 cache is block_size x layers x the entry (worker/cache_engine.py get_cache_block_size);
    before 0.7.1 the entry of a DeepSeek MLA layer is K and V of every KV head, read in the 0.5.1, 0.6.6 and 0.7.0
    wheels' config.py."""
    est = _estimate("deepseek-ai/DeepSeek-V2-Lite-Chat", "l40-48gb", tp=2, engine_version=version)
    assert est.pool is not None and est.pool.block_size == 16
    assert est.pool.unit_bytes == 16 * 27 * bytes_per_token_per_layer
    per_head = any("caches K and V for each KV head" in note for note in est.notes)
    assert per_head == (version != "0.7.1")


def test_only_the_last_pipeline_stage_budgets_the_sampler() -> None:
    """vLLM profiles every worker itself and only the last PP rank runs the sampler's dummy run (0.33
    `gpu_model_runner.profile_run`: `if get_pp_group().is_last_rank`): with the weights given alike on every rank,
    the first stage's budget exceeds the last's by the sampler phase less the forward phase (the peak without it),
    read from the activation's named terms; the last stage binds (equal layers, less memory) and the estimate
    reports its budget. vLLM's own planning with these budgets: tests/test_oracle_pp_stages.py."""
    est = _estimate("Qwen/Qwen3-8B", "l4-24gb", tp=1, pp=2, engine_version="0.33", weights_bytes_per_gpu=8 * GIB)
    terms = dict(est.activation_buffers)
    forward = next(n for name, n in terms.items() if name.startswith("forward phase"))
    sampler = next(n for name, n in terms.items() if name.startswith("sampler phase"))
    assert sampler > forward
    first, last = est.stage_kv_budget_bytes
    assert first - last == sampler - forward
    assert est.pool.stage == 1 and est.kv_budget_bytes_per_gpu == last
    assert any("sizes each pipeline stage from its own free memory" in note for note in est.notes)
    one_stage = _estimate("Qwen/Qwen3-8B", "l4-24gb", tp=1, engine_version="0.33", weights_bytes_per_gpu=8 * GIB)
    assert one_stage.stage_kv_budget_bytes == ()


def test_gb10_keeps_the_small_tier_despite_its_memory() -> None:
    gb10 = GpuSku("gb10-128gb", "NVIDIA GB10", "nvidia", 128 * GIB, architecture="blackwell")
    assert batch_defaults(V033.release, gb10, gb10.memory_total_bytes, 8192) == (256, 2048)
    other = GpuSku("big-128gb", "Some 128 GB GPU", "nvidia", 128 * GIB)
    assert batch_defaults(V033.release, other, other.memory_total_bytes, 8192) == (1024, 8192)


# --- the sliding-window admission charge with two batches in flight ----------------------------------


def test_gpt_oss_120b_on_h200_takes_3081_blocks_per_request() -> None:
    # gpt-oss-120b: 36 layers alternating sliding (W = 128) and full; block 16; H200 -> 8,192 batched
    # tokens, 2 batches in flight. full group: cdiv(32768, 16) = 2,048; sliding group:
    # cdiv(min(128 - 1 + 2 * 8192, 32768), 16) + 1 = cdiv(16511, 16) + 1 = 1,032 + 1 = 1,033.
    est = _estimate("openai/gpt-oss-120b", "h200-sxm-141gb", max_model_len=32768)
    assert est.max_in_flight_tokens == 2 * 8192
    assert est.pool.sequence_units(32768, 32768) == 2048 + 1033 == 3081
    one_batch = _estimate("openai/gpt-oss-120b", "h200-sxm-141gb", max_model_len=32768, async_scheduling=False)
    assert one_batch.pool.sequence_units(32768, 32768) == 2048 + (-(-(127 + 8192) // 16) + 1) == 2569


def test_gpt_oss_120b_on_b200_charges_the_whole_length_to_the_window() -> None:
    # B200 (>= 160 GiB): 16,384 batched tokens x 2 = 32,768 in flight; 127 + 32,768 > 32,768, so the
    # sliding group is charged cdiv(32768, 16) + 1 = 2,049 blocks: more than a full layer.
    est = _estimate("openai/gpt-oss-120b", "b200-180gb", max_model_len=32768)
    assert est.pool.sequence_units(32768, 32768) == 2048 + 2049 == 4097


# --- the start condition: get_kv_cache_configs / _check_enough_kv_cache_memory ------------------------


def test_gemma3_27b_on_h100_at_131072_does_not_start() -> None:
    # 62 layers, 52 sliding (W = 1024) + 10 full: groups of 10 -> 6 sliding groups + 1 full.
    # Per request at 131,072: 8,192 (full) + 6 x (cdiv(1023 + 2 * 8192, 16) + 1 = 1,089) = 14,726 blocks,
    # + 1 null block = 14,727 needed. Bytes per block: 10 layers x 16 tokens x 16 heads x 256 x 2 x 2 B.
    est = _estimate("google/gemma-3-27b-it", "NVIDIA H100 80GB HBM3", max_model_len=131072)
    assert est.pool.sequence_units(131072, 131072) == 8192 + 6 * 1089 == 14726
    assert est.num_blocks < 14727
    assert not est.starts and not est.fits and est.b_max == 0
    assert est.reason.startswith("DOES NOT START")
    assert 0 < est.max_model_len_that_starts < 131072
    assert str(f"{est.max_model_len_that_starts:,}") in est.reason
    # the auto-fit length starts, and one token more does not
    fitted = _estimate(
        "google/gemma-3-27b-it", "NVIDIA H100 80GB HBM3", max_model_len=est.max_model_len_that_starts
    )
    assert fitted.starts and fitted.fits
    over = _estimate(
        "google/gemma-3-27b-it", "NVIDIA H100 80GB HBM3", max_model_len=est.max_model_len_that_starts + 1
    )
    assert not over.starts
    auto = _estimate("google/gemma-3-27b-it", "NVIDIA H100 80GB HBM3", max_model_len=AUTO_MAX_MODEL_LEN)
    assert auto.max_model_len == est.max_model_len_that_starts and auto.starts


def test_the_null_block_decides_at_the_edge() -> None:
    # Llama-3.1-8B: 32 full layers x 8 KV heads x 128 x 2 x 2 B = 131,072 B per token, one group;
    # a block of 16 tokens is 2 MiB. At max_model_len 8,192 a request takes 512 blocks: vLLM 0.33
    # plans against num_blocks - 1, so 512 blocks of memory do not start and 513 do.
    block = 16 * 131_072
    for blocks, starts in ((512, False), (513, True)):
        est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", max_model_len=8192,
                        kv_cache_memory_bytes=blocks * block)  # fmt: skip
        assert est.num_blocks == blocks
        assert est.starts is starts
    older = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", max_model_len=8192,
                      kv_cache_memory_bytes=512 * block, engine_version="0.32")  # fmt: skip
    assert older.starts  # before the null-block reservation a pool of exactly one request starts


def test_llama_8b_on_l4_at_the_default_length_does_not_start() -> None:
    # L4: 23.6e9 B x 0.92 = 21.7e9 B usable, 16.06e9 B of bf16 weights: < 5.7e9 B are left, while one
    # request of the default max_model_len 131,072 needs 131,072 x 131,072 B = 16 GiB.
    est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA L4", context=8192)
    assert est.max_model_len == 131072
    assert not est.starts and not est.fits
    assert est.contract()["starts"] is False and est.contract()["fits"] is False
    short = _estimate("meta-llama/Llama-3.1-8B-Instruct", "NVIDIA L4", max_model_len=8192)
    assert short.starts and short.fits and short.b_max >= 1


def test_sglang_and_trtllm_start_when_one_request_of_the_limit_does_not_fit() -> None:
    # 131,072 tokens x 131,072 B = 16 GiB for one request of the model's limit; with 8 GiB of KV
    # memory vLLM refuses to start, SGLang and TensorRT-LLM start and admit shorter requests.
    budget = 8 * GIB
    vllm = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", kv_cache_memory_bytes=budget, context=8192)
    assert not vllm.starts
    for engine in (Engine.SGLANG, Engine.TRTLLM):
        est = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", engine=engine.value,
                        kv_cache_memory_bytes=budget, context=8192)  # fmt: skip
        assert est.starts
        assert est.fits and est.b_max >= 1


# --- Mamba / GDN hybrids: MambaSpec in "align" mode (prefix caching on by default) -------------------


def test_nemotron_h_state_groups_hold_three_blocks_per_request() -> None:
    # Nemotron-H-8B: 24 Mamba-2 layers and 4 attention layers; groups of min(24, 4) = 4 layers:
    # 6 state groups + 1 attention group. In "align" mode a state group holds 2 blocks per request
    # plus the prefill checkpoint block every Mamba-2 mixer exports (mamba_mixer2.get_kv_cache_spec):
    # 6 x 3 + cdiv(8192, 1040) = 18 + 8 = 26.
    est = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h100-sxm-80gb", max_model_len=8192)
    kinds = [g.kind for g in est.pool.groups]
    assert kinds.count(KVKind.STATE) == 6 and kinds.count(KVKind.FULL) == 1
    assert est.pool.sequence_units(8192, 8192) == 6 * 3 + -(-8192 // est.block_size) == 26
    # 0.26-0.31: "align" mode without the checkpoint block (Mamba-2 exports it from 0.32: the 0.31.0
    # wheel's mamba_mixer2 has no num_prefill_checkpoint_blocks); before 0.26 one block a state group
    # (hybrid models ran without prefix caching)
    align = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h100-sxm-80gb", max_model_len=8192, engine_version="0.31")
    assert align.pool.sequence_units(8192, 8192) == 6 * 2 + -(-8192 // align.block_size) == 20
    at_032 = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h100-sxm-80gb", max_model_len=8192, engine_version="0.32")
    assert at_032.pool.sequence_units(8192, 8192) == 26
    before = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h100-sxm-80gb", max_model_len=8192, engine_version="0.25")
    assert before.pool.sequence_units(8192, 8192) == 6 * 1 + -(-8192 // before.block_size)


def test_qwen3_next_state_groups_in_align_mode() -> None:
    # Qwen3-Next-80B: 36 gated-delta-net layers, 12 full-attention layers -> groups of 12: 3 state
    # groups + 1 attention group; at TP 4 on H200 the weights fit. On Hopper FlashInfer's GDN prefill
    # exports checkpoints: 2 + 1 blocks per state group; on an A100 (Triton GDN prefill) 2.
    est = _estimate("Qwen/Qwen3-Next-80B-A3B-Instruct", "h200-sxm-141gb", tp=4, max_model_len=32768)
    kinds = [g.kind for g in est.pool.groups]
    assert kinds.count(KVKind.STATE) == 3 and kinds.count(KVKind.FULL) == 1
    assert est.pool.sequence_units(32768, 32768) == 3 * 3 + -(-32768 // est.block_size)
    ampere = _estimate("Qwen/Qwen3-Next-80B-A3B-Instruct", "a100-sxm-80gb", tp=4, max_model_len=32768)
    assert ampere.pool.sequence_units(32768, 32768) == 3 * 2 + -(-32768 // ampere.block_size)


# --- KV dtypes the release accepts --------------------------------------------------------------------


def test_vllm_refuses_kv_dtypes_it_does_not_accept() -> None:
    with pytest.raises(SpecError, match="does not accept --kv-cache-dtype int8"):
        _estimate("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", kv_dtype="int8", max_model_len=8192)
    assert V033.kv_dtype_problem("fp8_e4m3") is None


def test_profiles_are_chosen_by_enum() -> None:
    assert engine_profile("VLLM").engine is Engine.VLLM
    assert engine_profile(Engine.SGLANG).engine is Engine.SGLANG
    with pytest.raises(SpecError, match="unknown engine"):
        engine_profile("tgi")


def test_nemotron_h_state_page_and_aligned_attention_block() -> None:
    # vLLM's Mamba-2 state (mamba_utils.mamba2_state_shape): conv (conv_dim, kernel - 1) in the model
    # dtype, SSM (heads, head_dim, d_state) in float32 for Nemotron-H (its config class default).
    # conv_dim = 8192 + 2 * 8 * 128 = 10,240 -> 10,240 x 3 x 2 B = 61,440; SSM 128 x 64 x 128 x 4 B =
    # 4,194,304: page 4,255,744 B. Attention: 8 KV heads x (128 + 128) x 2 B = 4,096 B per token, so
    # the block is 16 x cdiv(4,255,744, 16 x 4,096) = 16 x 65 = 1,040 tokens and the page is padded
    # to 1,040 x 4,096 = 4,259,840 B; a block across a group of 4 layers is 17,039,360 B.
    est = _estimate("nvidia/Nemotron-H-8B-Base-8K", "h200-sxm-141gb", max_model_len=8192)
    assert est.block_size == 1040
    assert est.pool.unit_bytes == 4 * 1040 * 4096 == 17_039_360


def test_qwen3_next_state_follows_the_model_dtype() -> None:
    # Qwen3-Next: --mamba-ssm-cache-dtype auto -> bfloat16 (no config class overrides it). At TP 4:
    # conv (8192 / 4, 3) x 2 B = 12,288; recurrent (32 / 4 heads, 128, 128) x 2 B = 262,144; page
    # 274,432 B. Attention: 2 KV heads over TP 4 -> 1 head x (256 + 256) x 2 B = 1,024 B per token.
    # A100 (alignment 16): block = 16 x cdiv(274,432, 16 x 1,024) = 16 x 17 = 272. H200: the
    # checkpoint grid of FlashInfer's GDN prefill (64) -> 64 x cdiv(274,432, 64 x 1,024) = 64 x 5 = 320.
    ampere = _estimate("Qwen/Qwen3-Next-80B-A3B-Instruct", "a100-sxm-80gb", tp=4, max_model_len=8192)
    assert ampere.block_size == 272
    assert ampere.pool.unit_bytes == 12 * 272 * 1024 == 3_342_336
    hopper = _estimate("Qwen/Qwen3-Next-80B-A3B-Instruct", "h200-sxm-141gb", tp=4, max_model_len=8192)
    assert hopper.block_size == 320
    assert hopper.pool.unit_bytes == 12 * 320 * 1024


def test_hybrid_state_groups_hold_two_blocks_from_0_26_and_gdn_checkpoints_by_gpu_and_release() -> None:
    # Qwen3.8-27B (48 GDN + 16 full-attention layers: 3 state groups + 1 full group of 16) on an RTX PRO
    # 6000 under 0.29.0, max_model_len 8,192, block 784 (a public startup log): 652 blocks printed
    # "GPU KV cache size: 314,187 tokens", concurrency 38.35x = 652 / 17 blocks a request: the full group
    # cdiv(8192, 784) = 11, each state group 2 ("align" mode: hybrid models default to prefix caching
    # from 0.26, config/model.py is_prefix_caching_supported), no prefill checkpoint (GDN mixers export
    # one from 0.33). int(652 / 17 x 8192) = 314,187.
    from capacity.calibration import pool_numbers, pool_with_units

    deployment = {"max_model_len": 8192, "max_num_seqs": 256, "gpu_memory_utilization": 0.9}
    est = _estimate("Qwen/Qwen3.8-27B", "rtx-pro-6000-blackwell-server-96gb", engine_version="0.29.0", **deployment)
    assert est.block_size == 784 and [g.state_blocks for g in est.pool.groups if g.kind == "state"] == [2, 2, 2]
    printed = pool_numbers(pool_with_units(est.pool, 652), context=8192, max_model_len=8192, max_num_seqs=256)
    assert printed.kv_tokens == 314_187
    # before 0.26 hybrid models ran without prefix caching: one state block a request
    old = _estimate("Qwen/Qwen3.8-27B", "rtx-pro-6000-blackwell-server-96gb", engine_version="0.25.0", **deployment)
    assert {g.state_blocks for g in old.pool.groups if g.kind == "state"} == {1}
    # a GDN checkpoint block per state group only from 0.33, where FlashInfer's GDN prefill runs (Hopper,
    # Blackwell); the 0.32.0 wheel's qwen_gdn_linear_attn exports none
    for gpu, version, blocks in (("h100-sxm-80gb", "0.32.0", 2), ("h100-sxm-80gb", "0.33", 3),
                                 ("rtx-pro-6000-blackwell-server-96gb", "0.33", 3), ("a100-sxm-80gb", "0.33", 2)):  # fmt: skip
        other = _estimate("Qwen/Qwen3.8-27B", gpu, engine_version=version, **deployment)
        assert {g.state_blocks for g in other.pool.groups if g.kind == "state"} == {blocks}, (gpu, version)


def test_gemma4_unequal_pages_scale_the_smaller_pages_block() -> None:
    # Gemma-4-26B-A4B: 25 sliding layers (W = 1024) of 8 KV heads x (256 + 256) x 2 B = 8,192 B per
    # token, 5 full layers of 2 heads x (512 + 512) x 2 B = 4,096 B. unify_kv_cache_spec_page_size
    # doubles the full layers' block (16 -> 32 tokens) so both pages are 16 x 8,192 = 131,072 B; groups
    # of 5 layers -> 5 sliding groups + 1 full; a block across a group is 5 x 131,072 = 655,360 B.
    # At 32,768 on H100 (8,192 batched, 2 in flight): full cdiv(32768, 32) = 1,024; each sliding group
    # cdiv(1023 + 16,384, 16) + 1 = 1,089: 1,024 + 5 x 1,089 = 6,469 blocks per request.
    est = _estimate("google/gemma-4-26B-A4B", "h100-sxm-80gb", max_model_len=32768)
    assert est.pool.unit_bytes == 5 * 16 * 8192 == 655_360
    assert est.pool.sequence_units(32768, 32768) == 1024 + 5 * 1089 == 6469
    # Gemma-4-E2B: the sliding pages are the small ones (1 head x 512 x 2 B = 1,024 B against 2,048 B):
    # sliding blocks of 32 tokens; 12 sliding + 3 full layers (20 more read shared caches) -> 4 + 1
    # groups of 3: 2,048 + 4 x (cdiv(511 + 16,384, 32) + 1 = 529) = 4,164.
    small = _estimate("google/gemma-4-E2B", "h100-sxm-80gb", max_model_len=32768)
    assert small.pool.sequence_units(32768, 32768) == 2048 + 4 * 529 == 4164


@pytest.mark.parametrize(
    ("gpu", "kv_dtype", "block", "block_0_17"),
    [
        # 0.18 on: SM90 FLASH_ATTN_MLA first, any multiple of 16 -> the default 16. 0.17.0 platforms/cuda.py
        # check_and_update_config: FlashMLA where is_flashmla_dense_supported (SM90) forces 64
        ("h100-sxm-80gb", "auto", 16, 64),
        ("h200-sxm-141gb", "fp8", 64, 64),  # FLASH_ATTN_MLA takes no fp8 KV -> FLASHMLA, kernel blocks of 64
        # SM100: FLASHINFER_MLA supports 32 and 64, not 16 -> the smallest, 32; 0.17.0: FlashInfer MLA forced
        # to 64 (qk_nope_head_dim == 128)
        ("b200-180gb", "auto", 32, 64),
        ("b200-180gb", "fp8", 32, 64),
        ("a100-sxm-80gb", "auto", 16, 16),  # SM80: TRITON_MLA; 0.17.0: FlashMLA unsupported, nothing forced
        ("mi300x-192gb", "auto", 16, 16),  # ROCm AITER MLA: any block size; 0.17.0 rocm.py: 16, Triton MLA
    ],
)
def test_mla_block_size_follows_the_attention_backend(gpu: str, kv_dtype: str, block: int, block_0_17: int) -> None:
    est = _estimate("deepseek-ai/DeepSeek-V3", gpu, tp=8, kv_dtype=kv_dtype, max_model_len=4096)
    assert est.block_size == block
    before = _estimate("deepseek-ai/DeepSeek-V3", gpu, tp=8, kv_dtype=kv_dtype, max_model_len=4096,
                       engine_version="0.17")  # fmt: skip
    assert before.block_size == block_0_17


def test_llama4_chunked_local_layers_run_without_the_hybrid_manager() -> None:
    # VllmConfig.__post_init__: a model with attention_chunk_size turns the hybrid KV cache manager
    # off unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, so Llama 4's 36 chunked layers
    # and 12 full layers share one group of 48 and a request of 8,192 tokens takes cdiv(8192, 16) = 512.
    est = _estimate("meta-llama/Llama-4-Scout-17B-16E-Instruct", "h200-sxm-141gb", tp=4, max_model_len=8192)
    assert [(g.kind, g.num_layers) for g in est.pool.groups] == [(KVKind.FULL, 48)]
    assert est.pool.sequence_units(8192, 8192) == 512


def test_deepseek_v32_caches_the_indexer_key_beside_the_latent() -> None:
    # DeepSeek-V3.2 (DSA): per layer the MLA latent (512 + 64) plus the lightning indexer's key of
    # index_head_dim 128, stored as fp8 with one fp32 scale per 128: 128 + 4 = 132 B, replicated
    # under TP like the latent. bf16 KV: 61 x (576 x 2 + 132) = 78,324 B per token on every GPU. The
    # indexer backend takes 64-token blocks (DeepseekV32IndexerBackend), so one block of the single
    # UniformType group is 64 x 78,324 = 5,012,736 B. fp8 KV: the sparse FlashMLA layout fp8_ds_mla
    # (656 B a token: 512 fp8 + 4 fp32 scales + 64 bf16 rope): 64 x 61 x (656 + 132) = 3,076,352 B.
    import json
    from pathlib import Path

    from capacity.hf_config import parse_config

    config = json.loads((Path(__file__).parent / "configs" / "deepseek_v32-deepseek-v3.2.json").read_text())
    spec = parse_config(config)
    assert {layer.cache.indexer_bytes_per_token for layer in spec.layers} == {132}
    h200 = find_gpu_sku("h200-sxm-141gb")
    bf16 = estimate(spec, DeploymentSpec(tp=8, max_model_len=32768), gpu=h200)
    assert bf16.kv_bytes_per_token_per_gpu == 61 * (576 * 2 + 132) == 78_324
    assert bf16.block_size == 64 and bf16.pool.unit_bytes == 64 * 78_324
    fp8 = estimate(spec, DeploymentSpec(tp=8, kv_dtype="fp8", max_model_len=32768), gpu=h200)
    assert fp8.pool.unit_bytes == 64 * 61 * (656 + 132) == 3_076_352


def test_unmodelled_engine_rules_are_said_not_sized_silently() -> None:
    # TensorRT-LLM keeps one pool per attention window for sliding models: capplan does not model the
    # split, so the estimate says so (and the JSON carries it) instead of passing off a full-attention number
    est = _estimate("openai/gpt-oss-120b", "h200-sxm-141gb", engine="trtllm", max_model_len=32768)
    assert est.not_modelled and "per attention window" in est.not_modelled
    assert est.contract()["modelled"] is False
    assert any(note.startswith("not modelled") for note in est.notes)
    full = _estimate("meta-llama/Llama-3.1-8B-Instruct", "h200-sxm-141gb", engine="trtllm", max_model_len=8192)
    assert full.not_modelled is None and full.contract()["modelled"] is True


def test_the_grid_says_which_rows_it_does_not_model() -> None:
    from capacity.grid import GridModel, GridOptions, build_deployments

    gpt = load_model("openai/gpt-oss-20b")
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    models = [GridModel("openai/gpt-oss-20b", gpt.spec, gpt.checkpoint_bytes),
              GridModel("meta-llama/Llama-3.1-8B-Instruct", llama.spec, llama.checkpoint_bytes)]  # fmt: skip
    # TensorRT-LLM 1.4 (the V2 manager's per-window pools, not read) flags gpt-oss's windowed layers; the grid's
    # default 1.2 sizes them (the V1 manager keeps them at the full length: tests/test_trtllm_windows.py)
    options = GridOptions(
        engines=("vllm", "trtllm"), weight_dtypes=("auto",), kv_dtypes=("auto",), trtllm_version="1.4.0"
    )
    rows = build_deployments(models, [find_gpu_sku("h100-sxm-80gb")], options).collect()
    flagged = rows.filter(rows["not_modelled"].is_not_null())
    assert set(zip(flagged["model"], flagged["engine"], strict=True)) == {("openai/gpt-oss-20b", "trtllm")}
    options = GridOptions(engines=("trtllm",), weight_dtypes=("auto",), kv_dtypes=("auto",))
    rows = build_deployments(models, [find_gpu_sku("h100-sxm-80gb")], options).collect()
    assert rows.height and rows["not_modelled"].is_null().all() and set(rows["engine_version"]) == {"1.2"}
