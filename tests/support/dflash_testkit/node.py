"""One real Kubernetes node beside kwok's fake ones: containerd + a kubelet registered to the test API server.

- Identity: its own client certificate from the test PKI (CN system:node:<name>, O system:nodes), so the API
  server's Node authorizer and NodeRestriction admission judge it as they judge any kubelet; a serving certificate
  from the same CA for logs/exec/port-forward.
- Network: pods live on a bridge this fixture creates (CNI bridge + host-local IPAM on BRIDGE_SUBNET, no gateway,
  no masquerade, no routes), and the node's address is the bridge's own address, so the API server reaches the
  kubelet, and the kubelet the pods, only on that bridge. Nothing is routed anywhere else.
- Images: the operator and vLLM images by `docker build` of their Dockerfiles (dflash_testkit.dockerimages), pause and
  a plain Debian base by images/builder/build.py, all imported with `ctr -n k8s.io images import --local
  --discard-unpacked-layers` (the snapshots stay, the layer blobs go); the locally built pause image is
  containerd's sandbox image. Nothing is ever pulled.
- GPUs: the node has none. It advertises `nvidia.com/gpu` as an extended resource (a status patch, as the
  Kubernetes docs describe for extended resources) so GPU pods can be scheduled on it; nothing can use a GPU.
- Storage: rancher's local-path-provisioner, as a host process, behind the default StorageClass `local-path`.
- Cleanup: stop() kills every process, unmounts, deletes the bridge, KUBE-*/CNI-* chains, netns, cgroups and
  files outside the work folder, and puts back the kernel settings the kubelet changes.

Only one real node runs on a machine at a time (a lock in the cache folder); the kubelet owns machine-wide state.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dflash_testkit import REPO
from dflash_testkit.dockerimages import NODE_REPOSITORIES, build_and_stream
from dflash_testkit.hoststate import (
    CGROUP_ROOT,
    CHAIN_PREFIXES,
    HOST_PATHS,
    IPTABLES,
    SYSCTLS,
    HostState,
    read_sysctl,
    write_sysctl,
)
from dflash_testkit.pki import Pki, issue_cert

NODE_NAME = "real-node-0"
BRIDGE = "dflash-br0"
# Not used on this machine kind (its interfaces are lo and eth0 on 192.0.2.0/24); checked at start.
BRIDGE_SUBNET = "10.213.47.0/24"
NODE_IP = "10.213.47.1"
KUBELET_PORT = 10250
GPUS = 4
STORAGE_CLASS = "local-path"
PROVISIONER = "rancher.io/local-path"
CACHE = Path(os.environ.get("DFLASH_CACHE", Path.home() / ".cache" / "dflash-operator"))
LOCK = CACHE / "real-node.lock"
# containerd's root (image content and unpacked snapshots) outlives a node, as on a real machine across reboots: the
# 6 GB vLLM image is imported once, not once per run, and one copy sits on disk instead of one per work folder.
# Only the node holding LOCK uses it; each start removes the containers a previous node left in it.
IMAGE_STORE = CACHE / "node-containerd"
BUILDER = REPO / "images" / "builder" / "build.py"   # pause and base; operator and vllm: dockerimages
DEBIAN_BIN = ("/usr/sbin/runc", "/usr/lib/cni")


@dataclass
class RealNode:
    """Starts with `start(plane)` after the control plane is up; `stop()` puts the machine back."""

    workdir: Path
    bin_dir: Path
    name: str = NODE_NAME
    images: dict[str, str] = field(default_factory=dict)       # recipe -> image name, once imported
    image_stats: dict[str, dict] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)
    before: HostState | None = None        # the machine before start(), while this node holds the lock
    host_before: HostState | None = None   # kept after stop(), with host_after, for tests to compare
    host_after: HostState | None = None
    start_seconds: float = 0.0
    stop_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    _lock: IO[str] | None = None

    # --- paths ---------------------------------------------------------------------------------------------------
    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def log(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def executables(self) -> set[str]:
        names = ("containerd", "containerd-shim-runc-v2", "kubelet", "local-path-provisioner", "ctr")
        return {os.path.realpath(self.bin_dir / n) for n in names} | {"/usr/sbin/runc"}

    # --- lifecycle -----------------------------------------------------------------------------------------------
    def start(self, plane) -> None:
        started = time.monotonic()
        self._check_prerequisites()
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self._lock = LOCK.open("w")
        deadline = time.monotonic() + 1800
        while True:   # another session's node holds the machine-wide pieces: wait for it
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another real node holds {LOCK} for 30 min") from None
                time.sleep(2)
        self.before = self.host_before = HostState.capture(self.executables())
        for d in ("logs", "containerd", "cni/net.d", "kubelet", "pki", "local-path", "pod-logs"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        try:
            self._check_subnet_free()
            self._create_bridge()
            self._write_cni_config()
            self._step("containerd up (pause image built)", self._start_containerd)
            self._step("images built and imported", self._import_images)
            self._step("kubelet registered, node Ready", lambda: self._start_kubelet(plane))
            self._step("nvidia.com/gpu advertised", lambda: self._advertise_gpus(plane))
            self._step("provisioner and default StorageClass", lambda: self._start_provisioner(plane))
        except BaseException:
            print(self.log_tails(), file=sys.stderr)
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stops everything and removes what the node put on the machine; safe to call twice.

        Every step runs even when an earlier one fails (the kernel settings above all); the first error is raised
        at the end."""
        if self.before is None:
            return
        started = time.monotonic()
        before = self.before
        shim = os.path.realpath(self.bin_dir / "containerd-shim-runc-v2")
        steps = [
            ("stop the kubelet", lambda: _each(_terminate, [p for p in self.processes if _is_kubelet(p)])),
            ("kill the pods' processes", lambda: _kill_cgroup_tree("kubepods")),
            ("stop containerd and the provisioner", lambda: _each(_terminate, reversed(self.processes))),
            ("kill leftover shims and runc", lambda: _each(_kill, _pids_with_exe({shim, "/usr/sbin/runc"}))),
            ("kill the pods' processes again", lambda: _kill_cgroup_tree("kubepods")),
            ("unmount", lambda: self._unmount_all(before)),
            ("delete the bridge and veths", lambda: self._delete_links(before)),
            ("remove iptables chains", lambda: _remove_chains(before.chains)),
            ("remove cgroups", lambda: _remove_cgroups(before.cgroups)),
            ("remove host folders", lambda: _each(lambda p: shutil.rmtree(p, ignore_errors=True),
                                                  [p for p in HOST_PATHS
                                                   if p not in before.paths and os.path.lexists(p)])),
            ("restore kernel settings", lambda: _each(lambda item: write_sysctl(*item),
                                                      [(k, v) for k, v in before.sysctls.items()
                                                       if read_sysctl(k) != v])),
        ]
        errors = []
        for what, step in steps:
            try:
                step()
            except Exception as error:  # noqa: BLE001 - every step must run; the first error is raised below
                errors.append(f"{what}: {error!r}")
        self.processes.clear()
        self.host_after = HostState.capture(self.executables())
        self.stop_seconds = time.monotonic() - started
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
        self.before = None
        if errors:
            raise RuntimeError("real node cleanup failed: " + "; ".join(errors))

    def _delete_links(self, before: HostState) -> None:
        _run_quiet(["ip", "link", "del", BRIDGE])
        for link in sorted(set(os.listdir("/sys/class/net")) - before.links):
            if link.startswith("veth"):
                _run_quiet(["ip", "link", "del", link])

    def _step(self, what: str, action) -> None:
        started = time.monotonic()
        action()
        self.timings[what] = round(time.monotonic() - started, 1)

    # --- pieces --------------------------------------------------------------------------------------------------
    def _check_prerequisites(self) -> None:
        missing = [p for p in (*DEBIAN_BIN, "/usr/sbin/iptables") if not os.path.exists(p)]
        missing += [n for n in ("containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "local-path-provisioner")
                    if not (self.bin_dir / n).exists()]
        if os.geteuid() != 0:
            missing.append("root (the kubelet and containerd need it)")
        if missing:
            raise RuntimeError(f"the real node cannot start, missing: {missing} (run scripts/setup.sh)")

    def _check_subnet_free(self) -> None:
        prefix = NODE_IP.rsplit(".", 1)[0] + "."
        used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
        if prefix in used or prefix in routes:
            raise RuntimeError(f"{BRIDGE_SUBNET} is already in use on this machine:\n{used}\n{routes}")

    def _create_bridge(self) -> None:
        subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"{NODE_IP}/{BRIDGE_SUBNET.split('/')[1]}", "dev", BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)

    def _write_cni_config(self) -> None:
        net = BRIDGE_SUBNET.rsplit(".", 1)[0]
        conflist = {
            "cniVersion": "1.0.0",
            "name": "dflash-node",
            "plugins": [{
                "type": "bridge",
                "bridge": BRIDGE,
                # No gateway, no masquerade, no routes: a pod reaches its bridge and nothing beyond it.
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": BRIDGE_SUBNET, "rangeStart": f"{net}.10", "rangeEnd": f"{net}.250",
                                 "gateway": NODE_IP}]],
                    "routes": [],
                    "dataDir": str(self.workdir / "cni" / "ipam"),
                },
            }],
        }
        (self.workdir / "cni" / "net.d" / "10-dflash.conflist").write_text(json.dumps(conflist, indent=1))

    def _start_containerd(self) -> None:
        w = self.workdir / "containerd"
        config = f"""version = 3
root = '{IMAGE_STORE}'
state = '{w}/state'
disabled_plugins = ['io.containerd.nri.v1.nri']

[grpc]
  address = '{self.containerd_socket}'

[plugins.'io.containerd.internal.v1.opt']
  path = '{w}/opt'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{{pause}}'

[plugins.'io.containerd.cri.v1.runtime']
  # Root lacks CAP_SYS_RESOURCE here: runc cannot set the sandbox's oom_score_adj of -998 without this.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '/usr/sbin/runc'
        Root = '{w}/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '{self.workdir}/cni/net.d'
    use_internal_loopback = true

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""
        pause = self._build_image("pause")
        (w / "config.toml").write_text(config.replace("{pause}", pause["name"]))
        # Our shim must come before any other containerd shim on PATH.
        env = {**os.environ, "PATH": f"{self.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
        IMAGE_STORE.mkdir(parents=True, exist_ok=True)
        argv = [str(self.bin_dir / "containerd"), f"--config={w / 'config.toml'}"]
        process = self._spawn("containerd", argv, env=env)
        self._wait_containerd()
        # Containers (pods' sandboxes included) of an earlier node in the image store: removed, with their
        # snapshots, then containerd restarts so its CRI plugin does not recover them as pods of this node.
        left = self.ctr("containers", "ls", "-q").stdout.split()
        if left:
            self.ctr("containers", "rm", *left)
            _terminate(process)
            self.processes.remove(process)
            self.containerd_socket.unlink(missing_ok=True)
            self._spawn("containerd", argv, env=env)
            self._wait_containerd()

    def _wait_containerd(self) -> None:
        _wait(lambda: self.containerd_socket.exists() and self.ctr("version", check=False).returncode == 0,
              "containerd socket", 60, self.log("containerd"))

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.bin_dir / "ctr"), f"--address={self.containerd_socket}", "-n", "k8s.io",
                                 *args], capture_output=True, text=True, timeout=900)
        if check and result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed:\n{result.stderr}")
        return result

    def _build_image(self, recipe: str) -> dict:
        if recipe not in self.image_stats:
            out = subprocess.run([sys.executable, str(BUILDER), recipe, "--json"], check=True, capture_output=True,
                                 text=True)
            self.image_stats[recipe] = json.loads(out.stdout.strip().splitlines()[-1])
        return self.image_stats[recipe]

    def _import_images(self) -> None:
        for recipe in ("pause", "base", "operator"):
            self.image(recipe)

    def image(self, recipe: str) -> str:
        """The name of a locally built image, built and imported on first use: pause and base from images/builder,
        operator and vllm by `docker build` (dflash_testkit.dockerimages). An image the store holds from an earlier
        node is not imported again. Older builds of the image leave the store."""
        if recipe not in self.images:
            def held() -> list[str]:
                return self.ctr("images", "ls", "-q").stdout.split()
            if recipe in NODE_REPOSITORIES:
                # Unpacked into snapshots, the layers' copies in the content store are dead weight (the vLLM image's
                # are ~6 GB): the garbage collector may drop them, as kind's nodes do for what they pull.
                import_argv = [str(self.bin_dir / "ctr"), f"--address={self.containerd_socket}", "-n", "k8s.io",
                               "images", "import", "--local", "--discard-unpacked-layers"]
                info = build_and_stream(recipe, held, import_argv)
            else:
                info = self._build_image(recipe)
                started = time.monotonic()
                info["already_in_store"] = info["name"] in held()
                if not info["already_in_store"]:
                    self.ctr("images", "import", "--local", "--discard-unpacked-layers", info["tar"])
                info["import_seconds"] = round(time.monotonic() - started, 1)
            self.image_stats[recipe] = info
            repository = info["name"].rsplit(":", 1)[0]
            digests = self._image_digests()
            older = [name for name in digests if name.rsplit(":", 1)[0] == repository and name != info["name"]]
            # The CRI also names every image it ran by its ID ("sha256:<id>"); that name outlives the one removed
            # here and kept the old image's snapshots, ~6 GB for each earlier vLLM stand-in (2026-12-07: 13 GB in
            # the store, two vLLM images). An ID name whose image no other name holds goes too.
            kept = {digest for name, digest in digests.items() if not name.startswith("sha256:") and name not in older}
            older += [name for name, digest in digests.items() if name.startswith("sha256:") and digest not in kept]
            if older:
                self.ctr("images", "rm", "--sync", *older)   # --sync: their snapshots go now, not at a later GC
            self.images[recipe] = info["name"]
        return self.images[recipe]

    def _image_digests(self) -> dict[str, str]:
        """Every image name in the store and the manifest digest it names (`ctr images ls`: REF TYPE DIGEST ...)."""
        rows = (line.split() for line in self.ctr("images", "ls").stdout.splitlines()[1:])
        return {row[0]: row[2] for row in rows if len(row) >= 3}

    def _start_kubelet(self, plane) -> None:
        pki: Pki = plane.pki
        certs = self.workdir / "pki"
        client_cert, client_key = issue_cert(pki, certs, "kubelet-client", f"system:node:{self.name}",
                                             ("system:nodes",), client=True)
        serving_cert, serving_key = issue_cert(pki, certs, "kubelet-serving", self.name, server=True,
                                               ips=(NODE_IP,), dns=(self.name,))
        kubeconfig = self.workdir / "kubelet.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": plane.server,
                                                      "certificate-authority": str(pki.ca_cert)}}],
            "users": [{"name": "node", "user": {"client-certificate": str(client_cert),
                                                "client-key": str(client_key)}}],
            "contexts": [{"name": "node", "context": {"cluster": "test", "user": "node"}}],
            "current-context": "node",
        }))
        self.healthz_port = _free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The host is cgroup v1; kubelet 1.35+ refuses it unless told this is a warning.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "address": NODE_IP,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "tlsCertFile": str(serving_cert),
            "tlsPrivateKeyFile": str(serving_key),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(pki.ca_cert)}},
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "imageServiceEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "clusterDomain": "cluster.local",
            "resolvConf": "",
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "registerNode": True,
            "serializeImagePulls": False,
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            # Images cannot be pulled again here: never collect them, never evict for disk pressure of a shared disk.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "nodeStatusUpdateFrequency": "4s",
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "maxPods": 50,
        }
        config_path = self.workdir / "kubelet-config.json"
        config_path.write_text(json.dumps(config, indent=1))
        env = {**os.environ, "PATH": f"{self.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self._spawn("kubelet", [
            str(self.bin_dir / "kubelet"),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.workdir / 'kubelet'}",
            f"--cert-dir={certs}",
            f"--hostname-override={self.name}",
            f"--node-ip={NODE_IP}",
            "--node-labels=dflash.dev/real-node=true,nvidia.com/gpu.present=true",
            "--v=2",
        ], env=env)

        def ready() -> bool:
            out = plane.kubectl("get", "node", self.name, "-o", "json", check=False)
            if out.returncode != 0:
                return False
            conditions = json.loads(out.stdout)["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        _wait(ready, f"node {self.name} Ready", 120, self.log("kubelet"), self.processes[-1])

    def _advertise_gpus(self, plane) -> None:
        # An extended resource the kubelet keeps once it is in capacity; it copies capacity to allocatable.
        patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(GPUS)}]
        plane.kubectl("patch", "node", self.name, "--subresource=status", "--type=json", "-p", json.dumps(patch))

        def advertised() -> bool:
            out = plane.kubectl("get", "node", self.name, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}")
            return out.stdout.strip() == str(GPUS)

        _wait(advertised, "nvidia.com/gpu in allocatable", 60, self.log("kubelet"))

    def _start_provisioner(self, plane) -> None:
        namespace = "local-path-storage"
        helper_pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
            "spec": {"priorityClassName": "system-node-critical", "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "helper-pod", "image": self.images["base"],
                                     "imagePullPolicy": "Never"}]},
        }
        setup = "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n"
        teardown = "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n"
        config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                                   "paths": [str(self.workdir / "local-path")]}]}
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-path-config", "namespace": namespace},
             "data": {"config.json": json.dumps(config), "setup": setup, "teardown": teardown,
                      "helperPod.yaml": json.dumps(helper_pod)}},
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": STORAGE_CLASS,
                          "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
             "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"},
        ]
        plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        files = self.workdir / "local-path-config"
        files.mkdir(exist_ok=True)
        for name, content in (("config.json", json.dumps(config)), ("setup", setup), ("teardown", teardown),
                              ("helperPod.yaml", json.dumps(helper_pod))):
            (files / name).write_text(content)
        self._spawn("local-path-provisioner", [
            str(self.bin_dir / "local-path-provisioner"), "--debug", "start",
            f"--config={files / 'config.json'}",
            f"--helper-pod-file={files / 'helperPod.yaml'}",
            f"--provisioner-name={PROVISIONER}",
            f"--namespace={namespace}",
            "--configmap-name=local-path-config",
            f"--helper-image={self.images['base']}",
            "--service-account-name=default",
        ], env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)})
        time.sleep(1)
        if self.processes[-1].poll() is not None:
            raise RuntimeError(f"local-path-provisioner exited:\n{_tail(self.log('local-path-provisioner'))}")

    # --- helpers -------------------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        with self.log(name).open("ab") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)
        self.processes.append(process)
        return process

    def _unmount_all(self, before: HostState) -> None:
        roots = (str(self.workdir), str(IMAGE_STORE), *HOST_PATHS)
        for _ in range(3):
            with open("/proc/self/mountinfo") as f:
                points = [line.split()[4] for line in f]
            ours = [p for p in points if p not in before.mounts and p.startswith(roots)]
            if not ours:
                return
            for point in sorted(set(ours), key=len, reverse=True):
                if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                    _run_quiet(["umount", "-l", point])

    def log_tails(self, lines: int = 30) -> str:
        out = []
        for name in ("containerd", "kubelet", "local-path-provisioner"):
            if self.log(name).exists():
                out.append(f"--- {name} ({self.log(name)}):\n{_tail(self.log(name), lines)}")
        return "\n".join(out)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what: str, timeout: float, log: Path, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"exited while waiting for {what}:\n{_tail(log)}")
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not reached in {timeout} s:\n{_tail(log)}")


def _terminate(process: subprocess.Popen, grace: float = 10.0) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(grace)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pids_with_exe(executables: set[str]) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/exe") in executables:
                    pids.append(int(pid))
            except OSError:
                pass
    return pids


def _kill_cgroup_tree(name: str) -> None:
    """SIGKILLs every process in <hierarchy>/<name>/** of every cgroup hierarchy (the pods' containers)."""
    for _ in range(20):
        found = False
        for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else []:
            tree = hierarchy / name
            if not tree.is_dir():
                continue
            for dirpath, _, files in os.walk(tree):
                if "cgroup.procs" not in files:
                    continue
                try:
                    pids = [int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()]
                except OSError:
                    continue
                for pid in pids:
                    found = True
                    _kill(pid)
        if not found:
            return
        time.sleep(0.2)


def _remove_cgroups(before: frozenset[str]) -> None:
    """Removes the top-level cgroup folders (kubepods, ...) that appeared while the node ran, deepest first."""
    if not CGROUP_ROOT.is_dir():
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        if not hierarchy.is_dir():
            continue
        for top in _children(hierarchy):
            if str(top) in before:
                continue
            # Bottom-up; folders vanish underneath as the kernel drops emptied ones, so errors are ignored.
            for dirpath, _, _ in os.walk(top, topdown=False):
                _rmdir(Path(dirpath))


def _children(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def _rmdir(path: Path) -> None:
    for _ in range(10):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def _remove_chains(before: frozenset[str]) -> None:
    """Deletes the KUBE-*/CNI-* chains that were not there before, and every rule that jumps to them."""
    for tool in IPTABLES:
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle"):
            rules = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
            new = [line.split()[1] for line in rules.splitlines()
                   if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES)
                   and f"{tool}/{table}/{line.split()[1]}" not in before]
            if not new:
                continue
            for line in rules.splitlines():
                words = shlex.split(line)
                if words[:1] == ["-A"] and any(w in new for w in words[2:]) and words[1] not in new:
                    _run_quiet([tool, "-w", "-t", table, "-D", *words[1:]])
            for chain in new:
                _run_quiet([tool, "-w", "-t", table, "-F", chain])
            for chain in new:
                _run_quiet([tool, "-w", "-t", table, "-X", chain])


def _run_quiet(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True)


__all__ = ["RealNode", "NODE_NAME", "NODE_IP", "BRIDGE", "BRIDGE_SUBNET", "GPUS", "STORAGE_CLASS", "SYSCTLS"]


def _each(step: Callable[[Any], object], items: Iterable[Any]) -> None:
    """Runs one teardown step on every item (a loop a lambda can hold)."""
    for item in items:
        step(item)


def _is_kubelet(process: subprocess.Popen) -> bool:
    args = process.args
    first = args[0] if isinstance(args, list | tuple) else args
    return "kubelet" in str(first)
