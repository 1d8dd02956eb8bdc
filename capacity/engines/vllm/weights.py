"""What vLLM keeps on the GPU beyond the checkpoint's bytes: MXFP4 experts' layouts, V0 MLA's absorbed matrices.

The checkpoint stores a routed expert as 4-bit values plus one 8-bit scale per 32 (17/32 B per
parameter). vLLM's fused-MoE kernels want other shapes, and the difference is weight memory the KV
pool never gets (it is in "Model loading took X GiB"): up to 13 % of the experts on A100 and 6 % on
H100 for gpt-oss. Read in the vLLM wheels (0.19.0, 0.24.0 - 0.27.0, 0.33.0):

- the backend (`fused_moe/oracle/mxfp4.py` select_mxfp4_moe_backend, gpt-oss priority list): FlashInfer
  TRT-LLM on SM100 (B200/GB200/B300), the OAI Triton kernels on SM90 (H100/H200/GH200: triton_kernels
  runs for 9.0 <= capability < 11.0), Marlin on Ampere/Ada and on SM120 (RTX PRO 6000, RTX 50xx: the
  0.33 list puts Triton after Marlin there), AITER on ROCm. Before 0.12 SM90 ran Marlin too: the Triton
  path needs the `triton_kernels` package (`has_triton_kernels`), which the wheels of 0.10.1.1 - 0.11.2
  neither vendor nor require; 0.12.0 vendors it as `vllm.third_party.triton_kernels` (read in the
  0.10.1.1, 0.10.2, 0.11.0, 0.11.2 and 0.12.0 wheels: `_should_use_marlin` / `get_mxfp4_backend`; the
  vllm#23278 log on an H100 prints Marlin's "Weight-only FP4 compression" warning and 65.97 GiB loaded).
  0.10.1.x runs Marlin there even with the package: its Triton path wants torch >= 2.8, the wheel pins 2.7.1;
- `mxfp4_round_up_hidden_size_and_intermediate_size`: Marlin pads the per-rank intermediate to 128 and
  the hidden size to 256; TRT-LLM pads both to 256 (0.27 and later: intermediate to 128); ROCm pads both to
  256; every other backend (Triton) pads the intermediate to 64;
- Triton on SM90 (`quantization/utils/mxfp4_utils.py` _swizzle_mxfp4): the values are swizzled into
  triton_kernels' HopperMXValueLayout (rows padded to 16, bytes per row to 32) and the scales into
  HopperMXScaleLayout with 8 warps (rows padded to 256, columns to 2; from 0.26 the scale groups are padded
  to a multiple of 4 first), the biases cast to fp32; before 0.25 (vllm#46549) the checkpoint's block scales
  stayed allocated beside their swizzled copies.

Facts carried over from vLLM and triton_kernels, no code. Other backends' re-layouts (Marlin's repack,
FlashInfer's shuffle) keep the padded sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from capacity import engine_constants as ec
from capacity.engines.vllm.overhead import gated_intermediate, layer_intermediates
from capacity.kv.kinds import LatentAttention
from capacity.numeric import cdiv
from capacity.parallel import pp_partition
from capacity.spec import GpuSku, ModelSpec
from capacity.weights import stored_format

MXFP4_BLOCK = 32  # elements per shared 8-bit exponent
BF16_BYTES = 2
FP32_BYTES = 4
_UNQUANTIZED = frozenset({"bfloat16", "float16", "float32"})  # `WeightFormat.name`s of unquantized weights
HOPPER_VALUE_ROW_MULTIPLE = 16  # HopperMXValueLayout (mma v3): 1 x 2 warps x 4 threads x 2 (scott trick) rows
HOPPER_VALUE_BYTE_MULTIPLE = 32  # 4 k-tiles x 2 warps x 4 threads bytes per row
HOPPER_SCALE_ROW_MULTIPLE = 2 * 8 * 2 * 8  # HopperMXScaleLayout: 2 x num_warps (8) x 2 x 8
HOPPER_SCALE_COLUMN_MULTIPLE = 2
TRITON_KERNELS_BUNDLED_FROM = (0, 12)  # the first wheel with vllm/third_party/triton_kernels
TRITON_MXFP4_TORCH_FROM = (0, 10, 2)  # the first wheel on torch 2.8, which the Triton path needs


class Mxfp4Backend(StrEnum):
    """The MXFP4 MoE kernels vLLM picks for gpt-oss, as far as they change the bytes."""

    FLASHINFER_TRTLLM = "FlashInfer TRT-LLM"
    TRITON_HOPPER = "OAI Triton (Hopper layout)"
    MARLIN = "Marlin"
    AITER = "AITER"
    TRITON = "Triton"


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How one rank's MXFP4 experts of a layer sit in memory."""

    backend: Mxfp4Backend
    intermediate_multiple: int
    hidden_multiple: int
    keeps_checkpoint_scales: bool = False  # the Triton path before 0.25
    pads_scale_groups: bool = False  # the Triton path on SM90 from 0.26 (scale groups to a multiple of 4)


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def triton_kernels_decides(gpu: GpuSku | None, vllm_version: str) -> bool:
    """Whether the backend on this GPU and release turns on the optional `triton_kernels` package: SM90
    on 0.10.2 - 0.11.x, where an install without it runs Marlin and one with it (installed by hand: "users
    have to install triton_kernels manually", vllm#27370, 2025-10-22) the OAI Triton kernels."""
    version = ec.parse_version(vllm_version)
    return (
        gpu is not None
        and (gpu.architecture or "").lower() == "hopper"
        and TRITON_MXFP4_TORCH_FROM <= version < TRITON_KERNELS_BUNDLED_FROM
    )


def mxfp4_backend(
    gpu: GpuSku | None, vllm_version: str = ec.VLLM_DEFAULT_VERSION, triton_kernels: bool | None = None
) -> Mxfp4Backend:
    """The backend vLLM selects for gpt-oss's experts on this GPU and release (CUDA/ROCm, default
    settings). `triton_kernels`: whether the OAI Triton kernels ran: True, the package installed beside a
    release that does not bundle it; False, Marlin (the package missing, or VLLM_MXFP4_USE_MARLIN=1 on any
    release); None, a plain install with default settings."""
    if gpu is None:  # hardware outside the catalog: only the generic intermediate padding
        return Mxfp4Backend.TRITON
    arch = (gpu.architecture or "").lower()
    if gpu.amd or arch.startswith("cdna"):
        return Mxfp4Backend.AITER
    name = gpu.id.lower()
    if arch.startswith("blackwell") and not any(word in name for word in ("rtx", "gb10")):
        return Mxfp4Backend.FLASHINFER_TRTLLM
    if arch == "hopper":
        if triton_kernels is False:  # observed Marlin (before 0.12 the package missing; any release VLLM_MXFP4_USE_MARLIN)
            return Mxfp4Backend.MARLIN
        if ec.parse_version(vllm_version) >= TRITON_KERNELS_BUNDLED_FROM:
            return Mxfp4Backend.TRITON_HOPPER
        with_package = bool(triton_kernels) and triton_kernels_decides(gpu, vllm_version)
        return Mxfp4Backend.TRITON_HOPPER if with_package else Mxfp4Backend.MARLIN
    if arch in ("ampere", "ada") or arch.startswith("blackwell"):
        return Mxfp4Backend.MARLIN
    return Mxfp4Backend.TRITON


def expert_layout(gpu: GpuSku | None, vllm_version: str, triton_kernels: bool | None = None) -> ExpertLayout:
    """The padding and the kept buffers of the backend in this vLLM version."""
    version = ec.parse_version(vllm_version)
    backend = mxfp4_backend(gpu, vllm_version, triton_kernels)
    if backend is Mxfp4Backend.MARLIN:
        return ExpertLayout(backend, 128, 256)
    if backend is Mxfp4Backend.FLASHINFER_TRTLLM:
        return ExpertLayout(backend, 128 if version >= (0, 27) else 256, 256)
    if backend is Mxfp4Backend.AITER:
        return ExpertLayout(backend, 256, 256)
    if backend is Mxfp4Backend.TRITON_HOPPER:
        return ExpertLayout(
            backend, 64, 1, keeps_checkpoint_scales=version < (0, 25), pads_scale_groups=version >= (0, 26)
        )
    return ExpertLayout(backend, 64, 1)


def _hopper_matrix_bytes(experts: int, rows: int, columns: int, pads_scale_groups: bool) -> int:
    """Swizzled values and scales of an (experts, rows, columns) MXFP4 weight (columns along the MX axis)."""
    value_bytes = experts * _round_up(rows, HOPPER_VALUE_ROW_MULTIPLE) * _round_up(columns // 2, HOPPER_VALUE_BYTE_MULTIPLE)
    groups = columns // MXFP4_BLOCK
    if pads_scale_groups:
        groups = _round_up(groups, 4)
    scale_bytes = experts * _round_up(rows, HOPPER_SCALE_ROW_MULTIPLE) * _round_up(groups, HOPPER_SCALE_COLUMN_MULTIPLE)
    return value_bytes + scale_bytes


def expert_layer_bytes(
    experts: int, intermediate: int, hidden: int, tp: int, layout: ExpertLayout, biased: bool
) -> tuple[int, int]:
    """(bytes vLLM keeps, bytes of the checkpoint's format) for one layer's routed experts on one rank:
    w13 (experts, 2I/TP, H) and w2 (experts, H, I/TP), MXFP4 along the last axis, plus the biases."""
    i_rank = intermediate // tp
    checkpoint = experts * 3 * i_rank * hidden * 17 // MXFP4_BLOCK
    bias_elements = experts * (2 * i_rank + hidden) if biased else 0
    checkpoint += bias_elements * BF16_BYTES
    i_pad = _round_up(i_rank, layout.intermediate_multiple)
    h_pad = _round_up(hidden, layout.hidden_multiple)
    if layout.backend is Mxfp4Backend.TRITON_HOPPER:
        kept = _hopper_matrix_bytes(experts, 2 * i_pad, h_pad, layout.pads_scale_groups)
        kept += _hopper_matrix_bytes(experts, h_pad, i_pad, layout.pads_scale_groups)
        if layout.keeps_checkpoint_scales:
            kept += experts * 3 * i_pad * h_pad // MXFP4_BLOCK
        kept += experts * (2 * i_pad + h_pad) * FP32_BYTES if biased else 0
    else:
        kept = experts * 3 * i_pad * h_pad * 17 // MXFP4_BLOCK
        kept += experts * (2 * i_pad + h_pad) * BF16_BYTES if biased else 0
    return kept, checkpoint


def mxfp4_expert_extra_bytes(
    model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None, vllm_version: str, triton_kernels: bool | None = None
) -> int:
    """Weight bytes the most loaded rank holds beyond the checkpoint's MXFP4 experts (0 when the experts
    are not MXFP4)."""
    quant = model.quantization
    # the MXFP4 backends and layouts read for gpt-oss's own `mxfp4` method; a compressed-tensors MXFP4 checkpoint
    # loads through CompressedTensorsW4A4Mxfp4MoEMethod, sized as stored (its kernel layout is not read)
    if quant is None or quant.method != "mxfp4" or not model.num_experts:
        return 0
    layout = expert_layout(gpu, vllm_version, triton_kernels)
    extra_per_stage: list[int] = []
    start = 0
    for count in pp_partition(len(model.layer_params), pp):
        extra = 0
        for p in model.layer_params[start : start + count]:
            if not p.experts:
                continue
            per_expert = p.experts // model.num_experts
            intermediate, biased = gated_intermediate(per_expert, model.hidden_size)
            kept, checkpoint = expert_layer_bytes(model.num_experts, intermediate, model.hidden_size, tp, layout, biased)
            extra += kept - checkpoint
        extra_per_stage.append(extra)
        start += count
    return max(extra_per_stage, default=0)



def mla_absorbed_weight_bytes(model: ModelSpec, tp: int, pp: int, weight_format: str, release: ec.VllmRelease) -> int:
    """What V0 MLA keeps beside the raw projections on the most loaded rank (0.7.1-0.7.3, `release.mla_absorbed_weights`):
    `attention/backends/mla/utils.py` MLACommonImpl.process_weights_after_loading with
    VLLM_MLA_PERFORM_MATRIX_ABSORPTION on (the default): "we end up with absorbed weights for decode and another
    copy of raw weights for prefill". Per MLA layer, n = heads / TP, L = kv_lora_rank, Q = q's input width:
    W_QR, the rope columns of q_proj made contiguous in the model dtype (Q x n x rope); W_Q_UK (Q x n L) and
    W_UV_O (n L x hidden), requantized to fp8 when the weights are fp8 (VLLM_MLA_DISABLE_REQUANTIZATION off),
    else in the model dtype; and, where kv_b_proj is quantized, its dequantized copy (L x n x (nope + v) in the
    model dtype) that the W_UK / W_UV views keep alive. The fp8 copies' block scales (one fp32 per 128 x 128:
    under 0.1 % of these bytes) are not counted."""
    if not release.mla_absorbed_weights:
        return 0
    act_bytes = BF16_BYTES  # the model dtype of every MLA checkpoint read (bf16)
    quant = model.quantization
    quantized = weight_format not in _UNQUANTIZED and (quant is None or quant.attention_quantized)
    absorbed_bytes = 1 if quantized and weight_format == "fp8" else act_bytes
    n = model.num_attention_heads // tp
    per_stage: list[int] = []
    start = 0
    for count in pp_partition(len(model.layers), pp):
        total = 0
        for layer in model.layers[start : start + count]:
            cache = layer.cache
            if not isinstance(cache, LatentAttention) or not cache.q_input_dim:
                continue
            rank, q_in = cache.kv_lora_rank, cache.q_input_dim
            total += q_in * n * cache.rope_head_dim * act_bytes  # W_QR
            total += (q_in * n * rank + n * rank * model.hidden_size) * absorbed_bytes  # W_Q_UK, W_UV_O
            if quantized:  # W_UK / W_UV: views of the dequantized kv_b_proj
                total += rank * n * (cache.nope_head_dim + cache.v_head_dim) * act_bytes
        per_stage.append(total)
        start += count
    return max(per_stage, default=0)


# compressed-tensors' INT4 / INT8 weight-only experts (`CompressedTensorsWNA16MoEMethod.create_weights`): group scales
# must not cross a TP shard (in the 0.24.0-0.34.0 wheels; 0.23.0 has no check, and 0.24-0.26's preferred Marlin MoE
# path takes only what passes it too), and from 0.29.0 (not in 0.28.0) an asymmetric checkpoint's packed zero points
# must not straddle an int32
WNA16_GROUP_CHECK_FROM = (0, 24)
WNA16_ZERO_POINT_CHECK_FROM = (0, 29)
_WNA16_BITS = {"int4": 4, "int8": 8}


def wna16_moe_refusal(model: ModelSpec, weight_format: str, expert_intermediate_ranks: int, version: str) -> str | None:
    """vLLM's refusal to load a compressed-tensors WNA16 MoE checkpoint at a layout, in its words (0.33.0), where
    the experts' intermediate per rank (the expert intermediate over the ranks that split it: TP x DP without
    expert parallel, 1 with it) or the hidden size breaks a group of the checkpoint's group scales, or (asymmetric,
    0.29 on) the packed zero points' int32 words. None where it loads, or where the rule does not apply: another
    method or format, a dense model, a release before 0.24. Whatever the GPU (ROCm's FlyDSL kernel, taken only with
    --moe-backend flydsl on MI355, is not read)."""
    quant = model.quantization
    bits = _WNA16_BITS.get(quant.weight_format) if quant is not None else None
    release = ec.parse_version(version)
    if quant is None or quant.method != "compressed-tensors" or bits is None:
        return None
    if weight_format != stored_format(model).name:  # served in another format (`--dtype`): not these kernels
        return None
    if not model.num_experts or release < WNA16_GROUP_CHECK_FROM:
        return None
    hidden = model.hidden_size
    per_rank = layer_intermediates(model)[2] // max(expert_intermediate_ranks, 1)
    group = quant.group_size
    if group and group > 0:
        if hidden % group:
            return (
                f"CompressedTensors WNA16 MoE requires hidden_size ({hidden}) to be divisible by group_size ({group})."
            )
        if per_rank % group:
            return (
                "CompressedTensors WNA16 MoE with static group scales requires the MoE intermediate size per "
                f"tensor-parallel partition ({per_rank}) to be divisible by group_size ({group}). Scale groups would "
                "otherwise cross TP shard boundaries; use a compatible TP size or enable expert parallelism."
            )
    packed = 32 // bits
    if not quant.group_zero_points or release < WNA16_ZERO_POINT_CHECK_FROM:
        return None
    if 2 * per_rank % packed:
        return (
            "CompressedTensors WNA16 MoE: gate+up output channels per TP rank (2 * intermediate_size_per_partition = "
            f"{2 * per_rank}) must be divisible by packed_factor ({packed}). Use a TP size where 2 * intermediate_size "
            f"is divisible by {packed}."
        )
    if hidden % packed:
        return (
            f"CompressedTensors WNA16 MoE: hidden_size ({hidden}) must be divisible by packed_factor ({packed}) for "
            "correct ZP unpacking."
        )
    return None
