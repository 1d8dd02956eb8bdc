"""Layouts an engine refuses before it sizes any memory, said in the engine's own words.

Two checks every engine makes while it builds its config, read from the engines' source:
- the quantization method's minimum compute capability (vLLM `config/vllm.py` / SGLang
  `model_loader/loader.py` `_get_quantization_config`: `capability < quant_config.get_min_capability()`
  raises ValueError);
- a max_model_len beyond the model's limit (vLLM `config/model.py` `_get_and_verify_max_len`, SGLang
  `configs/model_config.py` `_derive_context_length`), unless the engine's override variable is set.
Each profile asks these with its own numbers (`EngineProfile.start_refusal`); the estimate reports the
message as "does not start", so a layout the engine refuses is never reported as FITS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capacity.engines.protocol import StartRequest

FP8 = "fp8"  # `WeightsEstimate.format_name` of fp8 weights (a fp8 checkpoint or `--dtype fp8`)


def quantization_refusal(method: str, min_capability: int | None, request: StartRequest) -> str | None:
    """The engines' `get_min_capability` check, in their words (the same sentence in vLLM 0.6-0.33 and
    SGLang 0.5.23): None where the GPU's capability is unknown (AMD, an unlisted architecture) or the
    minimum is not known for the release: a check must not refuse what the engine runs."""
    capability = request.gpu.compute_capability if request.gpu is not None else None
    if capability is None or min_capability is None or capability >= min_capability:
        return None
    return (
        f"The quantization method {method} is not supported for the current GPU. "
        f"Minimum capability: {min_capability}. Current capability: {capability}."
    )


def fp8_method(request: StartRequest) -> str | None:
    """The quantization method an engine loads fp8 weights with, where it is the plain `fp8` one (a
    checkpoint quantized with method fp8, or `--dtype fp8`); None for other formats and methods
    (compressed-tensors, ModelOpt... have their own minimums, not read here)."""
    quant = request.model.quantization
    if request.weight_format != FP8 or (quant is not None and quant.method != FP8):
        return None
    return FP8


def long_length_refusal(request: StartRequest, limit: int, what: str, override: str) -> str | None:
    """The user's length beyond the model's `limit` (`EngineProfile.context_limit`: the config's length keys
    with rope scaling applied, as the engine's release derives its own), in the engines' sentence: vLLM names
    it max_model_len, SGLang context_length. None where it is within the limit or the override is set."""
    if request.max_model_len <= limit or request.allow_long_max_model_len:
        return None
    return (
        f"User-specified {what} ({request.max_model_len}) is greater than the derived {what} ({limit}) "
        f"of the model's config.json. To allow overriding this maximum, set the env var {override}=1 "
        "(capplan: --allow-long-max-model-len)"
    )


def triton_fp8_kv_refusal(request: StartRequest) -> str | None:
    """vLLM 0.24-0.33 on a GPU below compute capability 8.0 (Volta, Turing): FlashAttention and FlashInfer
    (floor raised to 8.0 in 0.24) are not valid there, so attention runs the Triton backend, whose
    `TritonAttentionImpl.__init__` raises for an fp8 KV cache below 8.9 (v1/attention/backends/triton_attn.py).
    On 8.0-8.8 FlashInfer takes fp8, so only pre-Ampere GPUs are refused; MLA models take other backends
    (TRITON_MLA, not read): not refused."""
    gpu, capability = request.gpu, request.gpu.compute_capability if request.gpu is not None else None
    if gpu is None or capability is None or capability >= 80 or not request.kv_dtype.startswith(FP8):
        return None
    if not any(layer.cache.stores_per_token_kv and not layer.cache.latent for layer in request.model.layers):
        return None
    return (
        f"FP8 KV cache is not supported by the Triton attention backend on {gpu.name} (compute capability "
        f"{capability // 10}.{capability % 10}); native FP8 (fp8e4nv) requires SM89+. "
        "Re-run with --kv-cache-dtype float16."
    )
