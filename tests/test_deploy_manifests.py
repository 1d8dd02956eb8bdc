"""Deployable output (issue 24, item 4): the engine command line that realizes a placement's budget, and
the manifests, checked against oracles capplan did not write.

- Command lines: every flag is in the engine's own flag table (generated from its parser), and the line
  read back by `read_command` (what `capplan estimate --from-command` pastes) sizes exactly the budget
  the placement planned, through `capacity.estimate` with the seed model's hand-derivable sizes. The
  engines' own parsers read the same lines in tests/test_deploy_engine_parsers.py (slow).
- Manifests: each validates against its publisher's schema, vendored offline with provenance in
  tests/fixtures/deploy_schemas/README.md; a manifest with a required field removed, a wrong type or an
  undeclared field fails.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource
from typer.testing import CliRunner

from capacity.engines.command_flags import ENGINE_FLAGS
from capacity.engines.command_line import read_command
from capacity.engines.kinds import Engine
from capacity.estimate import estimate
from capacity.placement import PlacementOption, place
from capacity.planning_types import DTYPE_POLICIES, WorkloadProfile
from capacity.pool import b_max
from capacity.spec import DeploymentSpec, GpuSku
from pipelines.cli import app
from recommendations.deploy import DeployError, ManifestKind, ServingPlan, documents, engine_command, render
from tests.handmade import dense_spec

SCHEMAS = Path(__file__).parent / "fixtures" / "deploy_schemas"
LLAMA = Path(__file__).parent / "fixtures" / "broken_configs" / "valid-llama" / "config.json"
GIB = 1 << 30
SEED = dense_spec(layers=32, kv_heads=32, head_dim=128)  # 0.5 MiB of bf16 KV per token
H100 = GpuSku(
    "h100",
    "H100 80GB",
    "nvidia",
    80 * GIB,
    price_usd_per_gpu_hour=4.0,
    gpus_per_node=8,
    fp8_support=True,
    memory_bandwidth_gbps=3350.0,
    bf16_dense_tflops=989.0,
)
SERVER_ENGINES = (Engine.VLLM, Engine.SGLANG, Engine.TRTLLM)


def _workload(engine: Engine, **overrides: Any) -> WorkloadProfile:
    fields: dict[str, Any] = {
        "name": "chat",
        "models": ("seed",),
        "target_concurrency": 40,
        "context_tokens": 8192,
        "engine": engine.value,
        "gpu_memory_utilization": 0.85,
        "max_gpus_per_replica": 4,
        "dtype_policy": DTYPE_POLICIES["native"],
    }
    fields.update(overrides)
    return WorkloadProfile(**fields)


def _best(workload: WorkloadProfile) -> PlacementOption:
    best = place(SEED, workload, [H100], model_id="seed", checkpoint_bytes=16 * GIB).best
    assert best is not None
    return best


def _plan(engine: Engine = Engine.VLLM, **overrides: Any) -> ServingPlan:
    fields: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "hf_repo": "meta-llama/Llama-3.1-8B-Instruct",
        "engine": engine,
        "engine_version": "1.2.0" if engine is Engine.TRTLLM else None,
        "gpu": "h100",
        "tp": 2,
        "replicas": 3,
        "max_model_len": 32768,
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.85,
    }
    fields.update(overrides)
    return ServingPlan(**fields)


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", SERVER_ENGINES)
def test_every_flag_written_is_the_engines_own(engine: Engine) -> None:
    kv = {"kv_cache_dtype": "fp8", "weight_dtype": "fp8"} if engine is not Engine.TRTLLM else {}
    line = engine_command(_plan(engine, pp=2, **kv))
    flags = {arg for arg in line.args if arg.startswith("--")}
    assert flags <= set(ENGINE_FLAGS[engine]["flags"]), flags - set(ENGINE_FLAGS[engine]["flags"])
    assert "--port" in flags and "8000" in line.args


def _spec_from(command_text: str, release: str | None) -> DeploymentSpec:
    """The deployment `capplan estimate --from-command` sizes for a pasted line (its applied options)."""
    read = read_command(command_text)
    o = read.options
    return DeploymentSpec(
        tp=int(o.get("tp", 1)),  # type: ignore[call-overload]
        pp=int(o.get("pp", 1)),  # type: ignore[call-overload]
        weight_dtype=str(o.get("dtype", "auto")),
        kv_dtype=str(o.get("kv_dtype", "auto")),
        engine=read.engine.value,
        engine_version=release,
        gpu_memory_utilization=o.get("gpu_memory_utilization"),  # type: ignore[arg-type]
        max_model_len=o.get("max_model_len"),  # type: ignore[arg-type]
        max_num_seqs=o.get("max_num_seqs"),  # type: ignore[arg-type]
        kv_cache_memory_bytes=o.get("kv_cache_memory_bytes"),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("engine", "policy", "tpot_ms"),
    [
        (Engine.VLLM, "native", None),
        (Engine.VLLM, "fp8", None),
        (Engine.SGLANG, "fp8-kv", None),
        (Engine.TRTLLM, "native", None),
        (Engine.VLLM, "native", 12.0),  # a latency target: --max-num-seqs at the planned batch
    ],
)
def test_the_command_sizes_the_placements_budget(engine: Engine, policy: str, tpot_ms: float | None) -> None:
    extra: dict[str, Any] = {"dtype_policy": DTYPE_POLICIES[policy]}
    if tpot_ms is not None:
        extra |= {"tpot_ms_target": tpot_ms, "output_tokens": 1024}
    workload = _workload(engine, **extra)
    option = _best(workload)
    plan = ServingPlan.from_option(option, workload)
    spec = _spec_from(engine_command(plan).text, option.engine_version)
    est = estimate(
        SEED, spec, gpu=H100, model_name="seed", checkpoint_bytes=16 * GIB, context_tokens=option.context_tokens
    )
    assert (spec.tp, spec.pp) == (option.tp, option.pp)
    assert est.max_model_len == option.max_model_len
    if option.binding == "memory":
        assert b_max(est.pool, option.context_tokens, est.max_num_seqs, est.max_model_len) == option.b_max
    else:  # the engine admits exactly the batch that meets the latency target
        assert est.max_num_seqs == option.planned_per_replica < option.b_max_predicted


@pytest.mark.parametrize(
    ("engine", "weight", "kv", "budget"),
    [
        (Engine.VLLM, "fp8", "fp8", {"gpu_memory_utilization": 0.8}),
        (Engine.VLLM, "bf16", "fp8_e5m2", {"kv_cache_memory_bytes": 30 * GIB, "gpu_memory_utilization": None}),
        (Engine.VLLM, "float32", "auto", {}),
        (Engine.SGLANG, "fp8", "fp8", {"gpu_memory_utilization": 0.7}),
        (Engine.SGLANG, "fp16", "bf16", {}),
        (Engine.TRTLLM, "auto", "auto", {"gpu_memory_utilization": 0.9}),
    ],
)
def test_the_command_is_the_plans_deployment(engine: Engine, weight: str, kv: str, budget: dict[str, Any]) -> None:
    """Each dtype and budget spelling reads back to the KV budget and pool of the plan's own settings."""
    plan = _plan(engine, tp=2, pp=2, weight_dtype=weight, kv_cache_dtype=kv, max_model_len=16384, **budget)
    by_plan = DeploymentSpec(
        tp=plan.tp,
        pp=plan.pp,
        weight_dtype=plan.weight_dtype,
        kv_dtype=plan.kv_cache_dtype,
        engine=plan.engine.value,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        max_model_len=plan.max_model_len,
        max_num_seqs=plan.max_num_seqs,
        kv_cache_memory_bytes=plan.kv_cache_memory_bytes,
    )
    sized = [
        estimate(SEED, spec, gpu=H100, model_name="seed", checkpoint_bytes=16 * GIB, context_tokens=8192)
        for spec in (by_plan, _spec_from(engine_command(plan).text, None))
    ]
    assert sized[0].kv_budget_bytes_per_gpu == sized[1].kv_budget_bytes_per_gpu > 0
    assert sized[0].pool.capacity_units == sized[1].pool.capacity_units
    assert (sized[0].max_model_len, sized[0].max_num_seqs) == (sized[1].max_model_len, sized[1].max_num_seqs)


def test_a_pasted_plan_command_is_the_same_estimate_as_the_options_by_hand() -> None:
    """Through the CLI: the rendered line, pasted, sizes as `capplan estimate` given the plan's options,
    and only the listening address is noted as ignored."""
    plan = _plan(Engine.VLLM, hf_repo=str(LLAMA), tp=1, kv_cache_dtype="fp8", max_model_len=8192)
    runner = CliRunner()
    pasted = runner.invoke(app, ["estimate", "--gpu", "H100", "--json", "--from-command", engine_command(plan).text])
    by_hand = runner.invoke(
        app,
        [
            "estimate",
            str(LLAMA),
            "--gpu",
            "H100",
            "--json",
            "--kv-dtype",
            "fp8",
            "--max-model-len",
            "8192",
            "--max-num-seqs",
            "64",
            "--gpu-memory-utilization",
            "0.85",
        ],
    )
    assert pasted.exit_code == 0 and by_hand.exit_code == 0, pasted.output + by_hand.output
    a, b = json.loads(pasted.stdout), json.loads(by_hand.stdout)
    assert "ignored for capacity: --host, --port" in a["notes"]
    assert {k: v for k, v in a.items() if k != "notes"} == {k: v for k, v in b.items() if k != "notes"}
    assert a["modelled"] is True


@pytest.mark.parametrize(
    ("plan", "says"),
    [
        (lambda: _plan(Engine.TRTLLM, kv_cache_dtype="fp8"), "cannot set a fp8 KV cache"),
        (lambda: _plan(Engine.SGLANG, gpu_memory_utilization=None, kv_cache_memory_bytes=20 * GIB), "fraction only"),
        (lambda: _plan(Engine.VLLM, weight_dtype="int4"), "no flag that serves weights as int4"),
        (lambda: _plan(Engine.PLAIN), "engine-free baseline"),
        (lambda: _plan(Engine.TRTLLM, engine_version=None), "give engine_version or an image"),
    ],
)
def test_what_an_engine_cannot_express_is_one_line(plan: Any, says: str) -> None:
    with pytest.raises(DeployError, match=says) as error:
        for kind in ManifestKind:
            render(plan(), kind)
    assert "\n" not in str(error.value)


# --- the plan as JSON ----------------------------------------------------------------------------------


def test_a_plan_round_trips_through_its_mapping() -> None:
    plan = _plan(Engine.SGLANG, kv_cache_dtype="fp8", image="registry.local/sglang:custom")
    assert ServingPlan.from_mapping(json.loads(json.dumps(plan.to_mapping()))) == plan
    assert ServingPlan.from_mapping({**plan.to_mapping(), "usd_per_hour": 12.0}) == plan  # extra keys ignored


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"engine": "tgi"}, "unknown engine 'tgi'"),
        ({"tp": "2"}, "'tp' must be an integer"),
        ({"tp": True}, "'tp' must be an integer"),
        ({"tp": 0}, "tp must be >= 1"),
        ({"gpu_memory_utilization": 1.5}, r"must be in \(0, 1\]"),
        ({"model": None}, "no 'model'"),
    ],
)
def test_a_bad_plan_mapping_is_one_line(change: dict[str, Any], says: str) -> None:
    with pytest.raises(DeployError, match=says):
        ServingPlan.from_mapping({**_plan().to_mapping(), **change})


def test_a_place_plan_object_renders() -> None:
    """The `plan` object of `capplan place --json` (its fields, the estimate's names, both budgets): the
    fraction is the budget written, the byte budget and the descriptive keys are not needed."""
    place_plan = {
        "model": "llama-3.1-8b",
        "hf_repo": "meta-llama/Llama-3.1-8B-Instruct",
        "engine": "vllm",
        "engine_version": "0.33",
        "gpu": "H100",
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "gpus_per_node": 8,
        "tp": 2,
        "pp": 1,
        "gpus_per_replica": 2,
        "replicas": 4,
        "weight_dtype": "auto",
        "weight_format": "bf16",
        "quantization": None,
        "kv_cache_dtype": "fp8",
        "kv_cache_format": "fp8_e4m3",
        "max_model_len": 32768,
        "max_num_seqs": 57,
        "max_num_batched_tokens": 8192,
        "block_size": 16,
        "gpu_memory_utilization": 0.9,
        "kv_cache_memory_bytes": 51_539_607_552,
    }
    plan = ServingPlan.from_mapping(place_plan)
    assert (plan.kv_cache_dtype, plan.gpu_memory_utilization, plan.kv_cache_memory_bytes) == ("fp8", 0.9, None)
    line = engine_command(plan).args
    assert "--kv-cache-memory-bytes" not in line and line[line.index("--gpu-memory-utilization") + 1] == "0.9"
    assert plan.container_image.endswith(":v0.33.0")
    assert (
        ServingPlan.from_mapping({**place_plan, "gpu_memory_utilization": None}).kv_cache_memory_bytes == 51_539_607_552
    )


def test_a_replica_wider_than_a_node_is_refused() -> None:
    with pytest.raises(DeployError, match="more than a h100 node's 8"):
        render(_plan(tp=8, pp=2), ManifestKind.KUBERNETES)
    assert engine_command(_plan(tp=8, pp=2)).args.count("--pipeline-parallel-size") == 1  # the line itself is fine


def test_images_default_to_the_flag_tables_release() -> None:
    assert _plan(Engine.VLLM).container_image == f"docker.io/vllm/vllm-openai:v{ENGINE_FLAGS['vllm']['release']}"
    assert _plan(Engine.SGLANG).container_image == f"docker.io/lmsysorg/sglang:v{ENGINE_FLAGS['sglang']['release']}"
    assert _plan(Engine.VLLM, engine_version="0.21.0").container_image.endswith(":v0.21.0")
    assert _plan(Engine.VLLM, engine_version="0.33").container_image.endswith(":v0.33.0")  # the table's, on that line
    assert _plan(Engine.VLLM, engine_version="0.21").container_image.endswith(":v0.21.0")  # the line's first
    assert _plan(Engine.TRTLLM, engine_version="1.2.0rc2").container_image.endswith("/release:1.2.0rc2")
    option = _best(_workload(Engine.VLLM))  # an estimate names vLLM's release by its line
    assert ServingPlan.from_option(option).container_image.endswith(f":v{ENGINE_FLAGS['vllm']['release']}")
    assert _plan(Engine.VLLM, image="my/vllm:1").container_image == "my/vllm:1"


# --- the manifests against their published schemas --------------------------------------------------


def _strict(schema: Any) -> Any:
    """kubectl's default --validate=strict for a custom resource: undeclared fields are errors."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _load(name: str) -> Any:
    return json.loads((SCHEMAS / name).read_text())


@cache
def _validators() -> dict[str, jsonschema.protocols.Validator]:
    definitions = _load("kubernetes/_definitions.json")
    registry: Registry[Any] = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
    kubernetes = {
        kind: jsonschema.Draft202012Validator(_load(f"kubernetes/{name}"), registry=registry)
        for kind, name in (("Deployment", "deployment-apps-v1.json"), ("Service", "service-v1.json"))
    }
    return kubernetes | {
        "InferenceService": jsonschema.Draft202012Validator(_strict(_load("kserve_inferenceservice_v1beta1.json"))),
        "DynamoGraphDeployment": jsonschema.Draft202012Validator(
            _strict(_load("dynamo_dynamographdeployment_v1alpha1.json"))
        ),
        "llm-d values": jsonschema.Draft7Validator(_load("llmd_modelservice_values.schema.json")),
        "Container": jsonschema.Draft202012Validator(
            {"$ref": f"{definitions['$id']}#/$defs/io.k8s.api.core.v1.Container"}, registry=registry
        ),
    }


# keys of an llm-d decode container that the chart reads itself (charts/llm-d-modelservice/values.yaml)
LLMD_CHART_KEYS = ("modelCommand", "mountModelVolume")


def _errors(document: dict[str, Any]) -> list[str]:
    """Schema errors; an llm-d decode container (its schema takes any object) is also held to core/v1 Container."""
    validator = _validators()[document.get("kind", "llm-d values")]
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
    if "kind" not in document:
        for container in document.get("decode", {}).get("containers", []):
            plain = {key: value for key, value in container.items() if key not in LLMD_CHART_KEYS}
            errors += [f"decode container: {e.message}" for e in _validators()["Container"].iter_errors(plain)]
    return errors


PLANS = {
    "vllm-tp2": lambda: _plan(Engine.VLLM, kv_cache_dtype="fp8"),
    "vllm-kv-bytes": lambda: _plan(Engine.VLLM, gpu_memory_utilization=None, kv_cache_memory_bytes=40 * GIB),
    "sglang-fp8": lambda: _plan(Engine.SGLANG, weight_dtype="fp8", kv_cache_dtype="fp8", tp=4, replicas=1),
    "trtllm": lambda: _plan(Engine.TRTLLM, tp=8, max_num_seqs=None),
}
KINDS_BY_ENGINE = {
    Engine.VLLM: tuple(k for k in ManifestKind if k is not ManifestKind.COMMAND),
    Engine.SGLANG: tuple(k for k in ManifestKind if k is not ManifestKind.COMMAND),
    Engine.TRTLLM: (ManifestKind.KUBERNETES, ManifestKind.KSERVE, ManifestKind.LLMD),
}


@pytest.mark.parametrize("name", PLANS)
def test_every_manifest_validates_against_its_published_schema(name: str) -> None:
    plan = PLANS[name]()
    for kind in KINDS_BY_ENGINE[plan.engine]:
        text = render(plan, kind)
        parsed = list(yaml.safe_load_all(text))
        assert parsed == documents(plan, kind)  # the YAML is the objects, nothing lost in dumping
        for document in parsed:
            assert _errors(document) == [], (kind, document.get("kind"))


def test_the_manifests_carry_the_plan() -> None:
    plan = _plan(Engine.VLLM, kv_cache_dtype="fp8", pp=2, tp=2)
    line = engine_command(plan)
    deployment, service = documents(plan, ManifestKind.KUBERNETES)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == list(line.argv)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert deployment["spec"]["replicas"] == 3
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert ServingPlan.from_mapping(json.loads(deployment["metadata"]["annotations"]["capplan/plan"])) == plan
    (isvc,) = documents(plan, ManifestKind.KSERVE)
    assert (isvc["spec"]["predictor"]["minReplicas"], isvc["spec"]["predictor"]["maxReplicas"]) == (3, 3)
    (dgd,) = documents(plan, ManifestKind.DYNAMO)
    worker = dgd["spec"]["services"]["worker"]
    assert worker["resources"]["limits"]["gpu"] == "4" and worker["replicas"] == 3
    assert worker["extraPodSpec"]["mainContainer"]["args"][:2] == ["--model", plan.served_model]
    assert "--host" not in worker["extraPodSpec"]["mainContainer"]["args"]


def _without(document: dict[str, Any], *path: str | int) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    node: Any = broken
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return broken


def _with(document: dict[str, Any], value: Any, *path: str | int) -> dict[str, Any]:
    broken = copy.deepcopy(document)
    node: Any = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return broken


def test_a_broken_manifest_fails_its_schema() -> None:
    plan = _plan(Engine.VLLM)
    deployment, service = documents(plan, ManifestKind.KUBERNETES)
    (isvc,) = documents(plan, ManifestKind.KSERVE)
    (values,) = documents(plan, ManifestKind.LLMD)
    (dgd,) = documents(plan, ManifestKind.DYNAMO)
    container = ("spec", "template", "spec", "containers", 0)
    broken = [
        _without(deployment, "spec", "selector"),  # required by apps/v1 DeploymentSpec
        _without(deployment, *container, "name"),  # required by core/v1 Container
        _with(deployment, "three", "spec", "replicas"),
        _with(deployment, {"nvidia.com/gpu": "2"}, *container, "limits"),  # not a Container field
        _with(service, "8000", "spec", "ports", 0, "port"),
        _without(isvc, "spec", "predictor", "containers", 0, "name"),
        _with(isvc, "3", "spec", "predictor", "minReplicas"),
        _with(isvc, 1, "spec", "predictor", "gpus"),  # undeclared: kubectl's strict validation refuses it
        _with(values, "3", "decode", "replicas"),
        _with(values, {"tensor": 2, "pipeline": 2}, "decode", "parallelism"),
        _without(values, "decode", "containers", 0, "name"),
        _with(values, "2", "decode", "containers", 0, "ports", 0, "containerPort"),
        _with(dgd, "plain", "spec", "backendFramework"),
        _with(dgd, 2, "spec", "services", "worker", "resources", "limits", "gpu"),
        _with(dgd, ["vllm"], "spec", "services", "worker", "extraPodSpec", "mainContainer", "cmd"),
    ]
    for document in broken:
        assert _errors(document), document


@pytest.mark.parametrize(
    "repo",
    ["Qwen/Qwen2.5-72B-Instruct-AWQ", "/models/Llama 3.1 (70B)/", "01-ai/Yi-34B", "___", "a" * 200, "x/..-..-"],
)
def test_object_names_are_rfc_1035_labels(repo: str) -> None:
    """Kubernetes refuses a Service name that is not an RFC 1035 label (the JSON schemas do not say so)."""
    name = _plan(hf_repo=repo).name
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name


@pytest.mark.parametrize("kind", [ManifestKind.KUBERNETES, ManifestKind.KSERVE, ManifestKind.DYNAMO])
def test_place_answers_the_issues_question_with_a_command_and_a_valid_manifest(kind: ManifestKind) -> None:
    """`capplan place` at p99 TTFT 500 ms and 20 requests/s: the cheapest option's command line is the one
    its manifest runs, reads back (capplan's parser) to the option's budget, and the manifest validates."""
    args = ["place", "meta-llama/Llama-3.1-8B-Instruct", "--ttft-ms", "500", "--request-rate", "20"]
    args += ["--input-len", "2048", "--output-len", "256", "--top", "1", "--manifest", kind.value, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    (best,) = out["options"]
    assert best["simulated"]["ttft"]["p99_ms"] <= 500
    command, plan = best["command"], best["plan"]
    assert command["argv"] and command["reason"] is None
    spec = _spec_from(command["text"], plan["engine_version"])
    assert (spec.tp, spec.max_model_len, spec.max_num_seqs) == (plan["tp"], plan["max_model_len"], plan["max_num_seqs"])
    assert spec.gpu_memory_utilization == plan["gpu_memory_utilization"]
    manifest = out["manifest"]
    assert (manifest["kind"], manifest["rank"]) == (kind.value, 1)
    parsed = list(yaml.safe_load_all(manifest["yaml"]))
    for document in parsed:
        assert _errors(document) == [], document.get("kind")
    budget = ("--max-model-len", "--max-num-seqs", "--gpu-memory-utilization")
    pairs = {(flag, command["argv"][command["argv"].index(flag) + 1]) for flag in budget}
    runs = [_args_of(document) for document in parsed if _args_of(document)]
    assert runs and all(pairs <= set(pairwise(args)) for args in runs)


def _args_of(document: dict[str, Any]) -> list[str]:
    """The engine arguments a manifest's first container runs (Deployment, InferenceService or Dynamo worker)."""
    spec = document.get("spec", {})
    if "template" in spec:
        container = spec["template"]["spec"]["containers"][0]
    elif "predictor" in spec:
        container = spec["predictor"]["containers"][0]
    elif "services" in spec:
        container = spec["services"]["worker"]["extraPodSpec"]["mainContainer"]
    else:
        return []
    return list(container.get("args", []))


def test_place_manifest_of_a_missing_rank_is_one_line() -> None:
    args = ["place", "meta-llama/Llama-3.1-8B-Instruct", "--concurrency", "8", "--top", "1"]
    result = CliRunner().invoke(app, [*args, "--manifest", "kubernetes", "--rank", "3"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "--rank 3 is not an option" in result.output
