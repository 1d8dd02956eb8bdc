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

Releases: the budget rule and the items per batch are 0.33's; earlier V1 releases ran the same
profile_run phases (the estimate notes that the rule was read in 0.33 when it applies it to another
release). Facts carried over from vLLM, no vLLM code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.numeric import cdiv
from capacity.spec import VisionTower

MULTIMODAL_RULE_VERSION = "0.33.0"  # the release the rules below were read in
DEFAULT_LIMIT_PER_PROMPT = 999  # MultiModalConfig.get_limit_per_prompt: an unspecified modality


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


def tower_skipped_text_only(version: str | None) -> bool:
    """Whether a text-only deployment leaves the tower's modules unbuilt (`_mark_tower_model`, read in
    0.33.0; earlier releases are not assumed to, so their estimate keeps the weights)."""
    return version is None or ec.parse_version(version)[:2] >= ec.parse_version(MULTIMODAL_RULE_VERSION)[:2]


def item_tokens(tower: VisionTower, max_model_len: int) -> dict[str, int]:
    """Tokens of the largest item per modality (`get_mm_max_tokens_per_item`). The image is fixed by the
    processor; Qwen2-VL-style videos (`video_max_groups` > 0) grow a frame at a time while their tokens fit
    max_model_len, up to the frame cap, at least one temporal group; Qwen3-VL's (-1) are one group."""
    out = {"image": tower.max_image_tokens}
    frame = tower.video_frame_tokens
    if frame > 0:
        groups = 1 if tower.video_max_groups < 0 else max(1, min(tower.video_max_groups, max_model_len // frame))
        out["video"] = groups * frame
    return out


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
) -> EncoderProfile | None:
    """The encoder pass vLLM profiles on one rank (None when every modality is limited to 0). The tower is
    sharded by TP (vLLM's Qwen-VL towers use QKV/Merged-Column/Row-parallel linears unless
    `--mm-encoder-tp-mode data`); all items run as one sequence of patches; attention is flash/varlen, so
    nothing grows with the square of the patches."""
    limits = limits or {}
    sizes = {m: n for m, n in item_tokens(tower, max_model_len).items() if limit_per_prompt(limits, m) > 0}
    if not sizes:
        return None
    # get_modality_with_max_tokens: max by (tokens, name)
    modality, tokens = max(sizes.items(), key=lambda kv: (kv[1], kv[0]))
    limit = limit_per_prompt(limits, modality)
    items = profiled_items(tokens, max_model_len, max_num_seqs, max_num_batched_tokens, limit)
    patches = items * tokens * tower.patches_per_token
    h, inter = tower.hidden_size, tower.intermediate_size
    hidden = ec.VLLM_LIVE_HIDDEN_TENSORS * patches * h
    attention = patches * (cdiv(3 * h, tp) + cdiv(h, tp))
    mlp = patches * (3 if tower.gated_mlp else 2) * cdiv(inter, tp)
    forward = (patches * tower.patch_elements + hidden + max(attention, mlp)) * act_bytes
    outputs = items * tokens * tower.output_width * act_bytes
    return EncoderProfile(modality, items, tokens, forward, outputs)
