"""How a model splits over GPUs: layers per pipeline stage, the valid tensor-parallel sizes.

Per (model, PP) results are memoized by model identity (`memo_per_model`): every deployment of a model
shares them, and hashing a ModelSpec walks every layer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from capacity.memo import per_object
from capacity.spec import GpuSku, LayerKVSpec, ModelSpec, SpecError

_T = TypeVar("_T")


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage, as vLLM splits them (vllm/distributed/utils.py get_pp_indices):
    an even split, the remainder added to the stages before the last (which holds the LM head)."""
    if pp < 1:
        raise SpecError(f"pipeline parallel size must be >= 1, got {pp}")
    if pp > num_layers:
        raise SpecError(f"pipeline parallel size {pp} exceeds the model's {num_layers} layers")
    partitions = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        partitions[-i] += 1
    return partitions


PPPartition = Callable[[int, int], list[int]]


def stage_layers(model: ModelSpec, pp: int, partition: PPPartition = pp_partition) -> tuple[tuple[LayerKVSpec, ...], ...]:
    """The cache-holding layers of each pipeline stage. Stages split the decoder's `num_layers`
    (MLP-only layers of hybrids such as Nemotron-H count there but hold no cache) by the engine's
    `partition` (vLLM's unless told); per model object, as every pool rule of a layout asks."""

    def compute() -> tuple[tuple[LayerKVSpec, ...], ...]:
        stages: list[tuple[LayerKVSpec, ...]] = []
        start = 0
        for count in partition(max(model.num_layers, len(model.layers)), pp):
            stages.append(tuple(layer for layer in model.layers if start <= layer.index < start + count))
            start += count
        return tuple(stages)

    return memo_per_model(f"stage_layers/{partition.__module__}.{partition.__qualname__}", model, pp, compute)


LayerCounts = tuple[tuple[LayerKVSpec, int], ...]

def memo_per_model(name: str, model: ModelSpec, pp: int, compute: Callable[[], _T]) -> _T:
    """Per (model object, pp) results that every deployment of a model shares (`capacity.memo`)."""
    return per_object(model, (name, pp), compute)


def stage_layer_counts(model: ModelSpec, pp: int, partition: PPPartition = pp_partition) -> list[LayerCounts]:
    """Each pipeline stage's layers as (a layer, how many layers share its shape), in order of first
    appearance. Every per-layer rule reads a layer's shape (kind, heads, head dims, window, state
    sizes), never its position, so sums and maxima over these pairs equal those over the layers."""

    def compute() -> list[LayerCounts]:
        stages: list[LayerCounts] = []
        for stage in stage_layers(model, pp, partition):
            counts: dict[Hashable, list[object]] = {}
            for layer in stage:
                key = layer.cache.shape_key
                entry = counts.get(key)
                if entry is None:
                    counts[key] = [layer, 1]
                else:
                    entry[1] += 1  # type: ignore[operator]
            stages.append(tuple((first, n) for first, n in counts.values()))  # type: ignore[misc]
        return stages

    return memo_per_model(f"stage_layer_counts/{partition.__module__}.{partition.__qualname__}", model, pp, compute)


def validate_parallelism(model: ModelSpec, tp: int, pp: int, gpu: GpuSku | None) -> None:
    """TP must divide the attention heads and fit in one node; PP must not exceed the layers."""
    if tp < 1 or pp < 1:
        raise SpecError(f"parallel sizes must be >= 1 (tp={tp}, pp={pp})")
    if model.num_attention_heads % tp:
        raise SpecError(f"tensor parallel size {tp} does not divide the {model.num_attention_heads} attention heads")
    for layer in model.layers:
        heads = layer.cache.uneven_kv_heads(tp)
        if heads is not None:
            raise SpecError(f"tensor parallel size {tp} and {heads} KV heads: neither divides the other")
    if gpu is not None and tp > gpu.gpus_per_node:
        raise SpecError(f"tensor parallel size {tp} exceeds the {gpu.gpus_per_node} GPUs per node of {gpu.id}")
    pp_partition(model.num_layers, pp)


def valid_tp_sizes(model: ModelSpec, sizes: Iterable[int], gpu: GpuSku | None = None, pp: int = 1) -> list[int]:
    """The tensor-parallel sizes that pass `validate_parallelism`, in the order given."""
    valid = []
    for tp in sizes:
        try:
            validate_parallelism(model, tp, pp, gpu)
        except SpecError:
            continue
        valid.append(tp)
    return valid
