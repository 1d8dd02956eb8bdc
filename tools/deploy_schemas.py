"""Vendor the published schemas the deploy manifests are validated against (tests/fixtures/deploy_schemas/).

Run once by hand when a pinned source moves; the sources and the trimming are described in
tests/fixtures/deploy_schemas/README.md. Every trim removes only `description` text or subtrees capplan
never writes, so what is kept validates exactly as published.

    python tools/deploy_schemas.py --kubernetes DIR --kserve-crd FILE --llmd-values-schema FILE
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "deploy_schemas"
# the predictor's framework shorthands (sklearn, xgboost, ...) all share one schema capplan never writes
KSERVE_PREDICTOR_KEPT_SHORTHANDS = frozenset({"model"})


def without_descriptions(node: Any) -> Any:
    """The schema without its `description` text (prose only; no keyword that validates)."""
    if isinstance(node, dict):
        return {key: without_descriptions(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [without_descriptions(value) for value in node]
    return node


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(value) for value in node)) if node else set()
    return set()


def kubernetes(folder: Path, names: tuple[str, ...]) -> None:
    """The named top-level schemas and the `$defs` they reach, from kubernetes-validate's local-strict set."""
    definitions = json.loads((folder / "_definitions.json").read_text())
    tops = {name: json.loads((folder / name).read_text()) for name in names}
    todo = set().union(*(_refs(top) for top in tops.values()))
    kept: dict[str, Any] = {}
    while todo:
        ref = todo.pop()
        name = ref.rsplit("/", 1)[-1]
        if name in kept:
            continue
        kept[name] = definitions["$defs"][name]
        todo |= _refs(kept[name])
    trimmed = {key: value for key, value in definitions.items() if key != "$defs"} | {
        "$defs": dict(sorted(kept.items()))
    }
    (OUT / "kubernetes").mkdir(parents=True, exist_ok=True)
    _write(OUT / "kubernetes" / "_definitions.json", without_descriptions(trimmed))
    for name, top in tops.items():
        _write(OUT / "kubernetes" / name, without_descriptions(top))


def kserve(crd: Path) -> None:
    """The InferenceService CRD's v1beta1 openAPIV3Schema: spec.predictor only (capplan writes no
    explainer or transformer), and of the predictor's framework shorthands only `model`."""
    document = yaml.safe_load(crd.read_text())
    (version,) = [v for v in document["spec"]["versions"] if v["name"] == "v1beta1"]
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    spec["properties"] = {"predictor": spec["properties"]["predictor"]}
    predictor = spec["properties"]["predictor"]["properties"]
    shorthands = {key for key, value in predictor.items() if "storageUri" in value.get("properties", {})}
    for key in shorthands - KSERVE_PREDICTOR_KEPT_SHORTHANDS:
        del predictor[key]
    _write(OUT / "kserve_inferenceservice_v1beta1.json", without_descriptions(schema))


def _write(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--kubernetes", type=Path, help="kubernetes-validate's kubernetes-json-schema/v1.33.0-local-strict"
    )
    parser.add_argument(
        "--kserve-crd", type=Path, help="kserve config/crd/full/serving.kserve.io_inferenceservices.yaml"
    )
    parser.add_argument(
        "--llmd-values-schema", type=Path, help="llm-d-modelservice charts/llm-d-modelservice/values.schema.json"
    )
    args = parser.parse_args()
    if args.kubernetes:
        kubernetes(args.kubernetes, ("deployment-apps-v1.json", "service-v1.json"))
    if args.kserve_crd:
        kserve(args.kserve_crd)
    if args.llmd_values_schema:
        _write(
            OUT / "llmd_modelservice_values.schema.json",
            without_descriptions(json.loads(args.llmd_values_schema.read_text())),
        )


if __name__ == "__main__":
    main()
