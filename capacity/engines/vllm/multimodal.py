"""vLLM's multimodal profiling: the encoder budget, the dummy items and what they hold at the peak.

Read in vLLM 0.33.0 (`v1/worker/gpu_model_runner.py` profile_run, `multimodal/encoder_budget.py`
MultiModalBudget, `v1/core/encoder_cache_manager.py` compute_mm_encoder_budget). Before the decoder's
dummy forward, profile_run takes the modality with the most tokens per item, builds that many dummy
items of the maximum size the processor makes (`VisionTower.max_image_tokens`, the video rule of the
model's processing info), runs the vision encoder over all of them at once (`embed_multimodal`) and
keeps the outputs in the encoder cache through the decoder's forward and the sampler's dummy run; the
cache is cleared after. So the torch peak the KV budget subtracts is the larger of the encoder pass and
(encoder outputs + the decoder's own peak). With every modality limited to 0 (`--limit-mm-per-prompt`
0 or `--language-model-only`, 0.33) there is no encoder budget and no encoder profiling, and the tower's
modules are not built (`_mark_tower_model`), so its weights are not loaded either.

Releases (`MULTIMODAL_RULES`): the budget and the items per batch read the same in the 0.11.0, 0.12.0,
0.13.0, 0.15.0, 0.19.0, 0.20.0, 0.26.0 and 0.33.0 wheels. What moved: up to 0.12 profile_run expanded each
dummy output to (encoder budget x width) before caching it (gone in 0.13); up to 0.12 Qwen3-VL counted its
dummy video x 12.5 (the timestamp text per video token; gone in 0.13); up to 0.13 Qwen3-VL's dummy video
was frames grown to the 24,576-frame cap under the video processor's total-pixel budget, from 0.15 two
frames at that budget / temporal patch. The tower's modules are skipped with every modality at 0 (0.11:
`self.visual = None`; 0.20+: `_mark_tower_model`). Releases not read (V0 before 0.11, 0.14, 0.16-0.18,
0.21-0.25, 0.27-0.32) take the row of the nearest earlier read release, and the estimate says so when the
release is not one read. Facts carried over from vLLM, no vLLM code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from capacity import engine_constants as ec
from capacity.numeric import cdiv
from capacity.spec import VisionProcessor, VisionTower

DEFAULT_LIMIT_PER_PROMPT = 999  # MultiModalConfig.get_limit_per_prompt: an unspecified modality
QWEN2_VL_MAX_DUMMY_FRAMES = 14  # qwen2_vl.py _MAX_FRAMES_PER_VIDEO (0.11.0, 0.20.0, 0.26.0, 0.33.0)
QWEN3_VL_GROWN_MAX_FRAMES = 24_576  # 0.11.0-0.13.0 qwen3_vl.py _MAX_FRAMES_PER_VIDEO
QWEN3_VL_011_TOKENS_PER_VIDEO_TOKEN = 12.5  # 0.11.0-0.12.0 qwen3_vl.py get_max_video_tokens: "<t seconds>" + 3 tokens
QWEN3_VL_VIDEO_MIN_PIXELS = 4096  # Qwen3-VL video_preprocessor_config.json size.shortest_edge


@dataclass(frozen=True, slots=True)
class MultimodalRule:
    """How one range of releases profiles a multimodal model (from `version` to the next row)."""

    version: str
    outputs_padded_to_budget: bool  # each dummy output expanded to (encoder budget, width) in the cache
    qwen3_video_grown: bool  # Qwen3-VL's dummy video: frames grown to the cap (else 2 frames)
    qwen3_video_formatted: bool  # ... and its tokens counted x 12.5
    read_in: tuple[str, ...]  # the wheels the row was read in


MULTIMODAL_RULES = (
    MultimodalRule("0.11", True, qwen3_video_grown=True, qwen3_video_formatted=True, read_in=("0.11.0", "0.12.0")),
    MultimodalRule("0.13", False, qwen3_video_grown=True, qwen3_video_formatted=False, read_in=("0.13.0",)),
    MultimodalRule(
        "0.15",
        False,
        qwen3_video_grown=False,
        qwen3_video_formatted=False,
        read_in=("0.15.0", "0.19.0", "0.20.0", "0.26.0", "0.33.0"),
    ),
)


def parse_mm_limits(text: str) -> dict[str, int]:
    """`--limit-mm-per-prompt` as vLLM 0.33 reads it: a JSON object of modality -> count or -> {"count": n,
    ...} (dummy-size options beside it are not read here); older releases' `image=1,video=0` too. Raises
    ValueError with a one-line reason."""
    text = text.strip()
    limits: dict[str, int] = {}
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError("--limit-mm-per-prompt is not valid JSON") from None
        if not isinstance(data, dict):
            raise ValueError("--limit-mm-per-prompt wants a JSON object of modality -> count")
        for name, value in data.items():
            count = value.get("count", DEFAULT_LIMIT_PER_PROMPT) if isinstance(value, dict) else value
            limits[str(name)] = _count(str(name), count)
        return limits
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"--limit-mm-per-prompt: {name[:40]!r} is not modality=count")
        limits[name.strip()] = _count(name.strip(), value.strip())
    return limits


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"--limit-mm-per-prompt: the count of {name[:40]!r} is not an integer")
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"--limit-mm-per-prompt: the count of {name[:40]!r} is not an integer") from None
    if not 0 <= count <= 1_000_000:
        raise ValueError(f"--limit-mm-per-prompt: the count of {name[:40]!r} must be 0 to 1,000,000")
    return count


def limit_per_prompt(limits: Mapping[str, int], modality: str, language_model_only: bool = False) -> int:
    """`MultiModalConfig.get_limit_per_prompt`: 0 with --language-model-only, else the given count, else 999."""
    return 0 if language_model_only else limits.get(modality, DEFAULT_LIMIT_PER_PROMPT)


def text_only(tower: VisionTower, limits: Mapping[str, int], language_model_only: bool = False) -> bool:
    """Every modality the tower takes is limited to 0: no encoder budget, no encoder profiling."""
    return all(limit_per_prompt(limits, m, language_model_only) == 0 for m in item_tokens(tower, 1))


def multimodal_rule(version: str | None) -> MultimodalRule:
    """The row in force for a release (None: the newest); before the first row, the first."""
    if version is None:
        return MULTIMODAL_RULES[-1]
    wanted = ec.parse_version(version)[:2]
    chosen = MULTIMODAL_RULES[0]
    for rule in MULTIMODAL_RULES:
        if ec.parse_version(rule.version) <= wanted:
            chosen = rule
    return chosen


def rule_read_for(version: str | None) -> bool:
    """Whether the release's own wheel (or its row's first release) was read for these rules."""
    if version is None:
        return True
    wanted = ec.parse_version(version)[:2]
    read = {ec.parse_version(v)[:2] for rule in MULTIMODAL_RULES for v in rule.read_in}
    return wanted in read


def tower_skipped_text_only(version: str | None) -> bool:
    """Whether a text-only deployment leaves the tower's modules unbuilt (read from 0.11.0 on; V0 releases
    before are not assumed to, so their estimate keeps the weights)."""
    return version is None or ec.parse_version(version)[:2] >= ec.parse_version(MULTIMODAL_RULES[0].version)


def most_features_tokens(max_pixels: int, unit: int) -> int:
    """Merged tokens of the image with the most features under `max_pixels` (vLLM 0.33
    `Qwen2VLProcessingInfo.get_image_size_with_most_features`: the largest count whose closest factor pair
    has an aspect ratio <= 200; the image is that many units, so smart_resize keeps it; 0.11.0 resized a
    9,999,999-pixel square, the same count for square-rooted budgets)."""
    for count in range(max_pixels // (unit * unit), 0, -1):
        low = next(d for d in range(math.isqrt(count), 0, -1) if count % d == 0)
        if count // low / low <= 200:
            return count
    return 1


def _most_features_sides(max_pixels: int, unit: int) -> tuple[int, int]:
    """(height, width) in pixels of that image."""
    count = most_features_tokens(max_pixels, unit)
    low = next(d for d in range(math.isqrt(count), 0, -1) if count % d == 0)
    return low * unit, count // low * unit


def qwen3_video_resize(frames: int, height: int, width: int, tower: VisionTower) -> tuple[int, int]:
    """transformers' Qwen3-VL video smart_resize: the frames' sides scaled so that all frames together stay
    within the video processor's pixel budget, rounded to the unit, at least one unit."""
    factor, t = tower.unit_pixels, tower.temporal_patch
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / t) * t
    if t_bar * h_bar * w_bar > tower.video_max_pixels:
        beta = math.sqrt(frames * height * width / tower.video_max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < QWEN3_VL_VIDEO_MIN_PIXELS:
        beta = math.sqrt(QWEN3_VL_VIDEO_MIN_PIXELS / (frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qwen3_grown_video_tokens(tower: VisionTower, frames: int) -> int:
    height, width = _most_features_sides(tower.image_max_pixels, tower.unit_pixels)
    h_bar, w_bar = qwen3_video_resize(frames, height, width, tower)
    groups = max((frames + frames % tower.temporal_patch) // tower.temporal_patch, 1)
    return groups * (h_bar // tower.unit_pixels) * (w_bar // tower.unit_pixels)


@cache
def _grown_frames(tower: VisionTower, max_model_len: int, start: int, cap: int) -> int:
    """`_get_max_video_frames`: frames added one at a time while the video's tokens fit max_model_len,
    then `get_num_frames_with_most_features`'s cap (one video per prompt), at least 1."""
    frames = start
    while frames < cap and _video_tokens_at(tower, frames + 1) <= max_model_len:
        frames += 1
    return max(min(frames, cap), 1)


def _video_tokens_at(tower: VisionTower, frames: int) -> int:
    if tower.processor is VisionProcessor.QWEN3_VL:
        return _qwen3_grown_video_tokens(tower, frames)
    image = most_features_tokens(tower.image_max_pixels, tower.unit_pixels)
    return max((frames + frames % tower.temporal_patch) // tower.temporal_patch, 1) * image


def item_tokens(tower: VisionTower, max_model_len: int, version: str | None = None) -> dict[str, int]:
    """Tokens of the largest item per modality as the budget counts them (`get_mm_max_tokens_per_item`)."""
    return {modality: counted for modality, (counted, _) in _item_sizes(tower, max_model_len, version).items()}


def _item_sizes(tower: VisionTower, max_model_len: int, version: str | None) -> dict[str, tuple[int, int]]:
    """Per modality: (tokens the budget counts, tokens the encoder returns) of the largest item in a release.
    The image is the processor's largest. Qwen2-VL's video is the image's size with frames grown while its
    tokens fit max_model_len (at most 14). Qwen3-VL's is 2 frames at the video budget / temporal patch
    (0.15+), or up to 0.13 the frames grown to the cap under the video budget (counted x 12.5 up to 0.12)."""
    image = most_features_tokens(tower.image_max_pixels, tower.unit_pixels)
    if tower.processor is VisionProcessor.QWEN2_VL:
        video = _video_tokens_at(tower, _grown_frames(tower, max_model_len, 1, QWEN2_VL_MAX_DUMMY_FRAMES))
        return {"image": (image, image), "video": (video, video)}
    rule = multimodal_rule(version)
    if rule.qwen3_video_grown:
        frames = _grown_frames(tower, max_model_len, 2, QWEN3_VL_GROWN_MAX_FRAMES)
        soft = _qwen3_grown_video_tokens(tower, frames)
        counted = int(soft * QWEN3_VL_011_TOKENS_PER_VIDEO_TOKEN) if rule.qwen3_video_formatted else soft
        return {"image": (image, image), "video": (counted, soft)}
    video = most_features_tokens(tower.video_max_pixels // tower.temporal_patch, tower.unit_pixels)
    return {"image": (image, image), "video": (video, video)}


def encoder_budget_tokens(max_num_batched_tokens: int, max_item_tokens: int) -> int:
    """`compute_mm_encoder_budget`: compute and cache budgets both default to max_num_batched_tokens
    (SchedulerConfig), each raised to the largest item; MultiModalBudget takes their min."""
    return max(max_num_batched_tokens, max_item_tokens)


def profiled_items(
    item_tokens_max: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    limit_per_prompt: int = DEFAULT_LIMIT_PER_PROMPT,
    chunked_prefill: bool = True,
) -> int:
    """`MultiModalBudget._get_max_items`'s per-batch count: the items the budget holds, capped by what the
    decoder could take (max_num_seqs x items per prompt), at least one."""
    if item_tokens_max <= 0 or limit_per_prompt <= 0:
        return 0
    budget = encoder_budget_tokens(max_num_batched_tokens, item_tokens_max)
    per_prompt = max(1, min(limit_per_prompt, max_model_len // item_tokens_max))
    seqs = max_num_seqs
    if not chunked_prefill:
        seqs = min(seqs, max_num_batched_tokens // item_tokens_max)
    return max(1, min(budget // item_tokens_max, seqs * per_prompt))


@dataclass(frozen=True, slots=True)
class EncoderProfile:
    """The dummy multimodal pass of one rank: its items and the two byte terms of the peak."""

    modality: str
    items: int
    item_tokens: int
    forward_bytes: int  # the encoder's own pass: pixel input + live hidden stream + its largest sublayer
    outputs_bytes: int  # the embeddings kept in the encoder cache through the decoder's dummy run


def encoder_profile(
    tower: VisionTower,
    tp: int,
    act_bytes: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    limits: Mapping[str, int] | None = None,
    version: str | None = None,
) -> EncoderProfile | None:
    """The encoder pass vLLM profiles on one rank (None when every modality is limited to 0). The tower is
    sharded by TP (vLLM's Qwen-VL towers use QKV/Merged-Column/Row-parallel linears unless
    `--mm-encoder-tp-mode data`); all items run as one sequence of patches; attention is flash/varlen, so
    nothing grows with the square of the patches."""
    limits = limits or {}
    all_sizes = _item_sizes(tower, max_model_len, version)
    sizes = {m: counted for m, (counted, _) in all_sizes.items() if limit_per_prompt(limits, m) > 0}
    if not sizes:
        return None
    # get_modality_with_max_tokens: max by (tokens, name)
    modality, tokens = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))
    encoded = all_sizes[modality][1]
    limit = limit_per_prompt(limits, modality)
    items = profiled_items(tokens, max_model_len, max_num_seqs, max_num_batched_tokens, limit)
    patches = items * encoded * tower.patches_per_token
    h, inter = tower.hidden_size, tower.intermediate_size
    hidden = ec.VLLM_LIVE_HIDDEN_TENSORS * patches * h
    attention = patches * (cdiv(3 * h, tp) + cdiv(h, tp))
    mlp = patches * (3 if tower.gated_mlp else 2) * cdiv(inter, tp)
    forward = (patches * tower.patch_elements + hidden + max(attention, mlp)) * act_bytes
    rows = encoded
    if multimodal_rule(version).outputs_padded_to_budget:  # 0.11-0.12: zeros to (budget, width), output copied in
        rows = max(encoded, encoder_budget_tokens(max_num_batched_tokens, tokens))
    outputs = items * rows * tower.output_width * act_bytes
    return EncoderProfile(modality, items, tokens, forward, outputs)
