"""IBM Granite 4.0-H (`granitemoehybrid`): Mamba-2 + attention layers with MoE, against the engines' own code.

The config is the GraniteMoeHybridForCausalLM example of the transformers model docs (8 layers, 2 of them
attention; a public reference config, not one capplan wrote). Hand derivations follow vLLM 0.33's
`granitemoehybrid.get_mamba_state_shape_from_config` / `MambaStateShapeCalculator.mamba2_state_shape` and
SGLang 0.5.23's `configs/granitemoehybrid.py`; the engine-oracle tests run transformers (parameters), vLLM
and SGLang (state shapes at TP 1-8) in .venv-oracle.
"""

from __future__ import annotations

import json

import pytest

from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.kv_bytes import layer_state_bytes
from capacity.spec import DeploymentSpec, KVKind
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.conftest import SGLANG_CPU_PREAMBLE, require_oracle_venv, run_sglang_in_oracle_venv

GRANITE_4_H = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attention_multiplier": 0.015625,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "embedding_multiplier": 12,
    "hidden_act": "silu",
    "hidden_size": 512,
    "initializer_range": 0.1,
    "intermediate_size": 1024,
    "layer_types": ["mamba", "mamba", "mamba", "attention", "mamba", "mamba", "mamba", "attention"],
    "logits_scaling": 2,
    "mamba_chunk_size": 256,
    "mamba_conv_bias": True,
    "mamba_d_conv": 4,
    "mamba_d_head": 128,
    "mamba_d_state": 128,
    "mamba_expand": 2,
    "mamba_n_groups": 1,
    "mamba_n_heads": 8,
    "mamba_proj_bias": False,
    "max_position_embeddings": 4096,
    "model_type": "granitemoehybrid",
    "normalization_function": "rmsnorm",
    "num_attention_heads": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 8,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "position_embedding_type": "nope",
    "residual_multiplier": 0.22,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000,
    "router_aux_loss_coef": 0.0,
    "shared_intermediate_size": 512,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 49152,
}


def test_layers_and_state_from_the_config() -> None:
    spec = parse_config(GRANITE_4_H)
    kinds = [layer.kind for layer in spec.layers]
    assert kinds == [KVKind.STATE] * 3 + [KVKind.FULL] + [KVKind.STATE] * 3 + [KVKind.FULL]
    state = spec.layers[0]
    # I = mamba_expand x hidden = 1,024 = 8 heads x 128; conv channels = I + 2 x 1 group x 128 = 1,280
    # (vLLM keeps kernel - 1 = 3 columns: 3,840); recurrent = 8 x 128 x 128 = 131,072
    assert layer_state_bytes(state, 1, 1, 1, conv_without_current=True) == 1280 * 3 + 131_072
    # TP 2: one group for two ranks -> extra_groups_for_head_shards = 1, conv_dim = 1,024 + 2 x 2 x 128 = 1,536,
    # per rank 768 x 3; recurrent 4 heads x 128 x 128
    assert layer_state_bytes(state, 1, 1, 2, conv_without_current=True) == 768 * 3 + 4 * 128 * 128
    assert spec.num_experts == 8 and spec.num_experts_per_token == 2


def test_estimates_on_vllm_and_sglang_without_refusal() -> None:
    spec = parse_config(GRANITE_4_H)
    for engine in ("vllm", "sglang"):
        est = estimate(spec, DeploymentSpec(engine=engine), gpu=find_gpu_sku("l4-24gb"), context_tokens=4096)
        assert est.not_modelled is None, engine
        assert est.b_max_at(4096) > 0, engine


_ORACLE_SCRIPT = (
    r"""
import json, sys
"""
    + SGLANG_CPU_PREAMBLE
    + r"""
from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator
from sglang.srt.configs.mamba_utils import Mamba2StateShape
raw = json.load(sys.stdin)
with torch.device("meta"):
    params = sum(p.numel() for p in GraniteMoeHybridForCausalLM(GraniteMoeHybridConfig(**raw)).parameters())
kw = dict(intermediate_size=raw["mamba_expand"] * raw["hidden_size"], n_groups=raw["mamba_n_groups"],
          num_heads=raw["mamba_n_heads"], head_dim=raw["mamba_d_head"], state_size=raw["mamba_d_state"],
          conv_kernel=raw["mamba_d_conv"])
def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n
vllm, sglang = {}, {}
for tp in (1, 2, 4, 8):
    conv, temporal = MambaStateShapeCalculator.mamba2_state_shape(tp_world_size=tp, **kw)
    vllm[tp] = elements(conv) + elements(temporal)
    s = Mamba2StateShape.create(tp_world_size=tp, **kw)
    sglang[tp] = sum(elements(c) for c in s.conv) + elements(s.temporal)
print("@@ORACLE@@" + json.dumps({"params": params, "vllm": vllm, "sglang": sglang}))
"""
)


@pytest.mark.engine_oracle
def test_parameters_and_state_equal_the_engines_own_code() -> None:
    require_oracle_venv()
    done = run_sglang_in_oracle_venv(_ORACLE_SCRIPT, GRANITE_4_H, timeout_s=300)
    marker = [line for line in done.stdout.splitlines() if line.startswith("@@ORACLE@@")]
    assert marker, done.stderr[-1500:]
    theirs = json.loads(marker[0][len("@@ORACLE@@") :])
    spec = parse_config(GRANITE_4_H)
    assert spec.total_params == theirs["params"]
    for tp in (1, 2, 4, 8):
        ours = layer_state_bytes(spec.layers[0], 1, 1, tp, conv_without_current=True)  # 1 byte: elements
        assert ours == theirs["vllm"][str(tp)] == theirs["sglang"][str(tp)], tp
