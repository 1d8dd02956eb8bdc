"""The manifests teams deploy a plan with, as YAML: a Kubernetes Deployment and Service, a KServe
InferenceService, the llm-d modelservice Helm chart's values, an NVIDIA Dynamo DynamoGraphDeployment.

Each is checked against its published schema in tests/test_deploy_manifests.py (the schemas are
vendored under tests/fixtures/deploy_schemas/, with where they come from). One replica runs in one pod:
a plan whose replica needs more GPUs than a node holds is refused (multi-node serving, LeaderWorkerSet
or Dynamo's multinode, is not written here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from capacity.engines.kinds import Engine
from recommendations.deploy.command import HEALTH_PATH, PORT, EngineCommandLine, engine_command
from recommendations.deploy.plan import DeployError, ServingPlan

GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name
SHM_SIZE = "16Gi"  # /dev/shm for NCCL and the engines' worker processes (Docker's 64 MiB default is too small)
STARTUP_SECONDS = 1800  # loading weights and capturing CUDA graphs: the startup probe waits this long
HF_TOKEN_SECRET = "hf-token"  # an optional Secret with key `token`, for gated Hugging Face repos
PLAN_ANNOTATION = "capplan/plan"

# NVIDIA Dynamo's runtime images (they bundle their own engine release) and worker modules; the release
# is the one Dynamo's own documentation deploys in its Kubernetes examples (docs/kubernetes, 2026)
DYNAMO_RELEASE = "0.9.0"


@dataclass(frozen=True, slots=True)
class _DynamoWorker:
    """How Dynamo runs one engine: its runtime image, the worker module, and the flag naming the model where
    the engine's own server takes it as a positional argument (`vllm serve MODEL`; dynamo.vllm: --model)."""

    runtime_image: str
    module: str
    model_flag: str | None


_DYNAMO_WORKERS: dict[Engine, _DynamoWorker] = {
    Engine.VLLM: _DynamoWorker("nvcr.io/nvidia/ai-dynamo/vllm-runtime", "dynamo.vllm", "--model"),
    Engine.SGLANG: _DynamoWorker("nvcr.io/nvidia/ai-dynamo/sglang-runtime", "dynamo.sglang", None),
}


class ManifestKind(StrEnum):
    """What `render` writes: the engine command line, or one of the manifests."""

    COMMAND = "command"
    KUBERNETES = "kubernetes"
    KSERVE = "kserve"
    LLMD = "llm-d"
    DYNAMO = "dynamo"


def render(plan: ServingPlan, kind: ManifestKind) -> str:
    """`plan` as `kind`: a shell line for COMMAND, else YAML (documents separated by `---`)."""
    if kind is ManifestKind.COMMAND:
        return engine_command(plan).text + "\n"
    documents = _DOCUMENTS[kind](plan)
    header = f"# {_summary(plan)}\n"
    return header + yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=120)


def documents(plan: ServingPlan, kind: ManifestKind) -> list[dict[str, Any]]:
    """The manifest objects `render` writes for `kind` (not COMMAND)."""
    if kind is ManifestKind.COMMAND:
        raise DeployError("the command line is text, not a manifest")
    return _DOCUMENTS[kind](plan)


def _summary(plan: ServingPlan) -> str:
    return (
        f"capplan plan: {plan.served_model} on {plan.replicas} x {plan.gpus_per_replica} {plan.gpu} "
        f"(TP {plan.tp} x PP {plan.pp}), {plan.engine} {plan.release or 'unreleased'}; "
        f"schedule onto {plan.gpu} nodes (add a nodeSelector for your cluster's GPU label)"
    )


def _one_node(plan: ServingPlan, what: str) -> None:
    if plan.gpus_per_replica > plan.gpus_per_node:
        raise DeployError(
            f"a replica needs {plan.gpus_per_replica} GPUs, more than a {plan.gpu} node's {plan.gpus_per_node}: "
            f"{what} runs a replica in one pod (multi-node serving is not written here)"
        )


def _labels(plan: ServingPlan) -> dict[str, str]:
    return {"app.kubernetes.io/name": plan.name, "app.kubernetes.io/component": "inference-server"}


def _metadata(plan: ServingPlan) -> dict[str, Any]:
    plan_json = json.dumps(
        {key: value for key, value in plan.to_mapping().items() if value is not None}, sort_keys=True
    )
    return {"name": plan.name, "labels": _labels(plan), "annotations": {PLAN_ANNOTATION: plan_json}}


def _http_probe(period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": HEALTH_PATH, "port": PORT}, "periodSeconds": period_s, "failureThreshold": failures}


def _gpu_resources(plan: ServingPlan) -> dict[str, Any]:
    count = str(plan.gpus_per_replica)
    return {"limits": {GPU_RESOURCE: count}, "requests": {GPU_RESOURCE: count}}


def _container(plan: ServingPlan, name: str, command: EngineCommandLine) -> dict[str, Any]:
    """The engine's container: its command, the GPUs of one replica, /dev/shm, probes on /health."""
    return {
        "name": name,
        "image": plan.container_image,
        "command": list(command.command),
        "args": list(command.args),
        "env": [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": "token", "optional": True}},
            }
        ],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": _gpu_resources(plan),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "startupProbe": _http_probe(10, STARTUP_SECONDS // 10),
        "readinessProbe": _http_probe(10, 3),
        "livenessProbe": _http_probe(30, 5),
    }


def _shm_volume() -> dict[str, Any]:
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}}


def kubernetes(plan: ServingPlan) -> list[dict[str, Any]]:
    """An apps/v1 Deployment of `replicas` engine pods and a ClusterIP Service in front of them."""
    _one_node(plan, "a Deployment")
    command = engine_command(plan)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(plan),
        "spec": {
            "replicas": plan.replicas,
            "selector": {"matchLabels": _labels(plan)},
            "template": {
                "metadata": {"labels": _labels(plan)},
                "spec": {"containers": [_container(plan, "engine", command)], "volumes": [_shm_volume()]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": plan.name, "labels": _labels(plan)},
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(plan),
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def kserve(plan: ServingPlan) -> list[dict[str, Any]]:
    """A serving.kserve.io/v1beta1 InferenceService running the engine as a custom predictor container
    (raw deployment mode: no Knative scale-to-zero for GPU replicas), `replicas` fixed."""
    _one_node(plan, "a KServe predictor")
    metadata = _metadata(plan)
    metadata["annotations"]["serving.kserve.io/deploymentMode"] = "RawDeployment"
    predictor = {
        "minReplicas": plan.replicas,
        "maxReplicas": plan.replicas,
        "containers": [_container(plan, "kserve-container", engine_command(plan))],
        "volumes": [_shm_volume()],
    }
    return [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": metadata,
            "spec": {"predictor": predictor},
        }
    ]


def llmd(plan: ServingPlan) -> list[dict[str, Any]]:
    """Values for llm-d's modelservice Helm chart: decode pods only (no prefill/decode split), the
    engine's command given whole (`modelCommand: custom`), no routing sidecar."""
    _one_node(plan, "llm-d's decode pod")
    if plan.pp > 1:
        raise DeployError(
            "llm-d's chart sizes a pod as tensor x data parallel: pipeline parallelism is not expressible"
        )
    container = _container(plan, plan.engine.value, engine_command(plan))  # the chart's default name: vllm
    container |= {"modelCommand": "custom", "mountModelVolume": True}
    return [
        {
            "multinode": False,
            "modelArtifacts": {"uri": f"hf://{plan.served_model}", "name": plan.served_model},
            "accelerator": {"type": "nvidia"},
            "routing": {"servicePort": PORT, "proxy": {"enabled": False}},
            "decode": {
                "create": True,
                "replicas": plan.replicas,
                "parallelism": {"tensor": plan.tp, "data": 1},
                "containers": [container],
                "volumes": [_shm_volume()],
            },
            "prefill": {"create": False},
        }
    ]


def dynamo(plan: ServingPlan) -> list[dict[str, Any]]:
    """An nvidia.com/v1alpha1 DynamoGraphDeployment: Dynamo's OpenAI frontend and `replicas` aggregated
    workers running the engine with the plan's flags (`python3 -m dynamo.<engine>`)."""
    _one_node(plan, "a Dynamo worker")
    if plan.engine not in _DYNAMO_WORKERS:
        raise DeployError(f"capplan writes Dynamo workers for vLLM and SGLang, not {plan.engine}")
    runner = _DYNAMO_WORKERS[plan.engine]
    image = plan.image or f"{runner.runtime_image}:{DYNAMO_RELEASE}"
    args = list(engine_command(plan).args)
    args = args[: args.index("--host")]  # the frontend serves HTTP; the worker talks to it over Dynamo's runtime
    if runner.model_flag is not None:
        args = [runner.model_flag, *args]
    worker = {
        "componentType": "worker",
        "replicas": plan.replicas,
        "resources": {"limits": {"gpu": str(plan.gpus_per_replica)}},
        "sharedMemory": {"size": SHM_SIZE},
        "extraPodSpec": {"mainContainer": {"image": image, "command": ["python3", "-m", runner.module], "args": args}},
    }
    frontend = {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {"image": image}}}
    return [
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": _metadata(plan),
            "spec": {"backendFramework": plan.engine.value, "services": {"Frontend": frontend, "worker": worker}},
        }
    ]


_DOCUMENTS: dict[ManifestKind, Callable[[ServingPlan], list[dict[str, Any]]]] = {
    ManifestKind.KUBERNETES: kubernetes,
    ManifestKind.KSERVE: kserve,
    ManifestKind.LLMD: llmd,
    ManifestKind.DYNAMO: dynamo,
}
