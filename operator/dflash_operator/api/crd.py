"""Generates the DFlashDeployment CustomResourceDefinition from the pydantic models.

Kubernetes wants a structural OpenAPI v3 schema: no $ref, no anyOf-with-null, a type on every node. pydantic emits
JSON Schema 2020-12, so this module inlines references and keeps only the keywords the API server understands.
"""

from __future__ import annotations

from typing import Any

import yaml

from dflash_operator.api import models
from dflash_operator.api.models import DNS_1035

# JSON Schema keywords that carry over unchanged into a Kubernetes structural schema.
_KEPT = {
    "type", "description", "default", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "format", "required", "nullable",
}


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turns one pydantic JSON-schema node into a structural schema node."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    if "anyOf" in schema:
        # Optional[X] is anyOf [X, null]: the field is simply not required, so keep X and the outer keywords.
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"unions other than Optional cannot be expressed in a CRD: {schema}")
        outer = {k: v for k, v in schema.items() if k != "anyOf"}
        if outer.get("default", ...) is None:
            del outer["default"]
        return structural({**branches[0], **outer}, defs)
    if "const" in schema:
        schema = {**schema, "enum": [schema["const"]]}

    out: dict[str, Any] = {k: v for k, v in schema.items() if k in _KEPT or k.startswith("x-kubernetes-")}
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in schema:
        out["type"] = "object"
        out["properties"] = {name: structural(sub, defs) for name, sub in schema["properties"].items()}
        # Required fields with defaults are filled by the API server, so only fields without defaults are required.
        required = [n for n in schema.get("required", []) if "default" not in out["properties"][n]]
        if required:
            out["required"] = required
        else:
            out.pop("required", None)
    elif schema.get("type") == "object" and isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(schema["additionalProperties"], defs)
    if schema.get("type") == "array":
        out["items"] = structural(schema["items"], defs) if "items" in schema else {}
    if out.get("default") == [] or out.get("default") == {} and "properties" not in out:
        # An empty default list or map adds nothing but noise to every stored object.
        out.pop("default")
    return out


def _model_schema(model: type[models.ApiModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs = raw.pop("$defs", {})
    schema = structural(raw, defs)
    return schema


def _printer_columns() -> list[dict[str, Any]]:
    return [
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Replicas", "type": "string", "jsonPath": ".status.readyReplicas",
         "description": "Ready serving pods."},
        {"name": "Target", "type": "string", "jsonPath": ".spec.target.repo"},
        {"name": "Draft", "type": "string", "jsonPath": ".spec.draft.repo"},
        {"name": "Cache", "type": "string", "jsonPath": ".status.cache.phase",
         "description": "Downloading, Failed or Complete."},
        {"name": "Acceptance", "type": "number", "format": "float", "jsonPath": ".status.speculation.acceptanceRate",
         "description": "Fraction of draft tokens the target accepted."},
        {"name": "Cached%", "type": "number", "format": "float", "priority": 1, "jsonPath": ".status.cache.percent"},
        {"name": "vLLM", "type": "string", "priority": 1, "jsonPath": ".status.pairCheck.vllmVersion",
         "description": "vLLM version of the serving image, found by the cache Job's pair check."},
        {"name": "Reason", "type": "string", "priority": 1,
         "jsonPath": '.status.conditions[?(@.type=="Ready")].reason'},
        {"name": "Recommended", "type": "string", "priority": 1,
         "jsonPath": ".status.speculation.recommendation.summary",
         "description": "Draft length per running batch size the window and the cost model recommend: from-to:k."},
        {"name": "Tuned", "type": "string", "priority": 1, "jsonPath": ".status.speculation.tuned.summary",
         "description": "Draft length the pods run because tuning Auto applied it: 1-1024:k."},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def build_crd() -> dict[str, Any]:
    spec = _model_schema(models.DFlashDeploymentSpec)
    status = _model_schema(models.DFlashDeploymentStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{models.PLURAL}.{models.GROUP}"},
        "spec": {
            "group": models.GROUP,
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": models.SHORT_NAMES,
                "categories": ["dflash"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": models.VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "DFlashDeployment serves a target LLM with a DFlash draft model for speculative "
                                   "decoding on vLLM, with the two models cached together and checked to fit.",
                    "required": ["spec"],
                    "x-kubernetes-validations": [{
                        "rule": f"self.metadata.name.matches('^{DNS_1035}$')",
                        "message": "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
                                   "starting with a letter, at most 63 characters): it also names the Service",
                    }],
                    "properties": {
                        "apiVersion": {"type": "string", "description": "APIVersion of this object."},
                        "kind": {"type": "string", "description": "Kind of this object."},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": status,
                    },
                }},
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": _printer_columns(),
            }],
        },
    }


def render_crd_yaml() -> str:
    header = "# Generated by `dflash-operator crd` from operator/dflash_operator/api/models.py. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)
