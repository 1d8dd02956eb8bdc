"""DP attention, expert parallel and decode context parallel: how the layouts large MoE models are served
with split weights and the KV cache over GPUs (issue 23, item 5).

Read from the engines' source:

* vLLM 0.33 `--data-parallel-size N` (`-dp`): N engine cores, each with its own scheduler and KV pool, each
  a TP group of `tp` GPUs (tp x pp x dp GPUs in all). Attention, the dense MLP, the embedding and the head
  are split by `tp` and replicated per DP rank; the MoE layers are sharded over all dp x tp GPUs
  (model_executor/layers/fused_moe/config.py `FusedMoEParallelConfig.make`: `flatten_tp_across_dp_and_pcp`),
  by tensor parallel, or with `--enable-expert-parallel` whole experts over EP = dp x tp ranks
  (`determine_expert_map`: the first E mod EP ranks hold one expert more). An MLA latent is replicated
  across the TP ranks of one DP rank and not across DP ranks: each rank's pool holds its own requests.
* vLLM `--decode-context-parallel-size D` (`-dcp`, D divides TP: config/parallel.py): every attention layer's
  KV is split token-wise over D of the TP ranks, so a request of L tokens holds cdiv(L, D) tokens per GPU
  (v1/kv_cache_interface.py `FullAttentionSpec.max_memory_usage_bytes`; a block spans block_size x D tokens:
  v1/core/kv_cache_utils.py `resolve_dcp_kv_block_size`) and the printed 'GPU KV cache size' is D times the
  tokens one GPU's blocks hold.
* SGLang 0.5.23 `--enable-dp-attention --dp-size N` (now `--attn-dp-size N`): the `tp` GPUs run attention in N
  groups of tp / N (runtime_context.py `derive_attn_tp_size`), each with its own scheduler and token pool; the
  embedding is split within the attention group (layers/vocab_parallel_embedding.py `get_embedding_tp_kwargs`),
  the LM head, dense MLP (`moe_dense_tp_size` unset) and the MoE layers over all `tp` GPUs (moe_ep_size x
  moe_tp_size = tp). `--max-running-requests` and `--chunked-prefill-size` are the group's, each rank takes
  its N-th (mem_cache/kv_cache_configurator.py, arg_groups/parallel_hook.py).

TensorRT-LLM's attention DP and MoE EP live in `--extra_llm_api_options` and are refused with that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction

from capacity import numeric
from capacity.engines.kinds import Engine
from capacity.numeric import Num
from capacity.pool import KVPool, PoolUnit
from capacity.spec import DeploymentSpec, KVKind, ModelSpec, SpecError
from capacity.weights import WeightShards


@dataclass(frozen=True, slots=True)
class RankLayout:
    """One deployment's parts per GPU: the ranks each part is split over, the DP ranks that each hold a KV
    pool and a scheduler, and the decode-context-parallel split of every request's KV."""

    tp: int  # the deployment's --tp
    attention_tp: int  # ranks one attention layer and its KV are split over
    dense_tp: int  # dense MLP and shared experts
    embedding_tp: int
    head_tp: int
    expert_ranks: int  # GPUs the MoE layers are sharded over
    ep: int  # expert-parallel width: whole experts per rank (1: every expert split by tensor parallel)
    dp: int  # attention data-parallel ranks: a KV pool and a scheduler each
    dcp: int  # decode context parallel: the GPUs one request's KV is split over
    dp_ranks_add_gpus: bool  # each DP rank is a TP group of its own (vLLM), not a share of --tp (SGLang)
    limits_per_group: bool  # max_num_seqs / max_num_batched_tokens given for the DP group, not per rank
    redundant_experts: int = 0  # EPLB's extra physical experts, spread over the EP ranks with the others

    @property
    def plain(self) -> bool:
        """No DP attention, no expert parallel, no DCP: the TP layout every rule already sizes."""
        return self.dp == 1 and self.ep == 1 and self.dcp == 1 and not self.redundant_experts

    def expert_share(self, num_experts: int) -> Fraction:
        """The most loaded GPU's share of the routed experts' parameters: ceil((E + R) / EP) whole experts (R: EPLB's
        redundant copies, each one expert's size: vLLM `determine_expert_counts` + `determine_expert_map`, SGLang
        `ExpertLocationMetadata` num_physical_experts / ep_size), each split over the ranks left beside EP
        (SGLang moe_tp_size)."""
        physical = num_experts + self.redundant_experts
        whole = Fraction(math.ceil(physical / self.ep), num_experts) if num_experts and self.ep > 1 else Fraction(1)
        return whole / (self.expert_ranks // self.ep)

    @property
    def token_exchange_ranks(self) -> int:
        """The ranks an MoE layer's tokens travel between: with EP, or with DP ranks whose tokens meet in the MoE
        layers sharded over all of them (vLLM's all2all backends run for DP > 1 with or without EP: `FusedMoE`
        dispatch/combine; SGLang gathers the DP groups' tokens), all the MoE ranks; else none beyond TP (1)."""
        return self.expert_ranks if self.ep > 1 or self.dp > 1 else 1

    @property
    def moe_dispatch_ranks(self) -> int:
        """The DP ranks whose tokens one MoE layer runs over (vLLM's overhead reads it, `OverheadInputs.
        moe_dp_ranks`): with DP > 1 every rank's batch is gathered before the experts and scattered back after, with
        or without EP, and in the profiling run every rank runs the same dummy batch (`_dummy_run(max_num_tokens)`,
        the sizes all-reduced over the DP group: forward_context.py `DPMetadata.num_tokens_across_dp`), so the
        experts see dp x the rank's batched tokens. 0.10: `FusedMoE.forward_impl` -> `NaiveAll2AllManager.dispatch`
        (a `cu_tokens_across_dp_cpu[-1]` x hidden buffer, then `combine`'s all-reduce); 0.11: `AgRsAll2AllManager.
        dispatch` (all_gatherv); 0.33: `MoEPrepareAndFinalizeNaiveDPEPModular.prepare` (the default
        allgather_reducescatter backend; sequence-parallel MoE at TP > 1 gathers cdiv(T, tp) over dp x tp ranks,
        the same count). 1 without DP."""
        return self.dp

    def weight_shards(self, model: ModelSpec) -> WeightShards:
        """How this layout splits the weights (`capacity.weights.estimate_weights`)."""
        return WeightShards(
            self.attention_tp, self.dense_tp, self.embedding_tp, self.head_tp, self.expert_share(model.num_experts)
        )

    def gpus(self, pp: int) -> int:
        """GPUs one replica of this layout takes."""
        return int(replica_gpus(self.dp_ranks_add_gpus, self.tp, pp, self.dp))

    def group_b_max(self, b_max_per_rank: int) -> int:
        """Sequences the whole DP group holds: every rank its own B_max."""
        return int(dp_group_b_max(self.dp, b_max_per_rank))

    def per_rank(self, deployment: DeploymentSpec) -> DeploymentSpec:
        """The deployment as one DP rank's scheduler runs it: SGLang's --max-running-requests and
        --chunked-prefill-size are the group's, each rank takes its dp-th (at least 1)."""
        if not self.limits_per_group:
            return deployment
        seqs, batched = deployment.max_num_seqs, deployment.max_num_batched_tokens
        return replace(
            deployment,
            max_num_seqs=None if seqs is None else max(1, seqs // self.dp),
            max_num_batched_tokens=None if batched is None else max(1, batched // self.dp),
        )

    def dcp_pool(self, pool: KVPool) -> KVPool:
        """The pool as its scheduler counts it under DCP: a block of `block_size` tokens per GPU spans
        block_size x dcp tokens of a request (vLLM `resolve_dcp_kv_block_size`), so a request of L tokens takes
        cdiv(L, block_size x dcp) blocks and the printed tokens are dcp times one GPU's."""
        if self.dcp == 1:
            return pool
        if pool.unit is not PoolUnit.BLOCK or any(group.kind not in _DCP_KINDS for group in pool.groups):
            raise SpecError("decode context parallel is sized for full-attention and MLA layers only (vLLM blocks)")
        return replace(pool, block_size=pool.block_size * self.dcp)

    def notes(self, pp: int, b_max_per_rank: int) -> list[str]:
        """What the layout did and B_max for the whole DP group, in one line (nothing for the plain TP layout)."""
        if self.plain:
            return []
        parts = [f"{self.dp} attention DP rank(s) of attention TP {self.attention_tp}, a KV pool each"]
        if self.ep > 1:
            extra = f" with {self.redundant_experts} redundant" if self.redundant_experts else ""
            parts.append(f"experts split whole over EP {self.ep}{extra}")
        elif self.expert_ranks != self.tp:
            parts.append(f"experts sharded over {self.expert_ranks} GPUs")
        if self.dcp > 1:
            parts.append(f"each request's KV split over DCP {self.dcp} (the printed tokens are {self.dcp}x one GPU's)")
        return [
            f"parallel layout on {self.gpus(pp)} GPUs: {'; '.join(parts)}; the tokens and B_max above are one DP "
            f"rank's: the DP group serves {self.dp} x {b_max_per_rank:,} = {self.group_b_max(b_max_per_rank):,} sequences"
        ]


_DCP_KINDS = frozenset({KVKind.FULL, KVKind.MLA})


def _vllm(tp: int, dp: int, ep: int, dcp: int) -> RankLayout:
    """vLLM: DP ranks are whole TP groups; the MoE layers span all of them; DCP within TP."""
    if tp % dcp:
        raise SpecError(f"vLLM needs the decode context parallel size to divide TP: tp {tp}, dcp {dcp}")
    if ep not in (1, tp * dp):
        raise SpecError(f"vLLM's expert parallel spans tp x dp = {tp * dp} ranks (--enable-expert-parallel), not {ep}")
    return RankLayout(tp, tp, tp, tp, tp, tp * dp, ep, dp, dcp, True, limits_per_group=False)


def _sglang(tp: int, dp: int, ep: int, dcp: int) -> RankLayout:
    """SGLang: the attention DP groups split the TP group; the MoE layers, head and dense MLP span all of it."""
    if tp % dp:
        raise SpecError(f"SGLang's DP attention splits the TP group: --dp-size {dp} must divide --tp {tp}")
    if tp % ep:
        raise SpecError(f"SGLang's expert parallel size {ep} must divide --tp {tp}")
    if dcp > 1:
        raise SpecError("SGLang's decode context parallel (--dcp-size) is not sized by capplan")
    attention_tp = tp // dp
    return RankLayout(tp, attention_tp, tp, attention_tp, tp, tp, ep, dp, 1, False, dp > 1)


_RULES = {Engine.VLLM: _vllm, Engine.PLAIN: _vllm, Engine.SGLANG: _sglang}


def replica_gpus(dp_ranks_add_gpus: Num, tp: Num, pp: Num, dp: Num) -> Num:
    """GPUs one replica takes: tp x pp, times the DP ranks where each is a TP group of its own (vLLM). On ints
    (`RankLayout.gpus`) and on the grid's columns alike (`capacity.numeric`)."""
    return tp * pp * numeric.choose(dp_ranks_add_gpus, dp, 1)


def layout_contract(layout: RankLayout | None, tp: int, b_max: int) -> dict[str, int]:
    """The `--json` keys of the layout beside dp and ep: dcp, the attention TP and the DP group's B_max (the TP
    layout's where `layout` is None)."""
    if layout is None:
        return {"dcp": 1, "attention_tp": tp, "b_max_dp_group": b_max}
    return {"dcp": layout.dcp, "attention_tp": layout.attention_tp, "b_max_dp_group": layout.group_b_max(b_max)}


def dp_group_b_max(dp: Num, b_max_per_rank: Num) -> Num:
    """B_max of a DP group: each rank schedules its own sequences from its own pool. On ints and columns."""
    return dp * b_max_per_rank


def spelled_batch_limit(engine: Engine, per_rank: int, dp: int) -> int:
    """The --max-num-seqs / --max-running-requests value that gives each DP rank `per_rank` sequences: vLLM's is
    each engine core's, SGLang's the DP group's (`RankLayout.per_rank` read backwards)."""
    return per_rank * dp if _RULES.get(engine) is _sglang else per_rank


def engine_dp_ranks_add_gpus(engine: Engine) -> bool:
    """Whether the engine's DP ranks each bring --tp GPUs (vLLM) or split --tp (SGLang's DP attention)."""
    return _RULES.get(engine) is _vllm


def rank_layout(
    engine: Engine, model: ModelSpec, tp: int, dp: int = 1, ep: int = 1, dcp: int = 1, redundant_experts: int = 0
) -> RankLayout:
    """The engine's layout for --tp / --dp / --ep / --dcp (and EPLB's redundant experts), checked as the engine
    checks it."""
    if min(dp, ep, dcp) < 1 or redundant_experts < 0:
        raise SpecError(f"dp, ep and dcp must be >= 1 and redundant experts >= 0 (dp={dp}, ep={ep}, dcp={dcp})")
    if redundant_experts and ep == 1:
        raise SpecError("redundant experts (EPLB) need expert parallel: --enable-expert-parallel / --ep-size")
    rule = _RULES.get(engine)
    if rule is None:
        if max(dp, ep, dcp) > 1:
            raise SpecError(
                "TensorRT-LLM's attention DP, MoE expert parallel and context parallel are set in "
                "--extra_llm_api_options (enable_attention_dp, moe_expert_parallel_size): not sized by capplan"
            )
        return _vllm(tp, 1, 1, 1)
    if ep > 1 and not model.num_experts:
        raise SpecError(f"expert parallel size {ep} for a model without routed experts")
    return replace(rule(tp, dp, ep, dcp), redundant_experts=redundant_experts)


def expert_parallel_width(engine: Engine, tp: int, dp: int) -> int:
    """The EP width expert parallel switched on gives: every MoE rank (vLLM --enable-expert-parallel: tp x dp;
    SGLang's former --enable-ep-moe: ep_size = tp)."""
    return tp if engine is Engine.SGLANG else tp * dp


def attention_dp_ranks(engine: Engine, dp: int, dp_attention: bool) -> int:
    """The DP ranks with a pool each that a server's DP size gives: vLLM's --data-parallel-size always; SGLang's
    --dp-size only with --enable-dp-attention (else router replicas, each a whole TP group sized alone)."""
    return dp if engine is not Engine.SGLANG or dp_attention else 1


@dataclass(frozen=True, slots=True)
class DataParallelCandidate:
    """One DP-attention x expert-parallel layout a placement sizes beside the TP ones."""

    tp: int
    dp: int
    ep: int


def dp_candidates(engine: Engine, model: ModelSpec, tps: list[int], node_gpus: int) -> list[DataParallelCandidate]:
    """The DP x EP layouts large MoE models are served with, one node each (experts split whole over it): vLLM
    `-tp T -dp node/T --enable-expert-parallel` for each valid T below the node, SGLang `--tp node --dp-size D
    --ep-size node` for each D dividing it. Only MoE models, and only where the layout differs from a TP row
    (dp >= 2): the grid of options stays small. TensorRT-LLM's are not sized (`rank_layout`)."""
    if not model.num_experts or not tps or engine not in (Engine.VLLM, Engine.SGLANG):
        return []
    node = max(tps)
    if engine is Engine.SGLANG:
        return [DataParallelCandidate(node, dp, node) for dp in (2, 4, 8) if dp <= node and node % dp == 0]
    return [DataParallelCandidate(tp, node // tp, node) for tp in tps if tp < node and node % tp == 0]
