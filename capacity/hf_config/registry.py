"""The one place a family is chosen from the config's `model_type` strings."""

from __future__ import annotations

from dataclasses import dataclass

from capacity.hf_config.dense import (
    Falcon,
    Generic,
    Glm,
    Glm4,
    Llama,
    Mistral,
    Mistral3,
    Opt,
    Phi3,
    Qwen2,
    Qwen3,
    Qwen3VL,
    Qwen25VL,
)
from capacity.hf_config.family import Family
from capacity.hf_config.gemma import Gemma, Gemma2, Gemma3, Gemma4
from capacity.hf_config.hybrid import GraniteMoeHybrid, Jamba, NemotronH, Qwen3Next, Qwen35
from capacity.hf_config.mla import DeepSeekV32, Glm4MoeLite, Mla, MlaNoauxTc
from capacity.hf_config.moe import Glm4Moe, GptOss, Llama4, MiniMaxM2, Mixtral, Qwen3Moe, Qwen3VLMoe, QwenMoe

_MISTRAL = Mistral("mistral")
_GLM4 = Glm4("glm4")
_GLM = Glm("glm4")  # model_type `glm`: GLM-4's family, two norms per layer
_GENERIC = Generic("generic")
_MLA_GENERIC = Mla("mla_generic")  # an unknown model type that carries `kv_lora_rank`


def _by_type(*families: tuple[Family, tuple[str, ...]]) -> dict[str, Family]:
    return {model_type: family for family, model_types in families for model_type in model_types}


# model_type (outer, or the text config's) -> family
FAMILIES: dict[str, Family] = _by_type(
    (Llama("llama"), ("llama",)),
    (_MISTRAL, ("mistral", "ministral")),
    (Mixtral("mixtral"), ("mixtral",)),
    (Mistral3("mistral3", default_text=_MISTRAL), ("mistral3",)),
    (Qwen2("qwen2"), ("qwen2",)),
    (QwenMoe("qwen2_moe"), ("qwen2_moe",)),
    (Qwen3("qwen3"), ("qwen3",)),
    (Qwen3Moe("qwen3_moe"), ("qwen3_moe",)),
    (Qwen25VL("qwen2_5_vl"), ("qwen2_5_vl", "qwen2_5_vl_text")),
    (Qwen3VL("qwen3_vl"), ("qwen3_vl", "qwen3_vl_text")),
    (Qwen3VLMoe("qwen3_vl_moe"), ("qwen3_vl_moe", "qwen3_vl_moe_text")),
    (Qwen3Next("qwen3_next"), ("qwen3_next",)),
    (Qwen35("qwen3_5"), ("qwen3_5", "qwen3_5_text")),
    (Qwen35("qwen3_5_moe"), ("qwen3_5_moe", "qwen3_5_moe_text")),
    (Gemma("gemma"), ("gemma",)),
    (Gemma2("gemma2"), ("gemma2",)),
    (Gemma3("gemma3"), ("gemma3", "gemma3_text")),
    (Gemma4("gemma4"), ("gemma4", "gemma4_text")),
    (Phi3("phi3"), ("phi3",)),
    (Mla("deepseek_v2"), ("deepseek_v2",)),
    (MlaNoauxTc("deepseek_v3"), ("deepseek_v3",)),
    (DeepSeekV32("deepseek_v32"), ("deepseek_v32",)),
    (MlaNoauxTc("kimi_k2"), ("kimi_k2",)),
    (Glm4MoeLite("glm4_moe_lite"), ("glm4_moe_lite",)),
    (GptOss("gpt_oss"), ("gpt_oss",)),
    (Llama4("llama4"), ("llama4", "llama4_text")),
    (Falcon("falcon"), ("falcon", "RefinedWeb", "RefinedWebModel")),
    (Jamba("jamba"), ("jamba",)),
    (NemotronH("nemotron_h"), ("nemotron_h",)),
    (GraniteMoeHybrid("granitemoehybrid"), ("granitemoehybrid",)),
    (_GLM4, ("glm", "glm4")),
    (Glm4Moe("glm4_moe"), ("glm4_moe",)),
    (MiniMaxM2("minimax_m2"), ("minimax_m2",)),
    (Opt("opt"), ("opt",)),
)


@dataclass(frozen=True)
class Selection:
    family: Family  # who the checkpoint is (ModelSpec.family)
    rules: Family  # whose rules parse the text model
    model_type: str  # ModelSpec.model_type
    rope_scales_context: bool


def select(outer_type: str | None, inner_type: str | None, has_kv_lora_rank: bool) -> Selection:
    """The outer `model_type` names the family where known, else the text config's; a wrapper's
    text model is parsed by its inner family's rules."""
    inner = FAMILIES.get(inner_type or "")
    family = FAMILIES.get(outer_type or "") or inner or _GENERIC
    rules = family.text_rules(inner)
    model_type = outer_type or inner_type or "unknown"
    if family is _GENERIC and has_kv_lora_rank:
        rules = _MLA_GENERIC
    if rules is _GLM4 and model_type == "glm":
        rules = _GLM
    return Selection(
        family=family,
        rules=rules,
        model_type=model_type,
        # vLLM: Gemma 3's 128K already includes the rope scaling
        rope_scales_context="gemma3" not in model_type,
    )
