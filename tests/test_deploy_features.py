"""LoRA adapters and speculative decoding in the deploy output (issue 23): the engine command a plan renders
carries the engines' own flags for them, and capplan's reader of pasted commands
(`capacity.engines.command_line.read_command`, whose flag tables are generated from vLLM's and SGLang's own
argument parsers: an unknown flag is refused) reads back the same `LoraSpec` / `SpeculativeSpec`.

Expected flag spellings from the engines' parsers: vLLM 0.33 `engine/arg_utils.py` (--enable-lora, --max-loras,
--max-lora-rank, --max-cpu-loras, --lora-target-modules nargs '+', --speculative-config JSON); SGLang 0.5.23
`server_args.py` (--max-loras-per-batch, --max-loaded-loras, --speculative-algorithm NEXTN for MTP, ...).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from capacity.engines.command_line import read_command
from capacity.engines.kinds import Engine
from capacity.features.lora import AdapterSet, lora_spec
from capacity.features.lora_spec import LoraSpec
from capacity.features.speculative import SpecMethod, SpeculativeSpec, from_vllm_config
from capacity.placement import place
from capacity.planning_types import DTYPE_POLICIES, WorkloadProfile
from capacity.spec import GpuSku
from pipelines.commands.speculative import SpeculativeArgs
from recommendations.deploy import DeployError, ServingPlan, engine_command
from tests.handmade import dense_spec

LORA = LoraSpec(max_loras=4, max_lora_rank=32, max_cpu_loras=8, target_modules=("q_proj", "v_proj"))
EAGLE3 = SpeculativeSpec(SpecMethod.EAGLE3, 3, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")


def _plan(engine: Engine, **features: Any) -> ServingPlan:
    base = ServingPlan(model="llama-3.1-8b", engine=engine, gpu="h100-sxm-80gb", hf_repo="meta-llama/Llama-3.1-8B")
    release = {Engine.VLLM: "0.33", Engine.SGLANG: "0.5.23", Engine.TRTLLM: "1.2.0"}[engine]
    return replace(base, engine_version=release, **features)


def _lora_read_back(options: dict[str, Any]) -> LoraSpec | None:
    return lora_spec(
        bool(options.get("enable_lora")),
        options.get("max_loras"),
        options.get("max_lora_rank"),
        options.get("max_cpu_loras"),
        options.get("lora_dtype"),
        options.get("lora_target_modules"),
        bool(options.get("fully_sharded_loras")),
    )


def test_vllm_command_reads_back_to_the_plans_lora_and_speculative_specs() -> None:
    plan = _plan(Engine.VLLM, lora=replace(LORA, lora_dtype="bfloat16", fully_sharded=True), speculative=EAGLE3)
    line = engine_command(plan)
    argv = list(line.argv)
    assert argv[argv.index("--max-loras") + 1] == "4" and "--enable-lora" in argv
    assert argv[argv.index("--lora-target-modules") + 1 : argv.index("--lora-target-modules") + 3] == [
        "q_proj",
        "v_proj",
    ]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
    }
    read = read_command(line.text)
    assert read.unsized == () and read.engine is Engine.VLLM
    assert _lora_read_back(read.options) == plan.lora
    assert from_vllm_config(str(read.options["speculative_config"])) == plan.speculative


def test_sglang_command_reads_back_to_the_plans_lora_and_speculative_specs() -> None:
    """SGLang's tree: 5 steps, top-4 branches, 8 verified tokens; MTP is written NEXTN and read back as MTP."""
    for spec in (
        SpeculativeSpec(SpecMethod.EAGLE, 5, "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B", eagle_topk=4, num_draft_tokens=8),
        SpeculativeSpec(SpecMethod.MTP, 3, None, num_draft_tokens=4),
    ):
        plan = _plan(Engine.SGLANG, lora=LORA, speculative=spec)
        line = engine_command(plan)
        assert "--max-loras-per-batch" in line.argv and "--max-loaded-loras" in line.argv
        o: dict[str, Any] = read_command(line.text).options
        assert _lora_read_back(o) == plan.lora
        back = SpeculativeArgs.pop(dict(o)).sglang_spec(str(o["speculative_algorithm"]), None)
        assert back == plan.speculative


def test_a_plan_without_features_writes_no_feature_flag() -> None:
    text = engine_command(_plan(Engine.VLLM)).text
    assert "lora" not in text and "speculative" not in text


def test_the_plan_mapping_round_trips_its_features() -> None:
    plan = _plan(Engine.VLLM, lora=LORA, speculative=EAGLE3)
    mapping = json.loads(json.dumps(plan.to_mapping()))
    assert ServingPlan.from_mapping(mapping) == plan


@pytest.mark.parametrize(
    ("engine", "features", "message"),
    [
        (Engine.TRTLLM, {"lora": LORA}, "--extra_llm_api_options"),
        (Engine.TRTLLM, {"speculative": EAGLE3}, "--extra_llm_api_options"),
        (Engine.SGLANG, {"lora": replace(LORA, lora_dtype="float16")}, "no flag for the plan's LoRA setting"),
        (Engine.VLLM, {"speculative": replace(EAGLE3, eagle_topk=4)}, "one chain"),
        (Engine.SGLANG, {"speculative": SpeculativeSpec(SpecMethod.SUFFIX, 4)}, "SGLang has no flag"),
    ],
)
def test_what_an_engine_cannot_express_is_a_one_line_error(
    engine: Engine, features: dict[str, Any], message: str
) -> None:
    plan = _plan(engine, **features)
    with pytest.raises(DeployError, match=message):
        engine_command(plan)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lora", {"max_loras": 0}, "lora.max_loras"),
        ("lora", {"target_modules": ["bogus"]}, "unknown LoRA target module"),
        ("speculative", {"method": "warp"}, "speculative.method"),
        ("speculative", "eagle", "must be an object"),
    ],
)
def test_bad_feature_fields_in_a_plan_are_refused(field: str, value: object, message: str) -> None:
    mapping = _plan(Engine.VLLM).to_mapping() | {field: value}
    with pytest.raises(DeployError, match=message):
        ServingPlan.from_mapping(mapping)


def test_a_placement_for_a_workload_with_adapters_and_a_draft_writes_them() -> None:
    """from_option: the workload's `adapters` (every adapter a GPU slot, all in host memory) and its speculative
    decoding reach the command, as the placement was sized with them (capacity.placement's deployment)."""
    gib = 1 << 30
    h100 = GpuSku("h100", "H100 80GB", "nvidia", 80 * gib, price_usd_per_gpu_hour=4.0, gpus_per_node=8)
    ngram = SpeculativeSpec(SpecMethod.NGRAM, 4)
    workload = WorkloadProfile(
        name="chat",
        models=("seed",),
        target_concurrency=8,
        context_tokens=4096,
        engine="vllm",
        dtype_policy=DTYPE_POLICIES["native"],
        adapters=AdapterSet(count=6, rank=32),
        speculative=ngram,
    )
    spec = dense_spec(layers=32, kv_heads=8, head_dim=128)
    best = place(spec, workload, [h100], model_id="seed", checkpoint_bytes=16 * gib).best
    assert best is not None
    plan = ServingPlan.from_option(best, workload)
    assert plan.lora == LoraSpec(max_loras=6, max_lora_rank=32, max_cpu_loras=6) and plan.speculative == ngram
    read = read_command(engine_command(plan).text)
    assert _lora_read_back(read.options) == plan.lora
    assert from_vllm_config(str(read.options["speculative_config"])) == ngram
