"""The API server itself rejects bad DFlashDeployments, with messages a person understands (OpenAPI + CEL)."""

from __future__ import annotations

import copy
import json

import pytest

from dflash_testkit.controlplane import ControlPlane

pytestmark = pytest.mark.cluster

BASE = {
    "apiVersion": "serving.dflash.dev/v1alpha1",
    "kind": "DFlashDeployment",
    "metadata": {"name": "valid"},
    "spec": {"target": {"repo": "Qwen/Qwen3-Coder-Next"}, "draft": {"repo": "z-lab/Qwen3-Coder-Next-DFlash"}},
}


def variant(change) -> dict:
    obj = copy.deepcopy(BASE)
    change(obj)
    return obj


def _spec(**fields):
    return lambda obj: obj["spec"].update(fields)


def _schedule(*ranges: tuple[int, int, int], tokens: int = 8):
    """spec.speculation.tokensByBatchSize from (fromBatchSize, toBatchSize, numSpeculativeTokens) triples."""
    return _spec(numSpeculativeTokens=tokens, speculation={"tokensByBatchSize": [
        {"fromBatchSize": a, "toBatchSize": b, "numSpeculativeTokens": k} for a, b, k in ranges]})


INVALID = {
    "draft-equals-target": (_spec(draft={"repo": "Qwen/Qwen3-Coder-Next"}),
                            "a model cannot be its own DFlash draft"),
    "tp-not-power-of-two": (_spec(tensorParallelSize=3), "tensorParallelSize must be a power of two"),
    "draft-tp-neither-1-nor-target": (_spec(tensorParallelSize=4, draftTensorParallelSize=2),
                                      "spec.draftTensorParallelSize must be 1 or spec.tensorParallelSize"),
    "per-request-metrics-value": (_spec(perRequestSpeculativeMetrics="summary"),
                                  'spec.perRequestSpeculativeMetrics: Unsupported value: "summary"'),
    "vllm-version-not-a-version": (_spec(vllmVersion="latest"), "spec.vllmVersion in body should match"),
    "extra-arg-per-request-metrics": (_spec(extraArgs=["--per-request-spec-decode-metrics=summary"]),
                                      "extraArgs may not set a flag the operator sets"),
    "spec-tokens-zero": (_spec(numSpeculativeTokens=0),
                         "spec.numSpeculativeTokens: Invalid value: 0: spec.numSpeculativeTokens in body should be "
                         "greater than or equal to 1"),
    "spec-tokens-33": (_spec(numSpeculativeTokens=33), "should be less than or equal to 32"),
    "extra-arg-port": (_spec(extraArgs=["--port=9"]), "extraArgs may not set a flag the operator sets"),
    "extra-arg-spec-config": (_spec(extraArgs=["--speculative-config", "{}"]),
                              'spec.extraArgs[0]: Invalid value: "--speculative-config"'),
    "cache-size-not-quantity": (_spec(cache={"size": "lots"}), "cache.size must be a quantity such as 200Gi"),
    "cache-access-mode": (_spec(cache={"accessMode": "ReadWriteOncePod"}),
                          'spec.cache.accessMode: Unsupported value: "ReadWriteOncePod"'),
    "retain-policy": (_spec(cache={"retainPolicy": "Forever"}), 'Unsupported value: "Forever"'),
    "repo-not-an-id": (_spec(target={"repo": "not a repo"}), "spec.target.repo in body should match"),
    "target-missing": (lambda obj: obj["spec"].pop("target"), "spec.target: Required value"),
    "acceptance-above-one": (_spec(readiness={"minAcceptanceRate": 1.5}),
                             "spec.readiness.minAcceptanceRate in body should be less than or equal to 1"),
    "negative-replicas": (_spec(replicas=-1), "spec.replicas in body should be greater than or equal to 0"),
    "unknown-field": (_spec(numSpeculativeToken=4), 'unknown field "spec.numSpeculativeToken"'),
    "gpu-resource-name": (_spec(gpuResourceName="GPU"), "spec.gpuResourceName in body should match"),
    "name-not-dns-1035": (lambda obj: obj["metadata"].update(name="9lives"),
                          "metadata.name must be a DNS-1035 label"),
    "max-model-len-tiny": (_spec(maxModelLen=8), "spec.maxModelLen in body should be greater than or equal to 16"),
    "revision-with-space": (_spec(draft={"repo": "z-lab/x", "revision": "bad rev"}),
                            "spec.draft.revision in body should match"),
    "revision-dot-dot": (_spec(draft={"repo": "z-lab/x", "revision": "v1..v2"}),
                         "spec.draft.revision: Invalid value: \"v1..v2\": revision must follow git's ref-name rules"),
    "revision-dot-lock": (_spec(target={"repo": "z-lab/x", "revision": "release.lock"}),
                          "revision must follow git's ref-name rules"),
    "revision-hidden-part": (_spec(target={"repo": "z-lab/x", "revision": "refs/.hidden"}),
                             "revision must follow git's ref-name rules"),
    "revision-trailing-slash": (_spec(target={"repo": "z-lab/x", "revision": "feature/"}),
                                "revision must follow git's ref-name rules"),
    "startup-timeout-short": (_spec(readiness={"startupTimeoutSeconds": 10}),
                              "should be greater than or equal to 60"),
    "on-low-acceptance-value": (_spec(speculation={"onLowAcceptance": "Disable"}),
                                'spec.speculation.onLowAcceptance: Unsupported value: "Disable"'),
    "window-too-short": (_spec(speculation={"windowSeconds": 5}),
                         "spec.speculation.windowSeconds in body should be greater than or equal to 30"),
    "batch-range-reversed": (_schedule((1, 4, 4), (9, 5, 2)), "fromBatchSize must not exceed toBatchSize"),
    "batch-ranges-overlap": (_schedule((1, 8, 4), (8, 16, 2)), "the ranges of tokensByBatchSize must not overlap"),
    "batch-ranges-repeated": (_schedule((1, 8, 4), (1, 8, 4)), "the ranges of tokensByBatchSize must not overlap"),
    "batch-ranges-not-from-1": (_schedule((2, 8, 4)), "one range of tokensByBatchSize must start at fromBatchSize 1"),
    "batch-tokens-above-k": (_schedule((1, 8, 6), tokens=4),
                             "may not propose more tokens than spec.numSpeculativeTokens"),
    "batch-key-misspelled": (_spec(speculation={"tokensByBatchSize": [
        {"fromBatchSize": 1, "toBatchSize": 8, "numSpeculativeToken": 4}]}),
        'unknown field "spec.speculation.tokensByBatchSize[0].numSpeculativeToken"'),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_dflashdeployment_is_rejected_with_its_message(control_plane: ControlPlane, namespace: str,
                                                               case: str) -> None:
    change, message = INVALID[case]
    result = control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(variant(change)),
                                   check=False)
    assert result.returncode != 0, f"{case} was admitted"
    assert message in result.stderr, result.stderr
    listed = control_plane.kubectl("-n", namespace, "get", "dfd", "-o", "name").stdout
    assert listed == "", f"{case} left an object behind: {listed}"


def test_the_valid_base_is_admitted(control_plane: ControlPlane, namespace: str) -> None:
    result = control_plane.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", input=json.dumps(BASE),
                                   check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("first, second, message", [
    ({"accessMode": "ReadWriteMany"}, {"accessMode": "ReadWriteOnce"}, "cache.accessMode is immutable"),
    ({"storageClassName": "fast"}, {"storageClassName": "slow"}, "cache.storageClassName is immutable"),
    ({"size": "200Gi"}, {"size": "100Gi"}, "cache.size may grow but not shrink"),
])
def test_transition_rules_reject_changes_that_make_no_sense(control_plane: ControlPlane, namespace: str,
                                                            first: dict, second: dict, message: str) -> None:
    def apply(cache: dict):
        return control_plane.kubectl("-n", namespace, "apply", "-f", "-", check=False,
                                     input=json.dumps(variant(_spec(cache=cache))))

    assert apply(first).returncode == 0
    result = apply(second)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_cache_may_grow(control_plane: ControlPlane, namespace: str) -> None:
    for size in ("200Gi", "1Ti"):
        result = control_plane.kubectl("-n", namespace, "apply", "-f", "-", check=False,
                                       input=json.dumps(variant(_spec(cache={"size": size}))))
        assert result.returncode == 0, result.stderr


def test_kubectl_explain_shows_the_descriptions(control_plane: ControlPlane) -> None:
    explained = " ".join(control_plane.kubectl("explain", "dfd.spec.readiness.minAcceptanceRate").stdout.split())
    assert "fraction of draft tokens accepted during the probe" in explained
    top = control_plane.kubectl("explain", "dflashdeployments.spec").stdout
    for field in ("target", "draft", "numSpeculativeTokens", "tensorParallelSize", "cache", "readiness"):
        assert field in top, f"{field} missing from kubectl explain"


def test_kubectl_get_shows_the_printer_columns(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(BASE))
    header, row = control_plane.kubectl("-n", namespace, "get", "dfd").stdout.splitlines()[:2]
    assert header.split() == ["NAME", "READY", "REPLICAS", "TARGET", "DRAFT", "CACHE", "ACCEPTANCE", "AGE"]
    assert "Qwen/Qwen3-Coder-Next" in row and "z-lab/Qwen3-Coder-Next-DFlash" in row
    wide = control_plane.kubectl("-n", namespace, "get", "dfd", "-o", "wide").stdout.splitlines()[0]
    assert {"REASON", "CACHED%"} <= set(wide.split())
