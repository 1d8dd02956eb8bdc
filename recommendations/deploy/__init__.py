"""Deployable output: from a planned serving layout, the engine command line that realizes its budget
and the manifests teams deploy with (Kubernetes, KServe, llm-d, NVIDIA Dynamo). Pure functions, no I/O.

Entry points: `ServingPlan` (`from_option`, `from_mapping`), `ManifestKind`, `render(plan, kind)`,
`engine_command(plan)`; `DeployError` carries a one-line reason.
"""

from recommendations.deploy.command import EngineCommandLine, engine_command
from recommendations.deploy.manifests import ManifestKind, documents, render
from recommendations.deploy.plan import DeployError, ServingPlan

__all__ = ["DeployError", "EngineCommandLine", "ManifestKind", "ServingPlan", "documents", "engine_command", "render"]
