"""Speculative decoding as a deployment declares it: the method, the draft, how many tokens a step
proposes, parsed from vLLM's `--speculative-config` JSON and SGLang's `--speculative-*` flags; and what a
step yields at an acceptance rate.

The memory rules (the draft's weights and its KV layers in the pool) are in
`capacity.features.speculative_memory`, the speed at an acceptance rate in
`capacity.features.speculative_speed`; this module holds the types both read and imports no model type,
so `capacity.spec.DeploymentSpec` can carry a `SpeculativeSpec`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum

from capacity.kv.kinds import LayerCache


class SpeculativeConfigError(ValueError):
    """A speculative configuration that cannot be read, with a one-line reason for the user."""


class SpecMethod(StrEnum):
    """How the draft tokens are proposed; each method answers what it puts on the GPU."""

    DRAFT_MODEL = "draft_model"  # a separate small LM (vLLM draft_model, SGLang STANDALONE)
    EAGLE = "eagle"  # an EAGLE head: decoder layer(s) + fc over the target's hidden states
    EAGLE3 = "eagle3"  # EAGLE-3: the same with its own (reduced-vocabulary) lm_head
    MTP = "mtp"  # the target checkpoint's own multi-token-prediction layers (DeepSeek, Qwen3-Next, GLM)
    MEDUSA = "medusa"  # extra MLP heads on the target's last hidden state: weights, no KV
    NGRAM = "ngram"  # prompt lookup: no weights, no KV
    SUFFIX = "suffix"  # suffix decoding (a CPU tree): no weights, no KV
    UNKNOWN = "unknown"  # declared (an observed log's flag) without the method: not sized, flagged

    @property
    def has_weights(self) -> bool:
        """The method loads a draft network onto each GPU."""
        return self not in (SpecMethod.NGRAM, SpecMethod.SUFFIX, SpecMethod.UNKNOWN)

    @property
    def has_kv(self) -> bool:
        """The draft has attention layers whose KV joins the cache (Medusa heads are MLPs)."""
        return self.has_weights and self is not SpecMethod.MEDUSA

    @property
    def shares_embeddings(self) -> bool:
        """vLLM 0.33 `llm_base_proposer.py:_maybe_share_embeddings`: EAGLE heads and MTP layers use the
        target's embedding (a draft model keeps its own: `draft_model.py` overrides it to do nothing)."""
        return self in (SpecMethod.EAGLE, SpecMethod.EAGLE3, SpecMethod.MTP)

    @property
    def shares_lm_head(self) -> bool:
        """`_maybe_share_lm_head`: MTP always, EAGLE-1 heads have none of their own; EAGLE-3 keeps its own
        head over the draft vocabulary (`draft_vocab_size`, differently shaped from the target's)."""
        return self in (SpecMethod.EAGLE, SpecMethod.MTP)

    @property
    def fc_inputs(self) -> int:
        """How many hidden states the head's fc projects down to one: EAGLE 2 (token embedding + target
        hidden), EAGLE-3 3 (three target layers' hidden states); 0 elsewhere (vLLM `llama_eagle*.py`)."""
        return {SpecMethod.EAGLE: 2, SpecMethod.EAGLE3: 3}.get(self, 0)


# vLLM 0.33 `config/speculative.py`: the method names it accepts (`*_mtp` are deprecated spellings of mtp)
_VLLM_METHODS = {
    "draft_model": SpecMethod.DRAFT_MODEL,
    "eagle": SpecMethod.EAGLE,
    "eagle3": SpecMethod.EAGLE3,
    "mtp": SpecMethod.MTP,
    "medusa": SpecMethod.MEDUSA,
    "mlp_speculator": SpecMethod.MEDUSA,
    "ngram": SpecMethod.NGRAM,
    "ngram_gpu": SpecMethod.NGRAM,
    "suffix": SpecMethod.SUFFIX,
}
# SGLang 0.5.23 `--speculative-algorithm` (`speculative/spec_info.py`; NEXTN is EAGLE over the MTP layers)
_SGLANG_METHODS = {
    "EAGLE": SpecMethod.EAGLE,
    "EAGLE3": SpecMethod.EAGLE3,
    "NEXTN": SpecMethod.MTP,
    "MTP": SpecMethod.MTP,
    "STANDALONE": SpecMethod.DRAFT_MODEL,
    "NGRAM": SpecMethod.NGRAM,
}
# SGLang `arg_groups/speculative_hook.py:_auto_choose_speculative_params`: (num_steps, eagle_topk,
# num_draft_tokens) when --speculative-num-steps is not given: Llama (5, 4, 8), everything else (3, 1, 4)
_SGLANG_AUTO_PARAMS = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}
_SGLANG_DEFAULT_PARAMS = (3, 1, 4)
# SGLang `_handle_eagle_family` / `_handle_ngram`: without --max-running-requests, speculative decoding caps it
SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS = 48
_MAX_SPECULATIVE_TOKENS = 64


@dataclass(frozen=True, slots=True)
class DraftShape:
    """The draft network as a GPU holds it: its attention layers' caches (in the draft's own shapes), the
    parameters it loads beyond what it shares with the target, and its width. Built from the draft's
    config (`speculative_memory.draft_shape`) or from the target's MTP layers."""

    name: str
    layers: tuple[LayerCache, ...]  # the layers that hold KV (one per draft decoder layer with attention)
    params: int  # loaded parameters split over TP, the embedding / lm_head shared with the target excluded
    weight_bytes_per_param: float  # the draft checkpoint's element size (bf16: 2)
    hidden_size: int
    num_attention_heads: int
    assumed: str | None = None  # what was assumed where the draft's config was not known (said in the notes)
    replicated_params: int = 0  # held whole on every rank (an EAGLE head's fc is a ReplicatedLinear)
    # the embedding / lm_head copies the draft builds and the engine then swaps for the target's (`params`
    # excludes them), in their own element size (16-bit in fp8 checkpoints)
    shared_params: int = 0
    shared_bytes_per_param: float = 2.0

    def weight_bytes_per_gpu(self, tp: int, *, with_shared_copies: bool = False) -> int:
        """The draft's weights on one rank: its sharded parameters over TP plus the replicated ones, and the
        copies of the shared embedding / lm_head where the engine still holds them when it sizes the pool."""
        own = (self.params / tp + self.replicated_params) * self.weight_bytes_per_param
        copies = self.shared_params / tp * self.shared_bytes_per_param if with_shared_copies else 0.0
        return math.ceil(own + copies)


@dataclass(frozen=True, slots=True)
class SpeculativeSpec:
    """A deployment's speculative decoding: the method, the draft (by id, and once resolved by shape), the
    tokens proposed per step and, for SGLang's tree, the steps, branch width and verified tokens."""

    method: SpecMethod
    num_speculative_tokens: int = 1  # vLLM num_speculative_tokens; SGLang --speculative-num-steps
    draft_model: str | None = None  # the draft's id or path (None: MTP from the target, or no draft)
    draft_tp: int | None = None  # vLLM draft_tensor_parallel_size (None: the target's TP)
    eagle_topk: int = 1  # SGLang --speculative-eagle-topk: branches per draft step
    num_draft_tokens: int | None = None  # SGLang --speculative-num-draft-tokens: tokens verified per sequence
    draft: DraftShape | None = None  # the resolved draft (None: MTP, resolved from the target; or unknown)

    @property
    def verify_tokens_per_sequence(self) -> int:
        """Tokens the target verifies per sequence and step: vLLM the k proposals plus the bonus token;
        SGLang its --speculative-num-draft-tokens (the tree's nodes, the root included)."""
        return self.num_draft_tokens or self.num_speculative_tokens + 1

    @property
    def draft_passes(self) -> int:
        """Forward passes of the draft per step (k proposals; SGLang: num_steps)."""
        return self.num_speculative_tokens if self.method.has_weights else 0

    @property
    def describe(self) -> str:
        draft = f" ({self.draft_model})" if self.draft_model else ""
        return f"{self.method.value}{draft}, {self.num_speculative_tokens} speculative token(s)"


@dataclass(frozen=True, slots=True)
class SpeculativeSpeed:
    """How speculative decoding changed a deployment's decode speed, for the derivation to print."""

    plain_tpot_ms: float  # TPOT without speculation (the roofline above it)
    step_ms: float  # one step: the verify pass and the draft passes
    tokens_per_step: float  # per sequence, at the acceptance rate
    acceptance_rate: float
    spec: SpeculativeSpec
    rate_given: bool = True  # False: no rate was given and 0 was assumed

    @property
    def tpot_ms(self) -> float:
        return self.step_ms / self.tokens_per_step

    def describe(self) -> str:
        """One line: the step, the tokens it emits, the TPOT that follows."""
        assumed = (
            "" if self.rate_given else " (no --acceptance-rate: 0 assumed, the draft's cost and no accepted token)"
        )
        return (
            f"speculative decoding ({self.spec.describe}): a step verifies {self.spec.verify_tokens_per_sequence} "
            f"tokens per sequence after {self.spec.draft_passes} draft pass(es) = {self.step_ms:,.2f} ms and emits "
            f"(1 - a^(k+1)) / (1 - a) = {self.tokens_per_step:.3f} tokens per sequence at a = "
            f"{self.acceptance_rate:g}{assumed}: TPOT = {self.tpot_ms:,.2f} ms"
        )


def from_vllm_config(text: str) -> SpeculativeSpec:
    """vLLM's `--speculative-config` JSON (`SpeculativeConfig.__post_init__`: no method means ngram for the
    model "ngram", else a draft model, renamed eagle / eagle3 when the draft's name says so)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpeculativeConfigError(f"--speculative-config is not JSON: {err.msg} at column {err.colno}") from None
    if not isinstance(raw, dict):
        raise SpeculativeConfigError('--speculative-config must be a JSON object, e.g. \'{"method": "eagle", ...}\'')
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise SpeculativeConfigError("--speculative-config: 'model' must be a string")
    method_name = raw.get("method")
    if method_name is None:
        lowered = (model or "").lower()
        if model in ("ngram", "[ngram]"):
            method_name = "ngram"
        elif "eagle-" in lowered:
            method_name = "eagle"
        elif "eagle3" in lowered:
            method_name = "eagle3"
        else:
            method_name = "draft_model"
    if not isinstance(method_name, str):
        raise SpeculativeConfigError("--speculative-config: 'method' must be a string")
    method = _VLLM_METHODS.get(method_name) or (SpecMethod.MTP if method_name.endswith("_mtp") else None)
    if method is None:
        raise SpeculativeConfigError(
            f"--speculative-config: method {method_name!r} is not sized; expected one of {', '.join(_VLLM_METHODS)}"
        )
    # an EAGLE head not named (a config quoted without its model) is sized as an assumed head, never refused
    if method in (SpecMethod.DRAFT_MODEL, SpecMethod.MEDUSA) and not model:
        raise SpeculativeConfigError(f"--speculative-config: method {method_name!r} needs a 'model' (the draft's id)")
    k = _positive_int(raw.get("num_speculative_tokens", 1), "num_speculative_tokens")
    draft_tp = raw.get("draft_tensor_parallel_size")
    return SpeculativeSpec(
        method=method,
        num_speculative_tokens=k,
        draft_model=model if method is not SpecMethod.NGRAM else None,
        draft_tp=None if draft_tp is None else _positive_int(draft_tp, "draft_tensor_parallel_size"),
    )


def from_sglang_flags(
    algorithm: str,
    draft_model_path: str | None = None,
    num_steps: int | None = None,
    eagle_topk: int | None = None,
    num_draft_tokens: int | None = None,
    architecture: str | None = None,
) -> SpeculativeSpec:
    """SGLang's `--speculative-algorithm` and its companions; the steps / top-k / draft tokens SGLang chooses
    when none is given (`_auto_choose_speculative_params`, by the target's architecture)."""
    method = _SGLANG_METHODS.get(algorithm.upper())
    if method is None:
        raise SpeculativeConfigError(
            f"--speculative-algorithm {algorithm!r} is not sized; expected one of {', '.join(_SGLANG_METHODS)}"
        )
    if method is SpecMethod.EAGLE and not draft_model_path:
        method = SpecMethod.MTP  # DeepSeek / GLM: EAGLE without a draft path runs the target's MTP layers
    auto = _SGLANG_AUTO_PARAMS.get(architecture or "", _SGLANG_DEFAULT_PARAMS)
    if method is SpecMethod.DRAFT_MODEL:
        auto = _SGLANG_DEFAULT_PARAMS
    steps = auto[0] if num_steps is None else _positive_int(num_steps, "--speculative-num-steps")
    default_topk, default_tokens = (auto[1], auto[2]) if num_steps is None else (1, steps + 1)
    topk = default_topk if eagle_topk is None else eagle_topk
    tokens = default_tokens if num_draft_tokens is None else num_draft_tokens
    return SpeculativeSpec(
        method=method,
        num_speculative_tokens=steps,
        draft_model=None if method is SpecMethod.MTP else draft_model_path,  # NEXTN: the target's own layers
        eagle_topk=_positive_int(topk, "--speculative-eagle-topk"),
        num_draft_tokens=_positive_int(tokens, "--speculative-num-draft-tokens"),
    )


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_SPECULATIVE_TOKENS:
        raise SpeculativeConfigError(f"{name} must be an integer in 1..{_MAX_SPECULATIVE_TOKENS}, got {value!r}")
    return value


def accepted_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Tokens a sequence emits per verify step when each of k proposals is accepted with probability a,
    independently, until the first rejection, plus the bonus token: 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a)
    (Leviathan et al. 2023, eq. 1); k + 1 at a = 1."""
    if not 0 <= acceptance_rate <= 1:
        raise SpeculativeConfigError(f"acceptance rate must be in [0, 1], got {acceptance_rate}")
    if acceptance_rate == 1:
        return float(num_speculative_tokens + 1)
    return (1 - acceptance_rate ** (num_speculative_tokens + 1)) / (1 - acceptance_rate)
