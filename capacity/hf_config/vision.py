"""Vision towers and multimodal projectors whose structure is known, counted from `vision_config`."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from capacity.hf_config.fields import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, Fields
from capacity.spec import VisionTower

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
# vLLM 0.33 model_executor/models/qwen2_vl.py _MAX_FRAMES_PER_VIDEO: the dummy video's frame cap
QWEN2_VL_MAX_DUMMY_FRAMES = 14


def most_features_tokens(max_pixels: int, unit: int) -> int:
    """Merged tokens of the image with the most features under `max_pixels` (vLLM 0.33
    `Qwen2VLProcessingInfo.get_image_size_with_most_features`: the largest patch count whose closest
    factor pair has an aspect ratio <= 200; the image is that many units, so smart_resize keeps it)."""
    for count in range(max_pixels // (unit * unit), 0, -1):
        low = next(d for d in range(math.isqrt(count), 0, -1) if count % d == 0)
        if count // low / low <= 200:
            return count
    return 1


def _qwen_tower(m: Model, v: Fields, params: int, *, gated: bool, out_levels: int) -> VisionTower:
    merge = v.integer("spatial_merge_size", 2, hi=64)
    patch = v.integer("patch_size", 14)
    temporal = v.integer("temporal_patch_size", 2)
    channels = v.integer("in_channels", v.integer("in_chans", 3))
    return VisionTower(
        params=params,
        hidden_size=v.integer("hidden_size"),
        num_layers=v.integer("depth", hi=MAX_LAYERS),
        intermediate_size=v.integer("intermediate_size"),
        gated_mlp=gated,
        patch_elements=channels * temporal * patch * patch,
        patches_per_token=merge * merge,
        output_width=v.integer("out_hidden_size", m.hidden) * out_levels,
        max_image_tokens=0,
    )


def qwen2_5_vl_tower(m: Model, v: Fields) -> VisionTower:
    """Qwen2.5-VL as vLLM 0.33 profiles it (qwen2_vl.py `Qwen2VLProcessingInfo`): the image at the
    processor's max_pixels; the video at the same size, frames grown while its tokens fit max_model_len,
    at most 14 frames, padded to the temporal patch (so up to 7 groups of the image's tokens)."""
    tower = _qwen_tower(m, v, qwen2_5_vl(v), gated=True, out_levels=1)
    unit = v.integer("patch_size", 14) * v.integer("spatial_merge_size", 2, hi=64)
    image = most_features_tokens(QWEN2_5_VL_MAX_PIXELS, unit)
    temporal = v.integer("temporal_patch_size", 2)
    groups = -(-QWEN2_VL_MAX_DUMMY_FRAMES // temporal)
    return _replace_tokens(tower, image, image, groups)


def qwen3_vl_tower(m: Model, v: Fields) -> VisionTower:
    """Qwen3-VL as vLLM 0.33 profiles it (qwen3_vl.py `get_max_video_tokens`): the image at the image
    processor's longest_edge; the video as 2 frames (one temporal group) at the video processor's
    longest_edge / temporal patch, whatever max_model_len is. The encoder returns the main and the
    deepstack embeddings per token (`output_width`)."""
    deepstack = v.raw("deepstack_visual_indexes")
    levels = 1 + (len(deepstack) if isinstance(deepstack, list) else 0)
    tower = _qwen_tower(m, v, qwen3_vl(v), gated=False, out_levels=levels)
    unit = v.integer("patch_size", 16) * v.integer("spatial_merge_size", 2, hi=64)
    temporal = v.integer("temporal_patch_size", 2)
    image = most_features_tokens(QWEN3_VL_IMAGE_LONGEST_EDGE, unit)
    video = most_features_tokens(QWEN3_VL_VIDEO_LONGEST_EDGE // temporal, unit)
    return _replace_tokens(tower, image, video, -1)


def _replace_tokens(tower: VisionTower, image: int, frame: int, groups: int) -> VisionTower:
    """The tower with its item sizes (`groups` -1: one fixed temporal group, else vLLM's loop's cap)."""
    return replace(tower, max_image_tokens=image, video_frame_tokens=frame, video_max_groups=groups)
