"""The real node does what a user's kubelet does: runs probes, restarts with back-off, binds and mounts volumes from
the default StorageClass, serves logs/exec/port-forward through the API server, advertises the GPU resource."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.controlplane import ControlPlane
from dflash_testkit.node import BRIDGE_SUBNET, GPUS, NODE_IP, STORAGE_CLASS
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.node


def pod(name: str, image: str, command: list[str], node: str, **spec: object) -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                 **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [container], **spec}}


def read(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict:
    return core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, namespace))


def ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))


@pytest.fixture
def image(plane: ControlPlane) -> str:
    assert plane.node
    return plane.node.images["base"]


@pytest.fixture
def node(plane: ControlPlane) -> str:
    assert plane.node
    return plane.node.name


def test_node_registers_with_its_own_identity_and_advertises_gpus(plane: ControlPlane, node: str) -> None:
    got = json.loads(plane.kubectl("get", "node", node, "-o", "json").stdout)
    assert got["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert got["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.4.")
    assert got["status"]["capacity"]["nvidia.com/gpu"] == str(GPUS)
    assert got["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)
    addresses = {a["type"]: a["address"] for a in got["status"]["addresses"]}
    assert addresses["InternalIP"] == NODE_IP
    assert "kwok.x-k8s.io/node" not in got["metadata"].get("annotations", {})
    # The kubelet's credentials are a node's, not the admin's: NodeRestriction keeps it off other nodes.
    kubeconfig = plane.node.workdir / "kubelet.kubeconfig"
    assert plane.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                         kubeconfig=kubeconfig).stdout == f"system:node:{node}"
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other-node"}}
    plane.kubectl("apply", "-f", "-", input=json.dumps(other))
    try:
        denied = plane.kubectl("label", "node", "other-node", "stolen=yes", kubeconfig=kubeconfig, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    finally:
        plane.kubectl("delete", "node", "other-node")


def test_exec_readiness_probe_gates_ready(plane: ControlPlane, core, namespace: str, image: str,
                                          node: str) -> None:
    probe = {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1, "failureThreshold": 1}
    good = pod("probe-passes", image, ["sh", "-c", "touch /tmp/ready; exec sleep 3600"], node,
               container={"readinessProbe": probe})
    bad = pod("probe-fails", image, ["sleep", "3600"], node, container={"readinessProbe": probe})
    for p in (good, bad):
        core.create_namespaced_pod(namespace, p)
    wait_for(lambda: ready(read(core, namespace, "probe-passes")), "the passing probe's pod Ready", 60)
    wait_for(lambda: read(core, namespace, "probe-fails")["status"].get("phase") == "Running", "running", 60)
    for _ in range(8):   # it runs, the kubelet probes it every second, and it never turns Ready
        status = read(core, namespace, "probe-fails")["status"]
        assert not ready(read(core, namespace, "probe-fails"))
        assert status["containerStatuses"][0]["ready"] is False
        time.sleep(1)
    assert status["containerStatuses"][0]["restartCount"] == 0


def test_failing_container_restarts_with_back_off(core, namespace: str, image: str, node: str) -> None:
    core.create_namespaced_pod(namespace, pod("crasher", image, ["sh", "-c", "echo crashing; exit 3"], node))

    def backing_off() -> dict | None:
        status = read(core, namespace, "crasher")["status"].get("containerStatuses") or [{}]
        s = status[0]
        waiting = s.get("state", {}).get("waiting") or {}
        return s if s.get("restartCount", 0) >= 2 and waiting.get("reason") == "CrashLoopBackOff" else None

    s = wait_for(backing_off, "restarts in CrashLoopBackOff", 90)
    assert s["lastState"]["terminated"]["exitCode"] == 3


def test_pvc_from_default_storage_class_written_then_read(core, namespace: str, image: str, node: str) -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}
    core.create_namespaced_persistent_volume_claim(namespace, pvc)
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    mount = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    # No nodeName: the scheduler places them, the PV's node affinity keeps the reader where the data is.
    writer = pod("writer", image, ["sh", "-c", "echo written-by-writer > /data/note && sync"], node,
                 restartPolicy="Never", container=mount, **volume)
    reader = pod("reader", image, ["cat", "/data/note"], node, restartPolicy="Never", container=mount, **volume)
    for p in (writer, reader):
        del p["spec"]["nodeName"]
        p["spec"]["nodeSelector"] = {"dflash.dev/real-node": "true"}
    core.create_namespaced_pod(namespace, writer)
    wait_for(lambda: read(core, namespace, "writer")["status"].get("phase") in ("Succeeded", "Failed"),
             "the writer pod to finish", 120)
    assert read(core, namespace, "writer")["status"]["phase"] == "Succeeded"
    claim = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert claim.spec.storage_class_name == STORAGE_CLASS    # set by the DefaultStorageClass admission
    assert claim.status.phase == "Bound"
    core.create_namespaced_pod(namespace, reader)
    wait_for(lambda: read(core, namespace, "reader")["status"].get("phase") in ("Succeeded", "Failed"),
             "the reader pod to finish", 120)
    assert core.read_namespaced_pod_log("reader", namespace) == "written-by-writer\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_kubectl_logs_exec_port_forward(plane: ControlPlane, core, namespace: str, image: str, node: str,
                                        tmp_path: Path) -> None:
    server = ("import http.server, sys\n"
              "print('serving on 8080', flush=True)\n"
              "class H(http.server.BaseHTTPRequestHandler):\n"
              "    def do_GET(self):\n"
              "        body = b'hello from the pod'\n"
              "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
              "        self.end_headers(); self.wfile.write(body)\n"
              "http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()\n")
    core.create_namespaced_pod(namespace, pod("web", image, ["python3", "-c", server], node))
    wait_for(lambda: ready(read(core, namespace, "web")), "the web pod Ready", 60)
    pod_ip = read(core, namespace, "web")["status"]["podIP"]
    assert pod_ip.startswith(BRIDGE_SUBNET.rsplit(".", 1)[0] + ".")

    ns = ["-n", namespace]
    wait_for(lambda: "serving on 8080" in plane.kubectl("logs", *ns, "web", check=False).stdout, "the log line", 30)
    out = plane.kubectl("exec", *ns, "web", "--", "sh", "-c", "echo exec-ok; id -u; hostname").stdout.split()
    assert out == ["exec-ok", "0", "web"]
    # The network rule, seen from inside: the pod's only route is its bridge's subnet; no default route out.
    routes = plane.kubectl("exec", *ns, "web", "--", "cat", "/proc/net/route").stdout.splitlines()[1:]
    destinations = {(r.split()[0], r.split()[1]) for r in routes}
    subnet_hex = "".join(f"{int(o):02X}" for o in reversed(BRIDGE_SUBNET.split("/")[0].split(".")))
    assert destinations == {("eth0", subnet_hex)}, routes

    port = _free_port()
    forward = subprocess.Popen(
        [plane.binary("kubectl"), f"--kubeconfig={plane.kubeconfig}", *ns, "port-forward", "pod/web",
         f"{port}:8080", "--address=127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def fetch() -> bytes | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    return response.read()
            except OSError:
                return None
        assert wait_for(fetch, "a response through port-forward", 30) == b"hello from the pod"
    finally:
        forward.terminate()
        forward.wait(10)
