"""The Helm chart with real helm 3 against a real API server, and the operator running under the chart's RBAC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml

from dflash_testkit.cachejob import fetch_result, finish_cache_job
from dflash_testkit.controlplane import ControlPlane, free_port, http_ok
from dflash_testkit.dfd import condition_is, deployment, dfd, mark_pods_ready
from dflash_testkit.helm import CHART, helm
from dflash_testkit.operator import running_operator
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
RELEASE, OPS = "dfo", "dflash-system"
SA = f"system:serviceaccount:{OPS}:{RELEASE}-dflash-operator"


@pytest.fixture(scope="module")
def bare_plane(tmp_path_factory: pytest.TempPathFactory, control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """A second control plane without the CRD, so the chart installs it the way a user's cluster would."""
    plane = ControlPlane(workdir=tmp_path_factory.mktemp("bare-plane"), bin_dir=control_plane.bin_dir)
    plane.start()
    yield plane
    plane.stop()


@pytest.mark.parametrize("case, args", [
    ("default", []),
    ("namespaced", ["--set", "watch.namespaces={team-a,team-b}", "--set", "metrics.serviceMonitor.enabled=true"]),
])
def test_template_matches_golden_output(control_plane: ControlPlane, case: str, args: list[str]) -> None:
    rendered = helm(control_plane, "template", RELEASE, str(CHART), "-n", OPS, *args).stdout
    golden = GOLDEN / f"chart-{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"chart output changed; if intended, UPDATE_GOLDEN=1 and review {golden}"


def test_hub_endpoint_reaches_the_operator_only_when_set(control_plane: ControlPlane) -> None:
    def operator_env(*args: str) -> dict[str, str]:
        docs = yaml.safe_load_all(helm(control_plane, "template", RELEASE, str(CHART), "-n", OPS, *args).stdout)
        deployment = next(d for d in docs if d and d["kind"] == "Deployment")
        return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "DFLASH_HUB_ENDPOINT" not in operator_env()     # huggingface_hub's own default
    mirrored = operator_env("--set", "hub.endpoint=https://hub.mirror.example.internal/hf")
    assert mirrored["DFLASH_HUB_ENDPOINT"] == "https://hub.mirror.example.internal/hf"


def test_chart_carries_the_generated_crd(control_plane: ControlPlane) -> None:
    assert (CHART / "files" / "crd.yaml").read_text() == (
        REPO / "crds" / "serving.dflash.dev_dflashdeployments.yaml").read_text()


def test_lint_passes(control_plane: ControlPlane) -> None:
    result = helm(control_plane, "lint", "--strict", str(CHART), check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_namespaced_mode_grants_roles_only_where_it_watches(control_plane: ControlPlane) -> None:
    docs = list(yaml.safe_load_all(helm(control_plane, "template", RELEASE, str(CHART), "-n", OPS,
                                        "--set", "watch.namespaces={team-a}").stdout))
    kinds = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs if d}
    assert ("Role", "team-a", f"{RELEASE}-dflash-operator") in kinds
    cluster_roles = [d for d in docs if d and d["kind"] == "ClusterRole"]
    assert [r["metadata"]["name"] for r in cluster_roles] == [f"{RELEASE}-dflash-operator-crd-reader"]
    assert all(rule["verbs"] == ["get", "list", "watch"] for rule in cluster_roles[0]["rules"])


@pytest.mark.parametrize("args, message", [
    (["--set", "replicas=2"], "Additional property replicas is not allowed"),
    (["--set", "operator.resyncSeconds=soon"], "operator.resyncSeconds: Invalid type. Expected: integer"),
    (["--set", "image.pullPolicy=Sometimes"], "image.pullPolicy: image.pullPolicy must be one of the following"),
    (["--set", "watch.namespaces={Team_A}"], "watch.namespaces.0: Does not match pattern"),
    (["--set", "hub.endpoint=hub.internal:8080"], "hub.endpoint: Does not match pattern"),
])
def test_schema_rejects_bad_values_with_a_readable_message(control_plane: ControlPlane, args: list[str],
                                                           message: str) -> None:
    result = helm(control_plane, "template", RELEASE, str(CHART), *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def _objects(plane: ControlPlane) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))


def test_install_upgrade_uninstall(bare_plane: ControlPlane) -> None:
    helm(bare_plane, "install", RELEASE, str(CHART), "-n", OPS, "--create-namespace")
    client = _objects(bare_plane)
    crd = kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition(
        "dflashdeployments.serving.dflash.dev")
    assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
    apps = kubernetes.client.AppsV1Api(client)
    operator = apps.read_namespaced_deployment(f"{RELEASE}-dflash-operator", OPS)
    pod = operator.spec.template.spec
    container = pod.containers[0]
    assert pod.security_context.run_as_non_root and pod.security_context.seccomp_profile.type == "RuntimeDefault"
    assert container.security_context.read_only_root_filesystem is True
    assert container.security_context.allow_privilege_escalation is False
    assert container.liveness_probe.http_get.path == "/healthz"
    env = {e.name: e.value for e in container.env}
    assert env["DFLASH_RESYNC_SECONDS"] == "30"

    helm(bare_plane, "upgrade", RELEASE, str(CHART), "-n", OPS, "--set", "operator.resyncSeconds=5",
         "--set", "image.tag=0.1.1")
    upgraded = apps.read_namespaced_deployment(f"{RELEASE}-dflash-operator", OPS).spec.template.spec.containers[0]
    assert {e.name: e.value for e in upgraded.env}["DFLASH_RESYNC_SECONDS"] == "5"
    assert upgraded.image.endswith(":0.1.1")
    assert {e.name: e.value for e in upgraded.env}["DFLASH_OPERATOR_IMAGE"] == upgraded.image

    bare_plane.kubectl("create", "namespace", "keepme")
    bare_plane.kubectl("-n", "keepme", "apply", "-f", "-", input=json.dumps(dfd("kept")))
    helm(bare_plane, "uninstall", RELEASE, "-n", OPS)
    assert apps.list_namespaced_deployment(OPS).items == []
    kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition(
        "dflashdeployments.serving.dflash.dev")
    assert bare_plane.kubectl("-n", "keepme", "get", "dfd", "kept", "-o", "name").stdout.strip() == \
        "dflashdeployment.serving.dflash.dev/kept"


# What the chart's ServiceAccount may and may not do, checked by the API server's own authorizer.
CAN = [
    ("watch", "dflashdeployments.serving.dflash.dev"), ("patch", "dflashdeployments.serving.dflash.dev/status"),
    ("patch", "deployments.apps"), ("create", "deployments.apps"), ("patch", "services"),
    ("patch", "poddisruptionbudgets.policy"), ("patch", "jobs.batch"), ("patch", "persistentvolumeclaims"),
    ("list", "pods"), ("get", "pods/log"), ("create", "events"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "resourcequotas"), ("watch", "storageclasses.storage.k8s.io"), ("watch", "nodes"),
]
CANNOT = [
    ("get", "secrets"), ("list", "secrets"), ("delete", "deployments.apps"), ("delete", "persistentvolumeclaims"),
    ("update", "dflashdeployments.serving.dflash.dev"), ("delete", "dflashdeployments.serving.dflash.dev"),
    ("create", "pods"), ("create", "clusterroles.rbac.authorization.k8s.io"), ("*", "*"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io"), ("create", "pods/exec"),
    ("patch", "nodes"), ("patch", "resourcequotas"), ("create", "storageclasses.storage.k8s.io"),
]


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Iterator[None]:
    """The chart on the main plane, without its CRD (the fixture plane already has it), for RBAC checks."""
    helm(control_plane, "install", RELEASE, str(CHART), "-n", OPS, "--create-namespace", "--set", "crds.enabled=false")
    yield
    helm(control_plane, "uninstall", RELEASE, "-n", OPS)


def test_rbac_matrix(control_plane: ControlPlane, installed: None) -> None:
    def can(verb: str, resource: str) -> bool:
        result = control_plane.kubectl("auth", "can-i", verb, resource, f"--as={SA}", "-n", "anywhere", check=False)
        return result.stdout.strip() == "yes"

    assert [c for c in CAN if not can(*c)] == [], "the operator lacks a permission it uses"
    assert [c for c in CANNOT if can(*c)] == [], "the operator holds a permission it does not need"


@pytest.fixture
def sa_namespace(api_client) -> Iterator[str]:
    name = f"sa-{uuid.uuid4().hex[:6]}"
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _sa_kubeconfig(control_plane: ControlPlane) -> Path:
    token = control_plane.kubectl("-n", OPS, "create", "token", f"{RELEASE}-dflash-operator",
                                  "--duration=1h").stdout.strip()
    assert control_plane.pki
    kubeconfig = control_plane.workdir / "operator-sa.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": control_plane.server,
                                               "certificate-authority": str(control_plane.pki.ca_cert)}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }))
    return kubeconfig


def test_operator_reconciles_end_to_end_with_the_charts_service_account(
    control_plane: ControlPlane, installed: None, api_client, operator, sa_namespace: str
) -> None:
    namespace = sa_namespace
    kubeconfig = _sa_kubeconfig(control_plane)
    port = free_port()
    log = control_plane.workdir / "logs" / "operator-sa.log"
    # Only this namespace, which the session's admin operator leaves alone, so only this operator can make it Ready.
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dflash_operator", "run", "-n", namespace,
             "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig), "DFLASH_RESYNC_SECONDS": "2",
                 "DFLASH_METRICS_ALLOWED_NETWORKS": "127.0.0.0/8"},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: http_ok(f"http://127.0.0.1:{port}/healthz") or process.poll() is not None, "liveness")
        control_plane.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(dfd("rbac")))
        finish_cache_job(api_client, namespace, fetch_result())
        wait_for(lambda: deployment(api_client, namespace, "rbac"), "the Deployment, created under the chart's RBAC")
        mark_pods_ready(api_client, namespace, "rbac")
        wait_for(lambda: condition_is(api_client, namespace, "rbac", "Ready", "True"), "Ready=True")
        text = log.read_text()
        assert "Forbidden" not in text and " 403" not in text, text[-3000:]
    finally:
        process.terminate()
        process.wait(20)


def test_without_the_node_permission_the_check_is_skipped_and_said_without_a_403_loop(
    control_plane: ControlPlane, installed: None, api_client, operator, sa_namespace: str
) -> None:
    """nodeCheck.enabled=false takes the Nodes permission away; an operator that still has the check on (run
    outside the chart) asks once, turns it off, and says so: no stall on nodes, no 403 in its log."""
    helm(control_plane, "upgrade", RELEASE, str(CHART), "-n", OPS, "--reuse-values",
         "--set", "nodeCheck.enabled=false")
    try:
        answer = control_plane.kubectl("auth", "can-i", "watch", "nodes", f"--as={SA}", check=False).stdout
        assert answer.strip() == "no"
        log = control_plane.workdir / "logs" / "operator-sa-nodes.log"
        settings = {"DFLASH_RESYNC_SECONDS": "2", "DFLASH_NODE_CHECK": "true"}
        with running_operator(_sa_kubeconfig(control_plane), log, settings, namespaces=(sa_namespace,)):
            # 16 GPUs per pod, where every node has 8: with the check on, NoNodeFits; here the download starts.
            control_plane.kubectl("-n", sa_namespace, "apply", "-f", "-",
                                  input=json.dumps(dfd("wide", tensorParallelSize=16)))
            wait_for(lambda: kubernetes.client.BatchV1Api(api_client).list_namespaced_job(sa_namespace).items,
                     "the cache Job (no node check, so no NoNodeFits stall)")
            events = wait_for(lambda: [e for e in kubernetes.client.CoreV1Api(api_client).list_namespaced_event(
                sa_namespace).items if e.reason == "NodeCheckSkipped"], "the NodeCheckSkipped event")
            assert "does not watch Nodes" in events[0].message
            time.sleep(5)  # a 403 loop would show within a few watch retries
        text = log.read_text()
        assert "may not list and watch Nodes: the node check is off" in text
        assert "Forbidden" not in text and " 403" not in text, text[-3000:]
    finally:
        helm(control_plane, "upgrade", RELEASE, str(CHART), "-n", OPS, "--reuse-values",
             "--set", "nodeCheck.enabled=true")
