"""The control plane the rest of the cluster tier stands on: real API server, RBAC, scheduler, kwok, GC and CEL."""

from __future__ import annotations

import ipaddress
import json
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.controlplane import READY_ANNOTATION, ControlPlane
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster


def _built_version() -> str:
    script = (Path(__file__).parent / "build.sh").read_text()
    return re.search(r"^K8S_VERSION=(\S+)", script, re.M).group(1)


def test_api_server_reports_the_version_built(control_plane: ControlPlane) -> None:
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert version["gitVersion"] == _built_version()
    assert version["minor"] == _built_version().split(".")[1]


def _get_with_token(plane: ControlPlane, path: str, token: str) -> int:
    assert plane.pki
    context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    request = urllib.request.Request(plane.server + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_rbac_is_enforced_for_a_token_without_rights(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl("-n", namespace, "create", "serviceaccount", "nobody")
    token = control_plane.kubectl("-n", namespace, "create", "token", "nobody").stdout.strip()
    pods = f"/api/v1/namespaces/{namespace}/pods"

    assert _get_with_token(control_plane, pods, token) == 403
    assert _get_with_token(control_plane, pods, "not-a-token") == 401

    # The same token gains exactly what a RoleBinding grants: it authenticates, and authorization decides.
    control_plane.kubectl("-n", namespace, "create", "role", "pod-reader", "--verb=list", "--resource=pods")
    control_plane.kubectl("-n", namespace, "create", "rolebinding", "nobody-reads",
                          "--role=pod-reader", f"--serviceaccount={namespace}:nobody")
    wait_for(lambda: _get_with_token(control_plane, pods, token) == 200, "the RoleBinding to take effect", 15)
    assert _get_with_token(control_plane, f"/api/v1/namespaces/{namespace}/secrets", token) == 403


def _gpu_deployment(name: str, gpus: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.23.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }]},
            },
        },
    }


def _pods(core: kubernetes.client.CoreV1Api, namespace: str, app: str) -> list:
    return core.list_namespaced_pod(namespace, label_selector=f"app={app}").items


def _condition(pod, kind: str):
    return next((c for c in pod.status.conditions or [] if c.type == kind), None)


def test_gpu_pod_is_scheduled_runs_and_becomes_ready_on_annotation(
    control_plane: ControlPlane, api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps, core = kubernetes.client.AppsV1Api(api_client), kubernetes.client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _gpu_deployment("two-gpus", 2))

    pod = wait_for(
        lambda: next((p for p in _pods(core, namespace, "two-gpus") if p.status.phase == "Running"), None),
        "the pod to run",
    )
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.product"], "scheduled onto a node that is not a GPU node"
    assert ipaddress.ip_address(pod.status.pod_ip).is_loopback, pod.status.pod_ip
    assert _condition(pod, "Ready").status == "False", "Ready before the test said so"

    core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"annotations": {READY_ANNOTATION: "true"}}})
    wait_for(lambda: _condition(core.read_namespaced_pod(pod.metadata.name, namespace), "Ready").status == "True",
             "the pod to become Ready after the annotation")
    wait_for(lambda: apps.read_namespaced_deployment(
        "two-gpus", namespace).status.ready_replicas == 1, "the Deployment to count the ready replica")


def test_pod_asking_for_more_gpus_than_any_node_has_stays_pending(
    api_client: kubernetes.client.ApiClient, namespace: str, control_plane: ControlPlane
) -> None:
    apps, core = kubernetes.client.AppsV1Api(api_client), kubernetes.client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _gpu_deployment("too-many", control_plane.gpus_per_node + 1))

    def unschedulable():
        pods = _pods(core, namespace, "too-many")
        scheduled = _condition(pods[0], "PodScheduled") if pods else None
        return scheduled if scheduled and scheduled.reason == "Unschedulable" else None

    scheduled = wait_for(unschedulable, "the scheduler to give up on the pod")
    assert scheduled.status == "False"
    assert "Insufficient nvidia.com/gpu" in scheduled.message, scheduled.message
    assert _pods(core, namespace, "too-many")[0].status.phase == "Pending"


def test_garbage_collector_removes_the_replicaset_of_a_deleted_deployment(
    api_client: kubernetes.client.ApiClient, namespace: str
) -> None:
    apps = kubernetes.client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _gpu_deployment("owner", 1))
    replica_set = wait_for(lambda: apps.list_namespaced_replica_set(namespace).items, "the ReplicaSet")[0]
    assert replica_set.metadata.owner_references[0].kind == "Deployment"

    # Background propagation: the API server deletes only the owner; removing the ReplicaSet is the GC's work.
    apps.delete_namespaced_deployment("owner", namespace, propagation_policy="Background")
    wait_for(lambda: not apps.list_namespaced_replica_set(namespace).items, "the GC to delete the ReplicaSet")


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.dflash.dev"},
    "spec": {
        "group": "test.dflash.dev",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "properties": {"minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}},
                    "x-kubernetes-validations": [{
                        "rule": "self.minReplicas <= self.maxReplicas",
                        "message": "minReplicas must not exceed maxReplicas",
                    }],
                }},
            }},
        }],
    },
}


def test_crd_cel_rule_rejects_a_bad_object_with_its_message(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(WIDGET_CRD))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/widgets.test.dflash.dev", "--timeout=30s")

    def widget(name: str, low: int, high: int) -> str:
        return json.dumps({"apiVersion": "test.dflash.dev/v1", "kind": "Widget", "metadata": {"name": name},
                           "spec": {"minReplicas": low, "maxReplicas": high}})

    good = control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=widget("good", 1, 2), check=False)
    assert good.returncode == 0, good.stderr
    bad = control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=widget("bad", 3, 2), check=False)
    assert bad.returncode != 0
    assert "minReplicas must not exceed maxReplicas" in bad.stderr, bad.stderr
    assert "spec: Invalid value" in bad.stderr, bad.stderr
