"""vLLM's own model classes, built on the meta device: the weight bytes one tensor-parallel rank holds (oracle runner).

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh), never the project venv: it
imports vLLM. One JSON document on stdin:

    {"cases": {name: {"config": {... a config.json ...}, "tp": N}}}

and it prints one JSON line after `@@weight-shards-oracle@@ `: {"vllm_version", "ranks": {name: {"bytes": B,
"parameters": P, "shape_record_bytes": S} or {"refused": the ValueError's message}}}, the parameters of rank 0 as the release's model class (the config's `architectures`)
creates them for its own `ModelConfig` (the config's dtype), summed over `named_parameters()` (each tensor once).
How each projection shards (ColumnParallelLinear, RowParallelLinear, QKVParallelLinear's KV head copies,
ReplicatedLinear, VocabParallelEmbedding, FusedMoE's TP split) is the release's own code: a single gloo process
stands in for the TP group, and the TP size and rank the layers read (`get_tensor_model_parallel_world_size` /
`_rank`, as each module imported them) answer N and 0, so every layer is built as rank 0 of N builds it. What the
CPU package cannot select is stubbed, none of which holds weights: the attention layers (the KV cache's owners; the
projections around them belong to the model's own modules), the attention backend, the fused-MoE kernel backend
(unquantized and compressed-tensors WNA16: chosen per GPU, `create_weights` allocates the checkpoint's own layout
whatever it is) and the packed-linear GEMM kernel (chosen per GPU after the layer has allocated its packed weight,
scales and zero points). A config's quantization block is kept: the release's own quantization methods allocate
the quantized layers. No vLLM code is copied.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from vllm_tp_rank import patch_tp

MARK = "@@weight-shards-oracle@@ "


class _AttentionWithoutWeights(torch.nn.Module):
    """Stands in for vLLM's Attention / MLAAttention: they own the KV cache, not the projections."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()


class _KernelNotChosen:
    """Stands in for the packed-weight GEMM kernel (chosen per GPU); it creates no weight."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _stub_backends(model_module: Any) -> None:
    """The GPU-dependent choices the CPU package cannot make, none of which creates a weight."""
    import vllm.model_executor.layers.fused_moe.oracle.unquantized as moe_oracle
    import vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method as moe_method
    import vllm.model_executor.layers.mla as mla_module
    import vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_wna16 as wna16_method
    import vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_wNa16 as wna16_linear
    from vllm.model_executor.layers.fused_moe.oracle.int_wna16 import WNA16MoEBackend

    triton = moe_oracle.UnquantizedMoeBackend.TRITON
    moe_method.select_unquantized_moe_backend = lambda moe_config: (triton, None)  # type: ignore[attr-defined]
    # compressed-tensors' INT4 / INT8 experts: `create_weights` allocates the checkpoint's own layout (N-first packed
    # weights, group scales, zero points when asymmetric) whatever kernel runs them later
    wna16_method.select_wna16_moe_backend = lambda **kwargs: (WNA16MoEBackend.TRITON, None)  # type: ignore[attr-defined]
    # and a packed linear layer allocates its weight, scales and zero points itself before it hands them to a kernel
    wna16_linear.choose_mp_linear_kernel = lambda config: _KernelNotChosen  # type: ignore[attr-defined]
    for module in (model_module, mla_module):
        for name in ("Attention", "MLAAttention"):
            if hasattr(module, name):
                setattr(module, name, _AttentionWithoutWeights)


def _rank_parameters(config: dict[str, Any], tp: int) -> dict[str, int]:
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture
    from vllm.utils.torch_utils import set_default_torch_dtype

    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(config))
        model_config = ModelConfig(model=folder, skip_tokenizer_init=True, enforce_eager=True)
        vllm_config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"))
        with set_current_vllm_config(vllm_config):
            model_class, _ = get_model_architecture(model_config)
            _stub_backends(sys.modules[model_class.__module__])
            patch_tp(tp)
            with set_default_torch_dtype(model_config.dtype), torch.device("meta"):
                model = model_class(vllm_config=vllm_config, prefix="")
    parameters = list(model.named_parameters())
    return {
        "bytes": sum(p.numel() * p.element_size() for _, p in parameters),
        "parameters": sum(p.numel() for _, p in parameters),
        # packed formats record each weight's unpacked shape (2 values a linear module, 2 an expert and projection)
        "shape_record_bytes": sum(p.numel() * p.element_size() for name, p in parameters if name.endswith("weight_shape")),
    }


def main() -> None:
    cases = json.load(sys.stdin)["cases"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    import vllm
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.platforms import current_platform

    def attention_backend(*args: Any, attn_selector_config: Any = None, **kwargs: Any) -> str:
        if attn_selector_config is not None and attn_selector_config.use_mla:
            return "vllm.v1.attention.backends.mla.cpu_mla.CPUMLABackend"
        return "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"

    type(current_platform).get_attn_backend_cls = classmethod(  # type: ignore[method-assign,assignment]
        lambda cls, *a, **k: attention_backend(*a, **k)
    )
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method="tcp://127.0.0.1:0", backend="gloo"
        )
        initialize_model_parallel(1, 1)
    ranks = {name: _refused_or_built(case["config"], int(case["tp"])) for name, case in cases.items()}
    print(MARK + json.dumps({"vllm_version": vllm.__version__, "ranks": ranks}))


def _refused_or_built(config: dict[str, Any], tp: int) -> dict[str, Any]:
    """The rank's parameters, or {"refused": the message} where the release's own code refuses to create the layers
    (a quantization method's `create_weights` raising ValueError at this TP size)."""
    try:
        return _rank_parameters(config, tp)
    except ValueError as error:
        return {"refused": str(error)}


if __name__ == "__main__":
    main()
