"""A real Kubernetes control plane on 127.0.0.1 for tests and for people.

etcd, kube-apiserver (TLS, RBAC, service-account signing), kube-controller-manager, kube-scheduler and kwok run as
child processes bound to loopback on free ports; kwok fakes GPU nodes and the pod lifecycle. Binaries come from
tests/cluster/build.sh (built from Go modules, cached). Every component logs to its own file. With
`real_node=True` one real node (containerd + kubelet, see dflash_testkit.node) joins beside the fake ones.

    python -m dflash_testkit.controlplane up            # start, print the kubeconfig path, run until Ctrl-C
    python -m dflash_testkit.controlplane demo          # start, show `kubectl get nodes`, stop
    python -m dflash_testkit.controlplane up --real-node    # as root: plus a real kubelet + containerd node
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dflash_testkit import CLUSTER_TESTS, REPO
from dflash_testkit.node import RealNode
from dflash_testkit.pki import Pki, issue_cert, make_pki

# Pod and Service addresses are handed out from loopback ranges, so nothing a test could dial leaves the machine.
POD_CIDR = "127.1.0.0/16"
SERVICE_CIDR = "127.2.0.0/16"
READY_ANNOTATION = "dflash.dev/test-ready"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def build_binaries() -> Path:
    """Runs the cached build and returns the folder holding every binary."""
    out = subprocess.run(
        ["bash", str(CLUSTER_TESTS / "build.sh")], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            # Own process group, so stop() reaches anything the component spawns.
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(grace)
        self.process = None


@dataclass
class ControlPlane:
    workdir: Path
    bin_dir: Path
    crd_files: Sequence[Path] = ()
    gpu_nodes: int = 4
    gpus_per_node: int = 8
    components: list[Component] = field(default_factory=list)
    pki: Pki | None = None
    api_port: int = 0
    real_node: bool = False
    node: RealNode | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def fetch_log(self) -> Path:
        return self.workdir / "fetch-container.log"

    @property
    def kubectl_cache(self) -> Path:
        return self.workdir / "kubectl-cache"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def binary(self, name: str) -> str:
        return str(self.bin_dir / name)

    # --- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.pki = make_pki(self.workdir / "pki")
        try:
            etcd_port = self._start_etcd()
            self._start_apiserver(etcd_port)
            self._write_kubeconfig()
            # The garbage collector learns resources from discovery; CRDs that exist before it starts are known at once.
            for crd in self.crd_files:
                self.kubectl("apply", "--server-side", "-f", str(crd))
            for crd in self.crd_files:
                self.kubectl("wait", "--for=condition=Established", "-f", str(crd), "--timeout=60s")
            # kubectl cached discovery before the CRDs existed; short names like `dfd` resolve only from a fresh one.
            shutil.rmtree(self.kubectl_cache, ignore_errors=True)
            self._start_controller_manager()
            self._start_scheduler()
            self._start_kwok()
            self._create_gpu_nodes()
            if not self.real_node:  # the real node brings its provisioner's default class (local-path)
                self._create_default_storage_class()
            if self.real_node:
                self.node = RealNode(workdir=self.workdir / "node", bin_dir=self.bin_dir)
                self.node.start(self)
        except BaseException:
            print(self.log_tails(), file=sys.stderr)
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        try:
            if self.node is not None:
                self.node.stop()
        finally:
            for component in reversed(self.components):
                component.stop()

    def crash_and_restart(self, name: str, down_seconds: float = 2.0) -> float:
        """SIGKILLs one component (etcd, kube-apiserver, ...), keeps it down for `down_seconds`, starts it again
        with the same flags (ports, data) and returns the seconds until the API server answers /readyz again."""
        component = next(c for c in self.components if c.name == name)
        assert component.process is not None, f"{name} is not running"
        os.killpg(component.process.pid, signal.SIGKILL)
        component.process.wait(10)
        time.sleep(down_seconds)
        started = time.monotonic()
        component.start()
        apiserver = next(c for c in self.components if c.name == "kube-apiserver")
        self._wait(apiserver, lambda: self._readyz(self.api_port), f"kube-apiserver /readyz after {name} restarted",
                   timeout=120)
        return time.monotonic() - started

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- components ------------------------------------------------------------------------------------------------
    def _add(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components.append(component)
        component.start()
        return component

    def _start_etcd(self) -> int:
        client, peer = free_port(), free_port()
        etcd = self._add("etcd", [
            self.binary("etcd"),
            "--name=default",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--listen-metrics-urls=",
            # Throwaway data: skipping fsync makes the apiserver several times faster on slow disks.
            "--unsafe-no-fsync",
        ])
        self._wait(etcd, lambda: http_ok(f"http://127.0.0.1:{client}/health"), "etcd /health")
        return client

    def _start_apiserver(self, etcd_port: int) -> None:
        assert self.pki
        self.api_port = free_port()
        # The API server's identity towards kubelets (logs, exec, port-forward); kwok ignores it.
        kubelet_client_cert, kubelet_client_key = issue_cert(
            self.pki, self.workdir / "pki", "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
            ("system:masters",), client=True)
        apiserver = self._add("kube-apiserver", [
            self.binary("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The kubernetes Service would need a non-loopback endpoint; nothing in the tests dials it.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.api_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.pki.serving_cert}",
            f"--tls-private-key-file={self.pki.serving_key}",
            f"--client-ca-file={self.pki.ca_cert}",
            # Node + NodeRestriction: a real kubelet may touch only its own Node and the pods bound to it.
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={kubelet_client_cert}",
            f"--kubelet-client-key={kubelet_client_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.sa_public}",
            f"--service-account-signing-key-file={self.pki.sa_private}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # Reach "kubelets" (kwok) at their InternalIP, 127.0.0.1.
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
        ])
        self._wait(apiserver, lambda: self._readyz(self.api_port), "kube-apiserver /readyz", timeout=120)

    def _component_kubeconfig_args(self) -> list[str]:
        kc = str(self.kubeconfig)
        return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}"]

    def _start_controller_manager(self) -> None:
        assert self.pki
        port = free_port()
        kcm = self._add("kube-controller-manager", [
            self.binary("kube-controller-manager"),
            *self._component_kubeconfig_args(),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.pki.sa_private}",
            f"--root-ca-file={self.pki.ca_cert}",
            f"--cluster-signing-cert-file={self.pki.ca_cert}",
            f"--cluster-signing-key-file={self.pki.ca_key}",
            "--use-service-account-credentials=true",
            # Tests bind cache claims to pre-made volumes; the default 15 s binder period would dominate them.
            "--pvclaimbinder-sync-period=1s",
        ])
        self._wait(kcm, lambda: self._readyz(port, "/healthz"), "kube-controller-manager /healthz")

    def _start_scheduler(self) -> None:
        port = free_port()
        scheduler = self._add("kube-scheduler", [
            self.binary("kube-scheduler"),
            *self._component_kubeconfig_args(),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
        ])
        self._wait(scheduler, lambda: self._readyz(port, "/healthz"), "kube-scheduler /healthz")

    def _start_kwok(self) -> None:
        stages = self.workdir / "kwok-stages.yaml"
        stock = self.bin_dir / "kwok-stages" / "node"
        parts = [
            (stock / "fast" / "node-initialize.yaml").read_text(),
            (stock / "heartbeat-with-lease" / "node-heartbeat-with-lease.yaml").read_text(),
            (CLUSTER_TESTS / "kwok-pod-stages.yaml").read_text(),
        ]
        # Logs of every container named "fetch" (the cache Job) are served from one file a test may write, through
        # the real path: API server -> the node's kubelet endpoint (kwok, on loopback) -> file.
        self.fetch_log.write_text("")
        parts.append(json.dumps({
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": "fetch-logs"},
            "spec": {"logs": [{"containers": ["fetch"], "logsFile": str(self.fetch_log), "follow": False}]},
        }))
        stages.write_text("\n---\n".join(parts))
        port = free_port()
        kwok = self._add("kwok", [
            self.binary("kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{port}",
            # Nodes advertise this as their kubelet port, so `kubectl logs` reaches kwok's server.
            f"--node-port={port}",
            "--node-lease-duration-seconds=40",
        ])
        self._wait(kwok, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), "kwok /healthz")

    def _create_gpu_nodes(self) -> None:
        nodes = [gpu_node(f"gpu-node-{i}", self.gpus_per_node) for i in range(self.gpu_nodes)]
        if not nodes:
            return  # a plane without fake nodes: pods stay Pending (the scale benchmark's waiting caches)
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
        self.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")

    def _create_default_storage_class(self) -> None:
        """A default StorageClass, as every managed cluster has: the operator refuses a cache claim that could never
        bind (StorageClassNotFound). No provisioner runs for it: the tests bind claims to volumes they create
        (dflash_testkit.cachejob.bind_cache_volume), which the volume controller matches before provisioning."""
        self.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": DEFAULT_STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "example.com/no-provisioner", "volumeBindingMode": "Immediate"}))

    # --- helpers ---------------------------------------------------------------------------------------------------
    def _write_kubeconfig(self) -> None:
        assert self.pki
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "dflash-test", "cluster": {
                "server": self.server, "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self.pki.admin_cert), "client-key": str(self.pki.admin_key)}}],
            "contexts": [{"name": "dflash-test", "context": {"cluster": "dflash-test", "user": "admin"}}],
            "current-context": "dflash-test",
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2))
        self.kubeconfig.chmod(0o600)

    def _ssl_context(self) -> ssl.SSLContext:
        assert self.pki
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _readyz(self, port: int, path: str = "/readyz") -> bool:
        context = self._ssl_context()
        if port != self.api_port:
            # Controller-manager and scheduler serve self-signed certificates; only liveness is asked of them.
            context = ssl._create_unverified_context()  # noqa: S323 - loopback health probe of a test component
            assert self.pki
            context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return http_ok(f"https://127.0.0.1:{port}{path}", context)

    def _wait(self, component: Component, check, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not component.running():
                raise RuntimeError(f"{component.name} exited while waiting for {what}:\n{self.log_tail(component)}")
            if check():
                return
            time.sleep(0.2)
        raise TimeoutError(f"{what} not ok after {timeout} s:\n{self.log_tail(component)}")

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [self.binary("kubectl"), f"--kubeconfig={kubeconfig or self.kubeconfig}",
             f"--cache-dir={self.kubectl_cache}", *args],
            input=input, capture_output=True, text=True, timeout=120,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def log_tail(self, component: Component, lines: int = 30) -> str:
        if not component.log.exists():
            return f"--- {component.name}: no log"
        tail = component.log.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {component.name} ({component.log}), last {len(tail)} lines:\n" + "\n".join(tail)

    def log_tails(self, lines: int = 30) -> str:
        tails = "\n".join(self.log_tail(c, lines) for c in self.components)
        return tails + ("\n" + self.node.log_tails(lines) if self.node is not None else "")

    def pids(self) -> list[int]:
        return [c.process.pid for c in self.components if c.process is not None]


DEFAULT_STORAGE_CLASS = "standard"


def gpu_node(name: str, gpus: int) -> dict:
    """A Node as the NVIDIA GPU operator would label it, managed by kwok."""
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": GPU_PRODUCT,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": "81559",
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def stop_process(process: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds: how the testkit ends the processes it started."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.status == 200
    except OSError:
        return False


def default_crds() -> list[Path]:
    return sorted((REPO / "crds").glob("*.yaml"))


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "demo"])
    parser.add_argument("--workdir", type=Path, help="where state, kubeconfig and logs go (default: a temp folder)")
    parser.add_argument("--real-node", action="store_true",
                        help="also start a real node (containerd + kubelet, root only; see dflash_testkit.node)")
    parser.add_argument("--gpu-nodes", type=int, default=4, help="fake (kwok) 8-GPU nodes to create (default 4)")
    args = parser.parse_args(list(argv) if argv is not None else None)

    bin_dir = build_binaries()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dflash-cp-"))
    plane = ControlPlane(workdir=workdir, bin_dir=bin_dir, crd_files=default_crds(), real_node=args.real_node,
                         gpu_nodes=args.gpu_nodes)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with plane:
        print(f"control plane up in {plane.start_seconds:.1f} s: {plane.server}")
        print(f"kubeconfig: {plane.kubeconfig}   logs: {workdir / 'logs'}")
        version = json.loads(plane.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
        print(f"kube-apiserver {version}")
        print(plane.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count").stdout)
        if args.command == "up":
            print(f"export KUBECONFIG={plane.kubeconfig}   (Ctrl-C stops everything)")
            try:
                while all(c.running() for c in plane.components) and (
                        plane.node is None or all(p.poll() is None for p in plane.node.processes)):
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
