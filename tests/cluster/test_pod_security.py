"""Pod Security, judged by the API server's own PodSecurity admission plugin (a server-side dry run of each pod):
the cache Job's pod and the operator's own pod meet `restricted`; the serving pods meet `baseline`, the level a
GPU namespace can enforce (vLLM's images run as root and need /dev/shm)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import kubernetes
import pytest
import yaml

from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.helm import CHART, helm
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qwen3-coder-next.yaml"


def _default_service_account(api_client, namespace: str) -> None:
    """Admission looks the pod's service account up, even in a dry run: wait for the controller to make it."""
    core = kubernetes.client.CoreV1Api(api_client)
    wait_for(lambda: core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items,
             "the namespace's default service account")


def _enforce(api_client, namespace: str, level: str) -> None:
    kubernetes.client.CoreV1Api(api_client).patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}}})


def _pod(template: dict, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": template["metadata"]["labels"]},
            "spec": template["spec"]}


def _admitted(plane: ControlPlane, namespace: str, pod: dict) -> subprocess.CompletedProcess:
    return plane.kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", input=json.dumps(pod),
                         check=False)


def _rendered(namespace: str) -> dict[str, dict]:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["hubTokenSecretRef"] = {"name": "hub"}   # the fullest cache pod: with the token's env
    out = subprocess.run([str(REPO / ".venv" / "bin" / "dflash-operator"), "render", "-n", namespace, "-f", "-"],
                         input=json.dumps(manifest), capture_output=True, text=True, check=True).stdout
    return {o["kind"]: o for o in yaml.safe_load_all(out) if o}


def test_the_cache_pod_meets_restricted_and_the_serving_pod_baseline(control_plane: ControlPlane, api_client,
                                                                     namespace: str) -> None:
    _default_service_account(api_client, namespace)
    objects = _rendered(namespace)
    cache_pod = _pod(objects["Job"]["spec"]["template"], "cache")
    serving_pod = _pod(objects["Deployment"]["spec"]["template"], "serving")

    _enforce(api_client, namespace, "restricted")
    result = _admitted(control_plane, namespace, cache_pod)
    assert result.returncode == 0, result.stderr
    # The check: the admission plugin does refuse what breaks the level (here, a container allowed to escalate).
    loose = json.loads(json.dumps(cache_pod))
    loose["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    refused = _admitted(control_plane, namespace, loose)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr

    _enforce(api_client, namespace, "baseline")
    result = _admitted(control_plane, namespace, serving_pod)
    assert result.returncode == 0, result.stderr


def test_the_operator_pod_meets_restricted(control_plane: ControlPlane, api_client, namespace: str) -> None:
    rendered = [o for o in yaml.safe_load_all(helm(control_plane, "template", "dfo", str(CHART), "-n",
                                                    namespace).stdout) if o]
    (operator,) = [o for o in rendered if o["kind"] == "Deployment"]
    (account,) = [o for o in rendered if o["kind"] == "ServiceAccount"]
    control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(account))
    _enforce(api_client, namespace, "restricted")
    result = _admitted(control_plane, namespace, _pod(operator["spec"]["template"], "operator"))
    assert result.returncode == 0, result.stderr
