"""MXFP4 experts as vLLM's fused-MoE backends keep them (capacity/engines/vllm/weights.py).

Expected numbers: hand derivations from the padding rules read in the vLLM wheels, the public
startup logs' "Model loading took X GiB" (evaluation/data/vllm_public_measurements.yaml), and, under the
engine_oracle marker, triton_kernels' own Hopper layouts (vLLM 0.33.0's bundled copy) run on torch's
meta device.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from capacity import engine_constants as ec
from capacity.dtypes import GIB
from capacity.engines.vllm.weights import Mxfp4Backend, expert_layer_bytes, expert_layout, mxfp4_backend
from capacity.estimate import estimate
from capacity.spec import DeploymentSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from tests.conftest import ORACLE_PYTHON, require_oracle_venv

GPT_OSS_EXPERTS = {"20b": (32, 24), "120b": (128, 36)}  # (experts, layers); I = H = 2880 in both
HIDDEN = INTERMEDIATE = 2880


def _weights_gib(repo: str, gpu: str, tp: int, version: str, triton_kernels: bool | None = None) -> float:
    resolved = load_model(repo)
    est = estimate(resolved.spec, DeploymentSpec(tp=tp, engine_version=version, triton_kernels=triton_kernels),
                   gpu=find_gpu_sku(gpu),
                   checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    return est.weights_bytes_per_gpu / GIB


def test_backend_per_gpu_class() -> None:
    assert mxfp4_backend(find_gpu_sku("H100")) is Mxfp4Backend.TRITON_HOPPER
    assert mxfp4_backend(find_gpu_sku("A100-80GB")) is Mxfp4Backend.MARLIN
    assert mxfp4_backend(find_gpu_sku("L4")) is Mxfp4Backend.MARLIN
    assert mxfp4_backend(find_gpu_sku("B200")) is Mxfp4Backend.FLASHINFER_TRTLLM
    assert mxfp4_backend(None) is Mxfp4Backend.TRITON


def test_hopper_runs_marlin_until_triton_kernels_is_bundled() -> None:
    """0.10.1.1-0.11.2 wheels neither vendor nor require triton_kernels (Marlin on SM90 without it); 0.10.1.1's
    Triton path also wants torch 2.8 while the wheel pins 2.7.1; 0.12.0 vendors the package."""
    h100 = find_gpu_sku("H100")
    assert mxfp4_backend(h100, "0.10.1.1") is Mxfp4Backend.MARLIN
    assert mxfp4_backend(h100, "0.10.1.1", triton_kernels=True) is Mxfp4Backend.MARLIN
    assert mxfp4_backend(h100, "0.11.0") is Mxfp4Backend.MARLIN
    assert mxfp4_backend(h100, "0.11.2", triton_kernels=True) is Mxfp4Backend.TRITON_HOPPER
    assert mxfp4_backend(h100, "0.12.0") is Mxfp4Backend.TRITON_HOPPER
    assert mxfp4_backend(h100, "0.12.0", triton_kernels=True) is Mxfp4Backend.TRITON_HOPPER  # bundled
    # a log that shows Marlin (VLLM_MXFP4_USE_MARLIN=1, read in the 0.12.0 get_mxfp4_backend) is taken as it is
    assert mxfp4_backend(h100, "0.12.0", triton_kernels=False) is Mxfp4Backend.MARLIN
    # Marlin pads H 2880 -> 3072 and I 2880 -> 2944 (17/32 B a value): 1.7 GiB more than the Triton layout
    marlin = _weights_gib("openai/gpt-oss-120b", "H100", 1, "0.11.0")
    triton = _weights_gib("openai/gpt-oss-120b", "H100", 1, "0.11.0", triton_kernels=True)
    assert 1.4 < marlin - triton < 2.0


def test_the_estimate_names_the_triton_kernels_assumption() -> None:
    resolved = load_model("openai/gpt-oss-120b")
    h100 = find_gpu_sku("H100")
    unstated = estimate(resolved.spec, DeploymentSpec(engine_version="0.11.0", max_model_len=8192), gpu=h100,
                        checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    assert any("triton_kernels" in note and "Marlin" in note for note in unstated.notes), unstated.notes
    stated = estimate(resolved.spec, DeploymentSpec(engine_version="0.11.0", max_model_len=8192, triton_kernels=True),
                      gpu=h100, checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    assert not any("triton_kernels" in note for note in stated.notes)
    assert stated.weights_bytes_per_gpu < unstated.weights_bytes_per_gpu
    newer = estimate(resolved.spec, DeploymentSpec(engine_version="0.12.0", max_model_len=8192), gpu=h100,
                     checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    assert not any("triton_kernels" in note for note in newer.notes)


def test_marlin_pads_intermediate_to_128_and_hidden_to_256() -> None:
    """gpt-oss-120b at TP 4 on A100: I/TP = 720 -> 768, H = 2880 -> 3072; 17/32 B per element,
    biases (2I + H per expert) in bf16."""
    layout = expert_layout(find_gpu_sku("A100-80GB"), "0.10.1.1")
    kept, checkpoint = expert_layer_bytes(128, INTERMEDIATE, HIDDEN, 4, layout, biased=True)
    assert kept == 128 * 3 * 768 * 3072 * 17 // 32 + 128 * (2 * 768 + 3072) * 2
    assert checkpoint == 128 * 3 * 720 * 2880 * 17 // 32 + 128 * (2 * 720 + 2880) * 2


def test_trtllm_padding_changed_at_0_27() -> None:
    b200 = find_gpu_sku("B200")
    assert (expert_layout(b200, "0.26.0").intermediate_multiple,
            expert_layout(b200, "0.27.0").intermediate_multiple) == (256, 128)  # fmt: skip


def test_hopper_triton_kept_the_checkpoint_scales_before_0_25() -> None:
    """vllm#46549 (0.25.0) frees the block scales once swizzled: E x 3 x I x H / 32 bytes per layer."""
    h100 = find_gpu_sku("H100")
    old = expert_layer_bytes(128, INTERMEDIATE, HIDDEN, 1, expert_layout(h100, "0.24.0"), False)[0]
    new = expert_layer_bytes(128, INTERMEDIATE, HIDDEN, 1, expert_layout(h100, "0.25.0"), False)[0]
    assert old - new == 128 * 3 * INTERMEDIATE * HIDDEN // 32


@pytest.mark.parametrize(
    ("row", "repo", "gpu", "tp", "version", "logged_gib"),
    [
        # dennislee22/vLLM-benchmarking, 0.10.1.1, A100 80GB, TP 4 (Marlin)
        ("dennislee-v01011-gpt-oss-120b-a100-tp4-multinode", "openai/gpt-oss-120b", "A100-80GB", 4, "0.10.1.1", 17.22),
        # myoceane.fr, 0.19.0, A100 (Marlin)
        ("myoceane-v0190-gpt-oss-20b-a100-131k-util065", "openai/gpt-oss-20b", "A100-80GB", 1, "0.19.0", 13.72),
        # llm-d-benchmark summary, H100 (Triton, scales kept; version not stated: 0.12-0.16 inferred)
        ("llmd-bench-gpt-oss-120b-h100-tp1-16000", "openai/gpt-oss-120b", "H100", 1, "0.12", 64.38),
        ("llmd-bench-gpt-oss-20b-h100-tp1-16000", "openai/gpt-oss-20b", "H100", 1, "0.12", 13.47),
        # vllm#23278, H100, the 0.10.1 era: the log prints Marlin's weight-only FP4 warning
        ("vllm23278-gpt-oss-120b-h100-tp1-failed", "openai/gpt-oss-120b", "H100", 1, "0.10.1.1", 65.9651),
        ("vllm23278-gpt-oss-120b-h100-tp1-failed", "openai/gpt-oss-120b", "H100", 1, "0.11.0", 65.9651),
        # llm-d-planner raw log, 0.19.0, H100, TP 2
        ("llmd-planner-v0190-gpt-oss-20b-h100-tp2-8k", "openai/gpt-oss-20b", "H100", 2, "0.19.0", 7.01),
    ],
)
def test_weights_match_the_logged_model_loading(
    row: str, repo: str, gpu: str, tp: int, version: str, logged_gib: float
) -> None:
    """Within 3 % of "Model loading took X GiB" (the checkpoint's format alone misses by 4-14 %)."""
    assert _weights_gib(repo, gpu, tp, version) == pytest.approx(logged_gib, rel=0.03), row


def test_grid_weights_follow_the_gpu() -> None:
    from capacity.grid import GridModel, build_capacity_grid

    resolved = load_model("openai/gpt-oss-20b")
    gpus = [find_gpu_sku(g) for g in ("H100", "A100-80GB")]
    grid = build_capacity_grid([GridModel("openai/gpt-oss-20b", resolved.spec, resolved.checkpoint_bytes)], gpus)
    rows = grid.filter(engine="vllm", tp=1, dp=1, weight_dtype="auto", kv_dtype="auto").collect()
    by_gpu = dict(zip(rows["gpu"].to_list(), rows["weights_bytes_per_gpu"].to_list(), strict=True))
    for gpu in gpus:
        assert by_gpu[gpu.id] == round(_weights_gib("openai/gpt-oss-20b", gpu.id, 1, ec.VLLM_DEFAULT_VERSION) * GIB)


_ORACLE = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from triton_kernels.tensor_details.layout_details.hopper_value import HopperMXValueLayout
from triton_kernels.tensor_details.layout_details.hopper_scale import HopperMXScaleLayout
def swizzled(e, n, k):
    # vLLM 0.33 _swizzle_mxfp4 on SM90: scale groups padded to 0 mod 4, both transposed, then the layouts
    w = torch.empty(e, n, k // 2, dtype=torch.uint8, device="meta")
    s = torch.empty(e, n, k // 32, dtype=torch.uint8, device="meta")
    s = torch.nn.functional.pad(s, (0, -s.shape[-1] % 4))
    w, s = w.transpose(-2, -1), s.transpose(-2, -1)
    w = HopperMXValueLayout(w.shape, mx_axis=1).swizzle_data(w)
    s = HopperMXScaleLayout(s.shape, mx_axis=1, num_warps=8).swizzle_data(s)
    return w.numel() * w.element_size() + s.numel() * s.element_size()
out = {}
for e, i in json.loads(sys.argv[2]):
    out[f"{e}/{i}"] = swizzled(e, 2 * i, 2880) + swizzled(e, 2880, i)
print(json.dumps(out))
"""


@pytest.mark.engine_oracle
def test_hopper_layout_sizes_equal_triton_kernels() -> None:
    """The swizzled bytes of one layer's experts (w13 and w2) at TP 1-8, from triton_kernels itself."""
    require_oracle_venv()
    third_party = subprocess.run(
        [str(ORACLE_PYTHON), "-c", "import vllm, pathlib; print(pathlib.Path(vllm.__file__).parent / 'third_party')"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout.strip()  # fmt: skip
    layout = expert_layout(find_gpu_sku("H100"), "0.33.0")
    cases = [(e, tp) for e, _ in GPT_OSS_EXPERTS.values() for tp in (1, 2, 4, 8)]
    # what the oracle swizzles: the per-rank intermediate after vLLM's round-up to 64 (mxfp4.py)
    shapes = [(e, -(-(INTERMEDIATE // tp) // 64) * 64) for e, tp in cases]
    done = subprocess.run([str(ORACLE_PYTHON), "-c", _ORACLE, third_party, json.dumps(shapes)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = json.loads(done.stdout)
    for (e, tp), (_, i_pad) in zip(cases, shapes, strict=True):
        kept = expert_layer_bytes(e, INTERMEDIATE, HIDDEN, tp, layout, biased=False)[0]
        assert kept == sizes[f"{e}/{i_pad}"], (e, tp)


def test_no_extra_without_mxfp4_experts() -> None:
    resolved = load_model("Qwen/Qwen3-30B-A3B")
    est = estimate(resolved.spec, DeploymentSpec(), gpu=find_gpu_sku("A100-80GB"), checkpoint_bytes=resolved.checkpoint_bytes)
    assert not any("MXFP4" in note for note in est.notes)
    bf16 = estimate(load_model("openai/gpt-oss-20b").spec, DeploymentSpec(weight_dtype="bf16"), gpu=find_gpu_sku("A100-80GB"))
    assert not any("MXFP4" in note for note in bf16.notes)  # served as bf16: no MXFP4 layout


def test_no_triton_kernels_note_when_the_experts_are_not_mxfp4() -> None:
    """Served as bf16, the checkpoint's MXFP4 layouts do not apply, and neither does the assumption."""
    resolved = load_model("openai/gpt-oss-20b")
    est = estimate(resolved.spec, DeploymentSpec(engine_version="0.11.0", weight_dtype="bf16", max_model_len=8192),
                   gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)  # fmt: skip
    assert not any("triton_kernels" in note for note in est.notes)
