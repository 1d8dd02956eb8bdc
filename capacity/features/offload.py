"""KV offload tiers and weight offload (issue 23 items 2 and 7): what each engine's offload takes on the GPU,
what each lower tier holds, and what a hit there costs against recomputing the prefix.

Pure rules, no I/O, read per release from the engines' source:

* weights (`--cpu-offload-gb`, vLLM 0.33 and SGLang 0.5.23 alike): `UVAOffloader` / `OffloaderV1`
  (vllm/model_executor/offloader/uva.py `_maybe_offload_to_cpu`, sglang/srt/utils/offloader.py) move whole
  parameters of the decoder layers `make_layers` wraps to pinned host memory until the GiB per GPU are
  reached: the GPU's weights shrink by that much, never by more than its decoder layers hold.
* vLLM native (`--kv-offloading-size GIB`, backend native): `VllmConfig._post_init_kv_transfer_config`
  makes an `OffloadingConnector` with `cpu_bytes_to_use = GiB x 2**30`, summed over the TP ranks;
  `CPUOffloadingSpec.__init__` (v1/kv_offload/cpu/spec.py) cuts it in chunks of
  `round_up(worker bytes per block x copies x blocks_per_chunk, mmap.PAGESIZE)`. The connector is built in
  `Worker.initialize_from_config` after the KV pool is sized, and holds no GPU tensor of its size: the GPU
  pool does not change.
* LMCache (`--kv-transfer-config '{"kv_connector":"LMCacheConnectorV1"}'`, lmcache 0.5.6): the GPU connector
  (lmcache/v1/gpu_connector/gpu_connectors.py `VLLMPagedMemGPUConnectorV2.__init__`, `get_shape`) keeps a
  staging buffer of [2 (1 for MLA), layers, chunk_size, kv heads x head size] per rank, built with the
  connector after vLLM 0.33 sized its pool: it comes out of the headroom the memory utilization leaves. Its
  CPU tier is `max_local_cpu_size` GiB per rank (LMCACHE_MAX_LOCAL_CPU_SIZE, default 5.0; cache_engine.py
  `int(size * 1024**3)`), its disk tier `max_local_disk_size` (default 0).
* SGLang HiCache (`--enable-hierarchical-cache`): the host pool (mem_cache/pool_host/base.py
  `HostKVCache.__init__`) is `--hicache-size` GB (1e9 bytes) / bytes per token, else the device pool's tokens
  x `--hicache-ratio` (default 2.0, arg_groups/hicache_hook.py), plus one page; with the default
  `page_first` layout an MHA pool first gets a write-back staging buffer of 64 pages on the GPU
  (kv_cache_builder.py `prepare_hicache_staging`, pool_host/mha.py `prepare_mha_write_back_staging`), taken
  before the KV budget is measured. The page size and memory fraction do not change.
* TensorRT-LLM (`kv_cache_config.host_cache_size` bytes): a secondary pool in host memory of
  `host_cache_size / bytes per token // tokens_per_block` blocks per rank (cpp/tensorrt_llm/batch_manager/
  kvCacheManager.cpp `BaseKVCacheManager::calculateMaxNumBlocks`); the primary (GPU) pool is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

# the engines' GiB (vLLM `kv_offloading_size * (1 << 30)`, `cpu_offload_gb * 1024**3`, LMCache `size * 1024**3`);
# capacity.dtypes' GIB is the same number, but dtypes reads capacity.spec, which names these specs
GIB = 1 << 30

# vLLM's chunk alignment: SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE (4 KiB on x86-64 Linux)
PAGE_ALIGNMENT_BYTES = 4096
LMCACHE_DEFAULT_CPU_GIB = 5.0  # lmcache/v1/config.py max_local_cpu_size default
LMCACHE_DEFAULT_CHUNK_TOKENS = 256  # lmcache/v1/config.py chunk_size default
HICACHE_DEFAULT_RATIO = 2.0  # arg_groups/hicache_hook.py handle_hicache_ratio_default (cache mode)
HICACHE_STAGING_PAGES = 64  # mem_cache/pool_host/base.py _WRITE_BACK_STAGING_PAGE_CHUNK
HICACHE_SIZE_UNIT_BYTES = 10**9  # --hicache-size is read as int(host_size * 1e9 // size_per_token)


class Medium(Enum):
    """Where a tier keeps its tokens, and what a hit there travels over to reach the GPU."""

    GPU = "gpu"
    HOST_RAM = "host_ram"
    NVME = "nvme"

    @property
    def label(self) -> str:
        """What the text output calls it."""
        return {"gpu": "GPU memory", "host_ram": "host RAM", "nvme": "local NVMe"}[self.value]


@dataclass(frozen=True, slots=True)
class KVTier:
    """One tier of a deployment's KV cache, per GPU: what it holds and what it takes."""

    name: str  # what the engine calls it ("GPU pool", "CPU offload (OffloadingConnector)", ...)
    medium: Medium
    tokens: int  # tokens of KV this tier holds for one GPU's share of the model
    bytes_per_gpu: int  # memory of that medium held for each GPU
    # what a hit here costs: ms to bring 1,000 tokens to each GPU over the host link (None: GPU, or not known)
    load_ms_per_1k_tokens: float | None = None
    gpu_bytes_per_gpu: int = 0  # GPU memory the tier's machinery holds (staging buffers), on the tier that needs it

    def contract(self) -> dict[str, object]:
        return {
            "tier": self.name,
            "medium": self.medium.value,
            "tokens": self.tokens,
            "bytes": self.bytes_per_gpu,
            "load_ms_per_1k_tokens": self.load_ms_per_1k_tokens,
            "gpu_bytes": self.gpu_bytes_per_gpu,
        }


@dataclass(frozen=True, slots=True)
class OffloadSizing:
    """What a KV offload rule reads from the estimate: the GPU pool as sized and the KV's layout."""

    kv_bytes_per_token_per_gpu: int
    pool_tokens: int  # tokens the GPU pool holds
    block_bytes: int  # bytes of one pool block per GPU (vLLM's worker_kv_bytes_per_block)
    block_size: int  # tokens per block (SGLang: the page size)
    tp: int
    pp: int
    is_mla: bool


@dataclass(frozen=True, slots=True)
class WeightOffload:
    """`--cpu-offload-gb`: GiB of weights per GPU kept in pinned host memory (None: an amount not known,
    as a telemetry row that only says offload was on)."""

    gib_per_gpu: float | None

    def offloaded_bytes(self, decoder_bytes_per_gpu: int) -> int:
        """Bytes of weights that leave each GPU: the request, capped at the decoder layers the offloader
        wraps (whole parameters are moved, so vLLM may pass the request by up to one parameter)."""
        if self.gib_per_gpu is None:
            return 0
        return min(int(self.gib_per_gpu * GIB), max(decoder_bytes_per_gpu, 0))

    def unmodelled(self) -> str | None:
        return "CPU offload of an unknown amount of weights" if self.gib_per_gpu is None else None


@dataclass(frozen=True, slots=True)
class ExpertOffload:
    """KTransformers on SGLang (`--kt-weight-path`): every MoE layer keeps routed experts 0 .. N-1 on the GPU, in the
    checkpoint's format, and runs the others on the CPU from their own copy at the weight path (SGLang 0.5.23
    srt/layers/moe/kt_ep_wrapper.py: `KTEPWrapperMethod.create_weights` creates `num_gpu_experts` experts with the
    wrapped GPU method, `KTMoEWrapper` the rest). N is `--kt-num-gpu-experts` (None: not given; the engine has no
    default for it)."""

    gpu_experts_per_layer: int | None
    cpu_method: str | None = None  # --kt-method: the CPU copy's format (host memory, not sized)

    def kept(self, num_experts: int) -> int:
        """Routed experts of each MoE layer on the GPU (all of them where the count is not given)."""
        if self.gpu_experts_per_layer is None:
            return num_experts
        return min(max(self.gpu_experts_per_layer, 0), num_experts)

    def gpu_share(self, num_experts: int) -> Fraction:
        """The share of each MoE layer's routed experts that stays on the GPU."""
        return Fraction(self.kept(num_experts), num_experts) if num_experts else Fraction(1)

    def note(self, num_experts: int) -> str:
        if self.gpu_experts_per_layer is None:
            return "KTransformers without --kt-num-gpu-experts: sized with every routed expert on the GPU"
        kept = self.kept(num_experts)
        method = f", {self.cpu_method}" if self.cpu_method else ""
        return (
            f"KTransformers: {kept} of {num_experts} routed experts per MoE layer on the GPU, the other "
            f"{num_experts - kept} on the CPU (their copy at --kt-weight-path{method}: host memory, not sized); "
            "the speed figures do not model the CPU experts"
        )

    def unmodelled(self) -> str | None:
        if self.gpu_experts_per_layer is None:
            return "KTransformers CPU experts without --kt-num-gpu-experts (the GPU's share of the experts)"
        return None


class KVOffload:
    """A lower KV tier behind the GPU pool; each engine's offload answers for its own memory."""

    label: str
    # vLLM: the connector does not subclass SupportsHMA, so `VllmConfig` turns the hybrid KV cache manager off
    # (sliding-window layers charged as full attention; hybrid SSM models fail at startup)
    disables_hybrid_manager: bool = False

    def pool_gpu_bytes(self, s: OffloadSizing) -> int:
        """GPU bytes taken before the pool is sized (they shrink the KV budget)."""
        return 0

    def headroom_gpu_bytes(self, s: OffloadSizing) -> int:
        """GPU bytes taken after the pool is sized (out of what the memory utilization leaves)."""
        return 0

    def tiers(self, s: OffloadSizing) -> tuple[KVTier, ...]:
        """The lower tiers, per GPU."""
        return ()

    def unmodelled(self) -> str | None:
        """Why this offload is not sized (None: it is)."""
        return None

    def extensible_kv_cache_off(self, rocm: bool) -> str | None:
        """Why vLLM 0.34 turns its extensible KV cache off for this connector (None: it keeps it; the
        OffloadingConnector and LMCacheConnectorV1 reach the cache in process)."""
        return None


@dataclass(frozen=True, slots=True)
class VllmNativeOffload(KVOffload):
    """vLLM `--kv-offloading-size GIB` (backend native): the OffloadingConnector's CPU tier."""

    host_gib_total: float  # summed over the TP ranks (CacheConfig.kv_offloading_size)
    blocks_per_chunk: int = 1  # kv_connector_extra_config blocks_per_chunk
    chunk_tokens: int | None = None  # kv_connector_extra_config block_size: tokens a chunk (then // the block size)
    label: str = "vLLM native CPU offload (OffloadingConnector)"

    def chunk_blocks(self, s: OffloadSizing) -> int:
        """Blocks a chunk (offloading/config.py: block_size // tokens_per_block, else blocks_per_chunk)."""
        return max(self.chunk_tokens // max(s.block_size, 1), 1) if self.chunk_tokens else self.blocks_per_chunk

    def chunks(self, s: OffloadSizing) -> int:
        """CPUOffloadingSpec.num_chunks: an MLA latent at TP > 1 is stored once (replicated_layout)."""
        world = s.tp * s.pp
        copies = 1 if s.is_mla and s.tp > 1 and s.pp == 1 else world
        chunk_bytes = s.block_bytes * copies * self.chunk_blocks(s)
        aligned = -(-chunk_bytes // PAGE_ALIGNMENT_BYTES) * PAGE_ALIGNMENT_BYTES
        return int(self.host_gib_total * GIB) // aligned if aligned else 0

    def tiers(self, s: OffloadSizing) -> tuple[KVTier, ...]:
        tokens = self.chunks(s) * self.chunk_blocks(s) * s.block_size
        return (
            KVTier(
                "CPU offload (OffloadingConnector)",
                Medium.HOST_RAM,
                tokens,
                int(self.host_gib_total * GIB) // (s.tp * s.pp),
            ),
        )


@dataclass(frozen=True, slots=True)
class LMCacheOffload(KVOffload):
    """LMCache in vLLM (`LMCacheConnectorV1`): its GPU staging buffer, its CPU and disk tiers per rank."""

    cpu_gib: float = LMCACHE_DEFAULT_CPU_GIB
    disk_gib: float = 0.0
    chunk_tokens: int = LMCACHE_DEFAULT_CHUNK_TOKENS
    label: str = "LMCache (LMCacheConnectorV1)"
    disables_hybrid_manager: bool = True  # LMCacheConnectorV1 is not SupportsHMA (OffloadingConnector is)

    def headroom_gpu_bytes(self, s: OffloadSizing) -> int:
        """The GPU connector's `gpu_buffer`: chunk_size tokens of every layer's K and V (MLA: the latent)."""
        return self.chunk_tokens * s.kv_bytes_per_token_per_gpu

    def tiers(self, s: OffloadSizing) -> tuple[KVTier, ...]:
        per_token = max(s.kv_bytes_per_token_per_gpu, 1)
        out = [
            KVTier("LMCache local CPU", Medium.HOST_RAM, int(self.cpu_gib * GIB) // per_token, int(self.cpu_gib * GIB))
        ]
        if self.disk_gib > 0:
            out.append(
                KVTier(
                    "LMCache local disk", Medium.NVME, int(self.disk_gib * GIB) // per_token, int(self.disk_gib * GIB)
                )
            )
        return tuple(out)


@dataclass(frozen=True, slots=True)
class HiCacheOffload(KVOffload):
    """SGLang `--enable-hierarchical-cache`: a host pool of `--hicache-size` GB, else ratio x the device pool."""

    ratio: float = HICACHE_DEFAULT_RATIO
    size_gb: int = 0  # --hicache-size: overrides the ratio when > 0
    page_first: bool = True  # --hicache-mem-layout page_first (the default): GPU write-back staging
    label: str = "SGLang HiCache"

    def pool_gpu_bytes(self, s: OffloadSizing) -> int:
        """The MHA write-back staging: K and V of 64 pages of every layer, made before the KV budget is read."""
        if not self.page_first or s.is_mla:
            return 0
        return HICACHE_STAGING_PAGES * s.block_size * s.kv_bytes_per_token_per_gpu

    def host_tokens(self, s: OffloadSizing) -> int:
        """HostKVCache.size: the GB over bytes per token, else the device tokens x ratio; plus one page."""
        page = max(s.block_size, 1)
        per_token = max(s.kv_bytes_per_token_per_gpu, 1)
        size = (
            self.size_gb * HICACHE_SIZE_UNIT_BYTES // per_token if self.size_gb > 0 else int(s.pool_tokens * self.ratio)
        )
        return (size // page + 1) * page

    def tiers(self, s: OffloadSizing) -> tuple[KVTier, ...]:
        tokens = self.host_tokens(s)
        return (KVTier("HiCache host pool", Medium.HOST_RAM, tokens, tokens * s.kv_bytes_per_token_per_gpu),)


@dataclass(frozen=True, slots=True)
class TrtllmHostCache(KVOffload):
    """TensorRT-LLM `kv_cache_config.host_cache_size`: a secondary block pool in host memory."""

    host_bytes: int
    label: str = "TensorRT-LLM host cache"

    def tiers(self, s: OffloadSizing) -> tuple[KVTier, ...]:
        """calculateMaxNumBlocks: (host bytes // bytes per token) // tokens per block, = host // block bytes."""
        blocks = self.host_bytes // max(s.block_bytes, 1)
        return (KVTier("TensorRT-LLM host cache", Medium.HOST_RAM, blocks * s.block_size, self.host_bytes),)


@dataclass(frozen=True, slots=True)
class UnsizedConnector(KVOffload):
    """A KV connector capplan does not size (NIXL, Mooncake, LMCache's multi-process server, ...)."""

    name: str = "a KV connector"
    label: str = "KV connector"

    def unmodelled(self) -> str | None:
        return f"{self.name} (--kv-transfer-config: its GPU buffers)"

    def extensible_kv_cache_off(self, rocm: bool) -> str | None:
        """0.34 config/vllm.py `_resolve_extensible_kv_cache` over the connector's `kv_cache_access`:
        LMCacheMPConnector shares the cache through legacy CUDA IPC; NixlConnector exports it through FABRIC handles,
        which need an IMEX channel (NVL72 racks have one: there the cache stays extensible); on ROCm, connectors that
        register the cache with UCX / RDMA (NIXL, Mooncake, MoRIIO, UMBP) cannot use driver-mapped memory.
        A MultiConnector's children are not read."""
        name = self.name.split(" ", 1)[0]
        if name == "LMCacheMPConnector":
            return "LMCacheMPConnector shares the KV cache through legacy CUDA IPC"
        if rocm and name in _ROCM_REGISTERING_CONNECTORS:
            return f"on ROCm, {name} registers the KV cache with UCX / RDMA, which cannot use driver-mapped memory"
        if name == "NixlConnector":
            return "NixlConnector exports the KV cache through FABRIC handles, which need an IMEX channel (NVL72 racks)"
        return None


# 0.34 connectors whose `kv_cache_access` holds REGISTERS (each needs one physical allocation a segment)
_ROCM_REGISTERING_CONNECTORS = frozenset(
    {"NixlConnector", "MooncakeConnector", "MooncakeStoreConnector", "MoRIIOConnector", "UMBPConnector"}
)


def host_link_gbps(
    gpu_name: str, interconnect: str | None, interconnect_gbps: float | None, architecture: str | None
) -> float:
    """GB/s one direction between a GPU and its host memory: NVLink-C2C on Grace superchips (450 GB/s per
    direction, NVIDIA GH200/GB200 datasheets), the card's own PCIe link where the catalog's interconnect is
    PCIe, else the PCIe x16 generation of its architecture (Gen3 16, Gen4 32, Gen5 64 GB/s)."""
    link = (interconnect or "").lower()
    name = gpu_name.lower()
    if "c2c" in link or any(chip in name for chip in ("gh200", "gb200", "gb300")):
        return 450.0
    if link.startswith("pcie") and interconnect_gbps:
        return float(interconnect_gbps)
    arch = (architecture or "").lower()
    if arch in ("volta", "turing"):
        return 16.0
    if arch in ("ampere", "ada"):
        return 32.0
    return 64.0


def hit_load_seconds(tokens: int, kv_bytes_per_token_per_gpu: int, link_gbps: float) -> float:
    """Seconds to bring `tokens` of KV from a lower tier to each GPU (every GPU loads its own share at once)."""
    return tokens * kv_bytes_per_token_per_gpu / (link_gbps * 1e9)
