"""Generated bad input against the real API server and the running operator (hypothesis, derandomized so CI
replays the same examples): each DFlashDeployment is either rejected at apply with a field path and a message, or
admitted and given a status a person can read (Stalled=True with a reason, or the download under way); the operator
never crashes or logs an unhandled error, children's names stay inside the API's limits, and a valid
DFlashDeployment in the same namespace keeps working throughout."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.dfd import API, apply_with_cache, deployment, dfd
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster

EXAMPLES = 500
BASE = dfd("base")["spec"]

# Where mutations land: every spec field, some list items, and a few places a field does not exist.
PATHS: list[tuple[Any, ...]] = [
    ("target",), ("target", "repo"), ("target", "revision"), ("draft",), ("draft", "repo"), ("draft", "revision"),
    ("numSpeculativeTokens",), ("replicas",), ("tensorParallelSize",), ("draftTensorParallelSize",),
    ("gpuResourceName",), ("image",), ("extraArgs",), ("extraArgs", 0), ("maxModelLen",), ("env",), ("env", 0),
    ("nodeSelector",), ("tolerations",), ("tolerations", 0), ("affinity",), ("resources",), ("hubEndpoint",),
    ("hubTokenSecretRef",), ("hubTokenSecretRef", "name"), ("cache",), ("cache", "size"), ("cache", "accessMode"),
    ("cache", "retainPolicy"), ("cache", "storageClassName"), ("readiness",), ("readiness", "minAcceptanceRate"),
    ("readiness", "probePrompt"), ("readiness", "probeMaxTokens"), ("readiness", "startupTimeoutSeconds"),
    ("perRequestSpeculativeMetrics",), ("vllmVersion",), ("unknownField",), ("cache", "unknownField"),
]

# Values a user might plausibly write, good and bad, for the pod-template fields the CRD passes through unchecked.
PLAUSIBLE = st.sampled_from([
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Sometimes"},
    {"operator": "Exists", "value": "x"},
    {"name": "FOO", "value": "bar"}, {"name": "", "value": "x"}, {"name": "A", "valueFrom": {}},
    {"limits": {"memory": "lots"}}, {"requests": {"cpu": "-1"}}, {"limits": {"memory": "64Gi"}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
    {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 500}]}},
    {"gpu": "h200"}, {"bad key!": "v"},
    "v1.2.3", "main", "refs/heads/x", "a..b", "0.28.0", "v0.32", "Summary", "Detailed",
    "https://hub.example.internal/hf", "hub.example:80", "ReadWriteOncePod", "Delete", "200Gi", "1Ti", "-5Gi",
    "--enforce-eager", "--port=1", "-tp", "--per-request-spec-decode-metrics=summary",
    "org/model", "org/model/extra", "ghcr.io/x/vllm:v0.28.0-dflash.1", "vllm:latest",
])
VALUES = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([0, 1, 2, 3, 7, 8, 32, 33, 128, 1000]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([-0.5, 0.0, 0.5, 1.0, 1.5]),
    st.text(max_size=40), st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=12),
    st.sampled_from(["x" * 300, "y" * 5000, "é" * 2100, "\u0000", "😀" * 20]),
    st.lists(st.one_of(st.text(max_size=10), PLAUSIBLE), max_size=3),
    st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=10), st.integers()), max_size=3),
    PLAUSIBLE,
)
NAMES = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9]{0,8}\Z"),
    st.from_regex(r"\A[a-z][-a-z0-9]{55,62}[a-z0-9]\Z"),    # the longest names, for the children's
    st.sampled_from(["UPPER", "9lives", "dots.in.name", "trailing-", "x" * 64]),
)
# Values of the right shape for each field, in range or not: what gets past the schema and reaches the operator.
TOLERATIONS = st.lists(st.fixed_dictionaries({"key": st.sampled_from(["nvidia.com/gpu", "", "bad key!"])}, optional={
    "operator": st.sampled_from(["Exists", "Equal", "Sometimes"]), "value": st.text(max_size=8),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", "Later"]),
    "tolerationSeconds": st.integers(min_value=-5, max_value=10)}), min_size=1, max_size=2)
ENV = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["FOO", "", "1BAD", "HF_HOME", "A=B"])}, optional={
    "value": st.text(max_size=10), "valueFrom": st.just({})}), min_size=1, max_size=2)
RESOURCES = st.fixed_dictionaries({}, optional={
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "bogus"]),
                              st.sampled_from(["1", "64Gi", "lots", "-1", "0.5m"]), max_size=2),
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), st.sampled_from(["2", "1Gi", "-1"]), max_size=2)})
AFFINITY = st.sampled_from([
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h200"]}]}]}}},
    {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 500}]}},
    {"nodeAffinity": {}}])
REPOS = st.sampled_from(["Qwen/Qwen3-Coder-Next", "org/other-target", "z-lab/Other-DFlash", "a/b", "org/x.y_z-1"])
SHAPED: dict[tuple[Any, ...], st.SearchStrategy] = {
    ("tolerations",): TOLERATIONS, ("env",): ENV, ("resources",): RESOURCES, ("affinity",): AFFINITY,
    ("nodeSelector",): st.dictionaries(st.sampled_from(["gpu", "bad key!", "a/b/c"]), st.text(max_size=8), max_size=2),
    ("target", "repo"): REPOS, ("draft", "repo"): REPOS,
    ("target", "revision"): st.sampled_from(["main", "v1", "a" * 40, "refs/pr/1", "x" * 255]),
    ("numSpeculativeTokens",): st.integers(min_value=1, max_value=32),
    ("tensorParallelSize",): st.sampled_from([1, 2, 4, 8]), ("draftTensorParallelSize",): st.sampled_from([1, 2, 4]),
    ("replicas",): st.integers(min_value=0, max_value=3),
    ("image",): st.sampled_from(["vllm:latest", "ghcr.io/x/vllm-dflash:v0.28.0-dflash.1", "reg:5000/v@sha256:" +
                                 "0" * 64, "ghcr.io/x/vllm-dflash:v0.32.0-dflash.1"]),
    ("perRequestSpeculativeMetrics",): st.sampled_from(["Summary", "Detailed"]),
    ("extraArgs",): st.lists(st.sampled_from(["--enforce-eager", "--dtype=bfloat16", "--port=1", "-tp", "x" * 300]),
                             max_size=3),
    ("readiness", "probePrompt"): st.text(min_size=1, max_size=200),
    ("cache", "size"): st.sampled_from(["1Gi", "200Gi", "1.5Ti", "lots"]),
}
SHAPED_MUTATION = st.sampled_from(sorted(SHAPED, key=str)).flatmap(
    lambda path: st.tuples(st.just(path), st.just("set"), SHAPED[path]))
MUTATION = st.one_of(
    st.tuples(st.sampled_from(PATHS), st.sampled_from(["set", "set", "set", "delete"]), VALUES), SHAPED_MUTATION)


def mutate(spec: dict, path: tuple[Any, ...], op: str, value: Any) -> None:
    value = copy.deepcopy(value)   # strategies hand out shared objects: a value set twice must not become a cycle
    *parents, last = path
    node: Any = spec
    for key in parents:
        if isinstance(key, int):
            if not isinstance(node, list) or not node:
                return
            node = node[0]
        else:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
    if isinstance(last, int):
        if isinstance(node, list) and node:
            if op == "delete":
                node.pop(0)
            else:
                node[0] = value
        return
    if op == "delete":
        node.pop(last, None)
    else:
        node[last] = value


FIELD_PATH = re.compile(r"\b(spec|metadata)(\.[A-Za-z0-9_\[\]]+)+")


@pytest.fixture
def collected(api_client, namespace: str) -> Iterator[None]:
    """Bounded clean-up, pass or fail, so the tests after this one do not share the cluster with its garbage
    collection (hundreds of children)."""
    yield
    kubernetes.client.CustomObjectsApi(api_client).delete_collection_namespaced_custom_object(
        *API, namespace, "dflashdeployments")
    batch, apps = kubernetes.client.BatchV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    wait_for(lambda: not batch.list_namespaced_job(namespace).items and
             not apps.list_namespaced_deployment(namespace).items, "the fuzzed children collected", 180)


def test_generated_dflashdeployments_are_refused_or_reported_and_never_hurt_the_operator(
    control_plane: ControlPlane, api_client, operator, namespace: str, collected: None
) -> None:
    custom = kubernetes.client.CustomObjectsApi(api_client)
    log_path = control_plane.workdir / "logs" / "operator.log"
    log_start = log_path.stat().st_size    # the operator's log is the session's: read only this test's part
    apply_with_cache(control_plane, api_client, namespace, dfd("anchor"))
    wait_for(lambda: deployment(api_client, namespace, "anchor"), "the anchor's Deployment")

    admitted: dict[str, dict] = {}
    refused: list[str] = []
    counter = iter(range(10**6))

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(NAMES, st.lists(MUTATION, min_size=1, max_size=4))
    def one(name: str, mutations: list) -> None:
        spec = copy.deepcopy(BASE)
        for path, op, value in mutations:
            mutate(spec, path, op, value)
        unique = f"{name[:57]}-{next(counter):05d}" if re.fullmatch(r"[a-z][-a-z0-9]*", name) else name
        body = {"apiVersion": f"{API[0]}/{API[1]}", "kind": "DFlashDeployment", "metadata": {"name": unique},
                "spec": spec}
        try:
            custom.create_namespaced_custom_object(*API, namespace, "dflashdeployments", body)
        except ApiException as error:
            assert error.status in (400, 422), f"HTTP {error.status} for {json.dumps(body)[:500]}: {error.body}"
            message = json.loads(error.body)["message"]
            assert FIELD_PATH.search(message), message   # names the field: spec.… or metadata.…
            refused.append(message)
            return
        admitted[unique] = body

    one()
    assert len(refused) + len(admitted) >= EXAMPLES * 0.9
    assert refused and admitted, (len(refused), len(admitted))

    def status_of(name: str) -> dict | None:
        obj = custom.get_namespaced_custom_object(*API, namespace, "dflashdeployments", name)
        status = obj.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return conditions if status.get("observedGeneration") == obj["metadata"]["generation"] and \
            "Ready" in conditions else None

    outcomes: dict[str, int] = {}
    for name in admitted:
        conditions = wait_for(lambda name=name: status_of(name), f"a status for {name}", 120)
        stalled, ready = conditions.get("Stalled", {}), conditions["Ready"]
        assert ready["reason"] and ready["message"], (name, conditions)
        if stalled.get("status") == "True":
            assert stalled["reason"] and stalled["message"], (name, stalled)
            outcomes[stalled["reason"]] = outcomes.get(stalled["reason"], 0) + 1
        else:  # a spec that works: its download under way, its pods rolling out, or done (e.g. scaled to zero)
            assert conditions["Reconciling"]["status"] == "True" or ready["status"] == "True", (name, conditions)
            outcomes[ready["reason"]] = outcomes.get(ready["reason"], 0) + 1
    print(f"\n{len(refused)} refused at apply, {len(admitted)} admitted: {outcomes}")

    # Children's names stay inside the API's limits (63 for anything that becomes a label value).
    batch, core = kubernetes.client.BatchV1Api(api_client), kubernetes.client.CoreV1Api(api_client)
    names = [j.metadata.name for j in batch.list_namespaced_job(namespace).items] + \
        [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items] + \
        [s.metadata.name for s in core.list_namespaced_service(namespace).items]
    assert names and max(map(len, names)) <= 63, max(names, key=len)

    # The operator never went down, never logged an unhandled error, and still serves the valid one.
    assert operator.poll() is None, "the operator exited"
    with log_path.open("rb") as stream:
        stream.seek(log_start)
        log = stream.read().decode(errors="replace")
    # (The log is the whole operator's: other tests' namespaces may be going away meanwhile.)
    ours = [line for line in log.splitlines() if f"{namespace}/" in line and ("[ERROR" in line or "[CRITICAL" in
                                                                              line or "Traceback" in line)]
    assert ours == [], "\n".join(ours[:20])
    custom.patch_namespaced_custom_object(*API, namespace, "dflashdeployments", "anchor", {"spec": {"replicas": 2}})
    try:
        wait_for(lambda: (d := deployment(api_client, namespace, "anchor")) and d.spec.replicas == 2,
                 "the anchor scaled to 2 after the fuzzing", 120)
    except AssertionError as error:
        anchor = custom.get_namespaced_custom_object(*API, namespace, "dflashdeployments", "anchor")
        raise AssertionError(f"{error}\nthe anchor: {json.dumps(anchor.get('status'))}") from None

