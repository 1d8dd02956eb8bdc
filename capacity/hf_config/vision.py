"""Vision towers and multimodal projectors whose structure is known, counted from `vision_config`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from capacity.hf_config.fields import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, Fields
from capacity.spec import VisionProcessor, VisionTower, VisionTowerShape

if TYPE_CHECKING:
    from capacity.hf_config.family import Model


def llama4(m: Model, v: Fields) -> int:
    h = v.integer("hidden_size")
    layers = v.integer("num_hidden_layers", hi=MAX_LAYERS)
    inter = v.integer("intermediate_size")
    patch = v.integer("patch_size")
    image = v.integer("image_size", hi=1 << 20)
    channels = v.integer("num_channels", 3)
    proj_in = v.integer("projector_input_dim")
    proj_out = v.integer("projector_output_dim")
    out_dim = v.integer("vision_output_dim")
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h  # q/k/v/o, fc1, fc2, 2 LN
    patches = (image // patch) ** 2 + 1
    embeddings = h + patches * h + channels * patch * patch * h  # class, positional, patch (no bias)
    outer_norms = 4 * h  # layernorm_pre / layernorm_post, weight + bias
    adapter = inter * proj_in + proj_out * proj_out  # vision_adapter.mlp fc1 / fc2, no bias
    bias = v.flag("multi_modal_projector_bias", False)
    projector = out_dim * m.hidden + (m.hidden if bias else 0)
    return embeddings + outer_norms + layers * per_layer + adapter + projector


def siglip(v: Fields) -> int:
    h = v.integer("hidden_size", 768)
    layers = v.integer("num_hidden_layers", 12, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 3072)
    patch = v.integer("patch_size", 16)
    image = v.integer("image_size", 224, hi=1 << 20)
    channels = v.integer("num_channels", 3)
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h  # conv + bias, positions
    head = 0
    if v.flag("vision_use_head", True):
        # probe, nn.MultiheadAttention (in/out projections with bias), layernorm, MLP
        head = h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h)
    return embeddings + layers * per_layer + 2 * h + head  # + post_layernorm


def gemma3_projector(m: Model, v: Fields) -> int:
    vh = v.integer("hidden_size", 768)
    return vh * m.hidden + vh  # mm_input_projection_weight, mm_soft_emb_norm


def pixtral(v: Fields) -> int:
    h = v.integer("hidden_size", 1024)
    layers = v.integer("num_hidden_layers", 24, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 4096)
    heads = v.integer("num_attention_heads", 16, hi=MAX_HEADS)
    head_dim = v.integer("head_dim", h // heads)
    patch = v.integer("patch_size", 16)
    channels = v.integer("num_channels", 3)
    per_layer = 4 * h * heads * head_dim + 3 * h * inter + 2 * h  # q/k/v/o, gated FFN, 2 RMSNorms
    return channels * patch * patch * h + h + layers * per_layer  # patch_conv, ln_pre


def qwen2_5_vl(v: Fields) -> int:
    """Qwen2.5-VL's vision transformer (transformers `Qwen2_5_VisionTransformerPretrainedModel`; vLLM's
    `qwen2_5_vl.py` loads the same tensors, sharded by TP): a bias-free Conv3d patch embedding, blocks of
    two RMSNorms, biased qkv / proj and a biased gated MLP, and the patch merger (RMSNorm + 2 linears)."""
    h = v.integer("hidden_size", 1280)
    depth = v.integer("depth", 32, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 3420)
    patch = v.integer("patch_size", 14)
    temporal = v.integer("temporal_patch_size", 2)
    channels = v.integer("in_channels", v.integer("in_chans", 3))
    merge = v.integer("spatial_merge_size", 2, hi=64)
    out = v.integer("out_hidden_size")
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * inter + inter) + (inter * h + h)
    merged = h * merge * merge
    merger = h + (merged * merged + merged) + (merged * out + out)  # ln_q, mlp.0, mlp.2
    return channels * temporal * patch * patch * h + depth * block + merger


def qwen3_vl(v: Fields) -> int:
    """Qwen3-VL's vision tower: Qwen3.5's (below) plus one post-shuffle-norm merger per
    `deepstack_visual_indexes` entry (transformers `Qwen3VLVisionModel.deepstack_merger_list`)."""
    h = v.integer("hidden_size", 1152)
    merge = v.integer("spatial_merge_size", 2, hi=64)
    out = v.integer("out_hidden_size")
    deepstack = v.raw("deepstack_visual_indexes")
    count = len(deepstack) if isinstance(deepstack, list) else 0
    merged = h * merge * merge
    deepstack_merger = 2 * merged + (merged * merged + merged) + (merged * out + out)
    return qwen3_5(v) + count * deepstack_merger


def qwen3_5(v: Fields) -> int:
    h = v.integer("hidden_size", 1152)
    depth = v.integer("depth", 27, hi=MAX_LAYERS)
    inter = v.integer("intermediate_size", 4304)
    patch = v.integer("patch_size", 16)
    temporal = v.integer("temporal_patch_size", 2)
    channels = v.integer("in_channels", 3)
    positions = v.integer("num_position_embeddings", 2304, hi=MAX_POSITIONS)
    merge = v.integer("spatial_merge_size", 2, hi=64)
    out = v.integer("out_hidden_size")
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)  # 2 LN, qkv, proj, MLP
    merged = h * merge * merge
    merger = 2 * h + (merged * merged + merged) + (merged * out + out)  # LayerNorm, fc1, fc2
    return channels * temporal * patch * patch * h + h + positions * h + depth * block + merger


def mistral3_projector(m: Model, v: Fields) -> int:
    vh = v.integer("hidden_size", 1024)
    merge = m.outer.integer("spatial_merge_size", 2, hi=64)
    bias = m.outer.flag("multimodal_projector_bias", False)
    merger = vh * merge * merge * vh  # patch_merger.merging_layer, no bias
    linear_1 = vh * m.hidden + (m.hidden if bias else 0)
    linear_2 = m.hidden * m.hidden + (m.hidden if bias else 0)
    return vh + merger + linear_1 + linear_2  # + norm


# The processors' default largest sizes (preprocessor_config.json / video_preprocessor_config.json of the
# published Instruct checkpoints; config.json does not carry them, `--mm-processor-kwargs` can move them)
QWEN2_5_VL_MAX_PIXELS = 12_845_056  # Qwen/Qwen2.5-VL-*-Instruct preprocessor_config.json "max_pixels"
QWEN3_VL_IMAGE_LONGEST_EDGE = 16_777_216  # Qwen/Qwen3-VL-*: preprocessor_config.json size.longest_edge
QWEN3_VL_VIDEO_LONGEST_EDGE = 25_165_824  # Qwen/Qwen3-VL-*: video_preprocessor_config.json size.longest_edge


def _qwen_tower(
    m: Model, v: Fields, params: int, processor: VisionProcessor, pixels: tuple[int, int], *, gated: bool
) -> VisionTower:
    merge = v.integer("spatial_merge_size", 2, hi=64)
    patch = v.integer("patch_size", 14)
    temporal = v.integer("temporal_patch_size", 2)
    channels = v.integer("in_channels", v.integer("in_chans", 3))
    deepstack = v.raw("deepstack_visual_indexes")
    levels = 1 + (len(deepstack) if isinstance(deepstack, list) else 0)
    return VisionTower(
        params=params,
        hidden_size=v.integer("hidden_size"),
        num_layers=v.integer("depth", hi=MAX_LAYERS),
        intermediate_size=v.integer("intermediate_size"),
        gated_mlp=gated,
        patch_elements=channels * temporal * patch * patch,
        patches_per_token=merge * merge,
        output_width=v.integer("out_hidden_size", m.hidden) * levels,  # Qwen3-VL: main + deepstack levels
        processor=processor,
        unit_pixels=patch * merge,
        temporal_patch=temporal,
        image_max_pixels=pixels[0],
        video_max_pixels=pixels[1],
    )


def qwen2_5_vl_tower(m: Model, v: Fields) -> VisionTower:
    """Qwen2.5-VL's tower and its processor's default sizes (the video is read at the image's size)."""
    pixels = (QWEN2_5_VL_MAX_PIXELS, QWEN2_5_VL_MAX_PIXELS)
    return _qwen_tower(m, v, qwen2_5_vl(v), VisionProcessor.QWEN2_VL, pixels, gated=True)


def qwen3_vl_tower(m: Model, v: Fields) -> VisionTower:
    """Qwen3-VL's tower (its encoder returns the main and the deepstack embeddings per token) and its
    processors' default sizes."""
    pixels = (QWEN3_VL_IMAGE_LONGEST_EDGE, QWEN3_VL_VIDEO_LONGEST_EDGE)
    return _qwen_tower(m, v, qwen3_vl(v), VisionProcessor.QWEN3_VL, pixels, gated=False)


class KnownTower:
    """A family mixin whose tower is counted and profiled by a pair of rules from this module."""

    tower_rules: ClassVar[tuple[Callable[[Fields], int], Callable[[Model, Fields], VisionTower]]]

    def count_vision(self, m: Model, v: Fields) -> int:
        return self.tower_rules[0](v)

    def vision_tower(self, m: Model, v: Fields) -> VisionTower | None:
        return self.tower_rules[1](m, v)


# transformers' vision config classes: (num_hidden_layers, hidden_size) defaults, None where the class has no
# such attribute (Qwen's vision configs count `depth`); read in the transformers the oracle venv installs beside
# SGLang 0.5.23 (CONFIG_MAPPING[model_type]().vision_config or the class itself)
_CLASS_DEFAULTS: dict[str, tuple[int | None, int | None]] = {
    "gemma4_vision": (16, 768),
    "siglip_vision_model": (12, 768),
    "llama4_vision_model": (34, 768),
    "mllama_vision_model": (32, 1280),
    "pixtral": (24, 1024),
    "qwen2_vl": (None, 3584),
    "qwen2_5_vl": (None, 3584),
    "qwen3_vl": (None, 1152),
    "qwen3_5": (None, 1152),
    "gemma3n_vision": (None, 2048),
}


def tower_shape(m: Model) -> VisionTowerShape | None:
    """The `vision_config`'s depth and width as an engine's config object answers `getattr` for them: the
    JSON's values, else the class defaults above (unknown classes: None, i.e. the engine's own fallback)."""
    vision = m.outer.sub("vision_config")
    if vision is None:
        return None
    layers_default, hidden_default = _CLASS_DEFAULTS.get(vision.text("model_type") or "", (None, None))
    layers = vision.opt_int("num_hidden_layers", hi=MAX_LAYERS)
    hidden = vision.opt_int("hidden_size")
    return VisionTowerShape(layers_default if layers is None else layers, hidden_default if hidden is None else hidden)
