"""TensorRT-LLM's Mamba state slots (Nemotron-H 1.0-1.2, Qwen3-Next 1.2), derived by hand from the engine's source.

tensorrt_llm/_torch/pyexecutor/mamba_cache_manager.py (MambaCacheManager.__init__, the Python manager behind
MambaHybridCacheManager in these releases) allocates, per local Mamba layer and per max_batch_size slot:
conv_states (conv_dim / TP, d_conv - 1) in the model dtype, conv_dim = head_dim x heads + 2 x n_groups x d_state,
and ssm_states (heads / TP, head_dim, d_state) in mamba_ssm_cache_dtype, whose 'auto' is the checkpoint's
torch_dtype (pyexecutor validate_and_set_mamba_ssm_cache_dtype). KvCacheCreator builds that manager before the
profiling run, so the states sit in the measured peak: available_kv_mem = (total - peak + tmp kv) x fraction, and
_get_cache_size_per_token counts the attention layers only (num_attention_layers, PR #5371).

nvidia/Nemotron-H-8B-Base-8K's config.json: 24 'M' and 4 '*' layers in hybrid_override_pattern, mamba_num_heads
128, mamba_head_dim 64, ssm_state_size 128, n_groups 8, conv_kernel 4, 8 KV heads of 128, bfloat16. By hand:
conv_dim = 64 x 128 + 2 x 8 x 128 = 10,240; a slot of one layer = 10,240 x 3 x 2 B + 128 x 64 x 128 x 2 B
= 61,440 + 2,097,152 = 2,158,592 B; 24 layers = 51,806,208 B a slot. KV a token = 4 x 8 x 128 x 2 x 2 B = 16,384.
"""

from __future__ import annotations

from capacity.estimate import estimate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku

SLOT_BYTES = 24 * (10_240 * 3 * 2 + 128 * 64 * 128 * 2)


def _estimate(version: str | None, max_batch_size: int | None, tp: int = 1):  # type: ignore[no-untyped-def]
    spec = load_model("nvidia/Nemotron-H-8B-Base-8K").spec
    deployment = DeploymentSpec(
        engine="trtllm", engine_version=version, max_model_len=8192, max_num_seqs=max_batch_size, tp=tp
    )
    return estimate(spec, deployment, gpu=find_gpu_sku("h100-sxm-80gb"), checkpoint_bytes=None)


def test_the_hand_derivation() -> None:
    assert SLOT_BYTES == 51_806_208


def test_state_slots_come_off_before_the_fraction() -> None:
    unstated, sized = _estimate(None, 64), _estimate("1.2.0", 64)
    assert sized.not_modelled is None
    assert sized.kv_bytes_per_token_per_gpu == 16_384
    assert sized.state_bytes_per_sequence_per_gpu == SLOT_BYTES
    assert ("Mamba state slots (max_batch_size x conv + SSM state)", 64 * SLOT_BYTES) in sized.activation_buffers
    assert sized.overhead_bytes_per_gpu - unstated.overhead_bytes_per_gpu == 64 * SLOT_BYTES
    # (total - weights - peak) x 0.9: the slots cost 0.9 of their bytes in KV budget (one byte of truncation)
    assert abs((unstated.kv_budget_bytes_per_gpu - sized.kv_budget_bytes_per_gpu) - 0.9 * 64 * SLOT_BYTES) <= 1
    # the pool: whole 32-token blocks of the attention layers' 16,384 B a token
    assert sized.kv_cache_tokens == sized.kv_budget_bytes_per_gpu // (16_384 * 32) * 32


def test_split_by_tp() -> None:
    """TP 2 halves conv_dim and the heads (the engine asserts both divide)."""
    assert _estimate("1.1.0", 64, tp=2).state_bytes_per_sequence_per_gpu == SLOT_BYTES // 2


def test_the_default_max_batch_size_does_not_fit() -> None:
    """2,048 slots (the LLM API's default max_batch_size) x 51,806,208 B = 98.8 GiB of state: more than an H100."""
    est = _estimate("1.0.0", None)
    assert ("Mamba state slots (max_batch_size x conv + SSM state)", 2048 * SLOT_BYTES) in est.activation_buffers
    assert not est.fits


def _qwen3_next(version: str):  # type: ignore[no-untyped-def]
    spec = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").spec
    deployment = DeploymentSpec(engine="trtllm", engine_version=version, max_model_len=8192, max_num_seqs=64, tp=2)
    return estimate(spec, deployment, gpu=find_gpu_sku("h100-sxm-80gb"), checkpoint_bytes=None)


def test_qwen3_next_on_1_2() -> None:
    """extract_mamba_kv_cache_params maps the gated delta net onto the same shapes (is_qwen3_hybrid): d_state =
    linear_key_head_dim 128, heads = linear_num_value_heads 32, n_groups = linear_num_key_heads 16, head_dim =
    linear_value_head_dim 128, d_conv 4; 36 of the 48 layers (full_attention_interval 4). At TP 2: conv_dim
    = 128 x 32 + 2 x 16 x 128 = 8,192, so 8,192 / 2 x 3 x 2 B = 24,576 B, SSM 32 / 2 x 128 x 128 x 2 B = 524,288 B:
    548,864 B a layer, 19,759,104 B a slot; KV a token = 12 layers x 1 head x 256 x 2 x 2 B = 12,288."""
    est = _qwen3_next("1.2.0rc2")
    assert est.not_modelled is None
    assert est.state_bytes_per_sequence_per_gpu == 36 * (8_192 // 2 * 3 * 2 + 32 // 2 * 128 * 128 * 2) == 19_759_104
    assert est.kv_bytes_per_token_per_gpu == 12_288
    assert ("Mamba state slots (max_batch_size x conv + SSM state)", 64 * 19_759_104) in est.activation_buffers


def test_other_releases_and_state_families_stay_flagged() -> None:
    for version in (None, "0.21.0", "1.3.0", "1.4.0"):
        assert "not modelled" in (_estimate(version, 64).not_modelled or ""), version
    # Qwen3-Next has no model class before 1.2 (PR #7892, 1.2.0rc0.post1): 1.1 does not start it, and Jamba has
    # none in any release (tests/test_engine_coverage.py)
    assert not _qwen3_next("1.1.0").starts
    assert "has no implementation of Qwen3NextForCausalLM" in _qwen3_next("1.1.0").reason


def test_the_pool_and_the_note_name_what_is_sized() -> None:
    """The pool's one group is the 4 attention layers (the manager's layer_mask), and the note says the slots follow
    max_batch_size: 2,048 x 51,806,208 B = 98.81 GiB."""
    est = _estimate("1.0.0", None)
    assert [(g.kind.value, g.num_layers) for g in est.pool.groups] == [("full", 4)]
    assert any("max_batch_size 2,048" in note and "98.81 GiB" in note for note in est.notes)
    assert not any("Mamba state" in note for note in _estimate(None, None).notes)
