"""What a real node may leave on the host, recorded before it starts and compared after it stops.

The kubelet, containerd, runc and the CNI plugins touch the machine outside any work folder: kernel settings,
iptables chains, a bridge and veth links, network namespaces, mounts, cgroups, and a few well-known folders. A
`HostState` snapshot covers exactly those, so a test can assert the machine is as it was.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The kubelet sets these at start unless protectKernelDefaults is on (then it refuses to start when they differ);
# the CNI bridge plugin turns on forwarding when it is a gateway (ours is not). All are saved and put back.
SYSCTLS = (
    "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
)
# Folders the node's components write to whatever their flags say; removed at teardown when they did not exist.
HOST_PATHS = (
    "/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns",
    "/var/lib/containerd", "/opt/containerd", "/run/nri", "/etc/cni", "/opt/cni", "/run/runc", "/etc/kubernetes",
    "/var/lib/dockershim", "/run/kubernetes",
)
CHAIN_PREFIXES = ("KUBE-", "CNI-")
IPTABLES = ("iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def read_sysctl(name: str) -> str:
    return Path("/proc/sys", name.replace(".", "/")).read_text().strip()


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", name.replace(".", "/")).write_text(value + "\n")


def iptables_chains() -> set[str]:
    """`tool/table/chain` for every KUBE-* and CNI-* chain, in both iptables backends, IPv4 and IPv6."""
    chains = set()
    for tool in IPTABLES:
        for table in ("filter", "nat", "mangle"):
            try:
                out = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, timeout=30)
            except FileNotFoundError:
                continue
            for line in out.stdout.splitlines():
                if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES):
                    chains.add(f"{tool}/{table}/{line.split()[1]}")
    return chains


def links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def mounts() -> set[str]:
    points = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            points.add(line.split()[4].replace("\\040", " "))
    return points


def netns() -> set[str]:
    found: set[str] = set()
    for d in ("/run/netns", "/var/run/netns"):
        if os.path.isdir(d):
            found.update(f"{d}/{n}" for n in os.listdir(d))
    return found


def cgroups() -> set[str]:
    """Every top-level cgroup folder of each hierarchy, and the kubelet's kubepods tree two levels down.

    Deeper folders elsewhere come and go with every process this machine's own supervisor starts."""
    found: set[str] = set()
    if not CGROUP_ROOT.is_dir():
        return found
    for hierarchy in CGROUP_ROOT.iterdir():
        if not hierarchy.is_dir():
            continue
        for first in _subdirs(hierarchy):
            found.add(str(first))
            if first.name.startswith("kubepods"):
                found.update(str(p) for p in _subdirs(first))
    return found


def _subdirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


def processes(executables: set[str]) -> set[str]:
    """`pid exe` of running processes whose executable is one of the given real paths."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if exe in executables:
            found.add(f"{pid} {exe}")
    return found


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str]
    chains: frozenset[str]
    links: frozenset[str]
    mounts: frozenset[str]
    netns: frozenset[str]
    cgroups: frozenset[str]
    paths: frozenset[str]
    processes: frozenset[str]

    @classmethod
    def capture(cls, executables: frozenset[str] | set[str] = frozenset()) -> HostState:
        return cls(
            sysctls={name: read_sysctl(name) for name in SYSCTLS if Path("/proc/sys", name.replace(".", "/")).exists()},
            chains=frozenset(iptables_chains()),
            links=frozenset(links()),
            mounts=frozenset(mounts()),
            netns=frozenset(netns()),
            cgroups=frozenset(cgroups()),
            paths=frozenset(p for p in HOST_PATHS if os.path.lexists(p)),
            processes=frozenset(processes(set(executables))),
        )

    def diff(self, other: HostState, ignore_mounts_outside: tuple[str, ...] = ()) -> dict[str, object]:
        """What differs from `other`, field by field (empty when the host is as it was)."""
        out: dict[str, object] = {}
        if self.sysctls != other.sysctls:
            out["sysctls"] = {k: (self.sysctls.get(k), other.sysctls.get(k)) for k in self.sysctls.keys()
                              | other.sysctls.keys() if self.sysctls.get(k) != other.sysctls.get(k)}
        for name in ("chains", "links", "mounts", "netns", "cgroups", "paths", "processes"):
            before, after = getattr(self, name), getattr(other, name)
            if name == "mounts" and ignore_mounts_outside:
                # Other work on this machine (image builds, other sessions) mounts and unmounts on its own.
                before = {m for m in before if m.startswith(ignore_mounts_outside)}
                after = {m for m in after if m.startswith(ignore_mounts_outside)}
            if before != after:
                out[name] = {"added": sorted(after - before), "removed": sorted(before - after)}
        return out

    def summary(self) -> str:
        return (f"sysctls {self.sysctls}; {len(self.chains)} KUBE-/CNI- chains; {len(self.links)} links; "
                f"{len(self.mounts)} mounts; {len(self.netns)} netns; {len(self.cgroups)} cgroups; "
                f"host paths {sorted(self.paths)}; {len(self.processes)} node processes")


def restore_sysctls(saved: dict[str, str]) -> dict[str, str]:
    """Writes back every saved kernel setting that differs now; returns what it changed (name -> value found)."""
    changed = {name: read_sysctl(name) for name, value in saved.items() if read_sysctl(name) != value}
    for name in changed:
        write_sysctl(name, saved[name])
    return changed


def main(argv: list[str]) -> int:
    """For shell-driven tiers (tests/kind/run.sh): `save FILE` before the cluster starts; `restore FILE` after it
    stopped puts the kernel settings back and fails, printing the difference, if anything else is not as it was."""
    import json

    if len(argv) != 2 or argv[0] not in ("save", "restore"):
        print("usage: python -m dflash_testkit.hoststate save|restore FILE")
        return 2
    verb, path = argv[0], Path(argv[1])
    if verb == "save":
        now = HostState.capture()
        path.write_text(json.dumps({"sysctls": now.sysctls, "chains": sorted(now.chains), "links": sorted(now.links),
                                    "netns": sorted(now.netns), "paths": sorted(now.paths)}))
        return 0
    saved = json.loads(path.read_text())
    changed = restore_sysctls(saved["sysctls"])
    if changed:
        print(f"put back kernel settings the cluster changed: {changed} -> {saved['sysctls']}")
    now = HostState.capture()
    left: dict[str, object] = {name: {"added": sorted(set(getattr(now, name)) - set(saved[name])),
                   "removed": sorted(set(saved[name]) - set(getattr(now, name)))}
            for name in ("chains", "links", "netns", "paths") if set(getattr(now, name)) != set(saved[name])}
    if now.sysctls != saved["sysctls"]:
        left["sysctls"] = {"now": now.sysctls, "before": saved["sysctls"]}
    if left:
        print(f"host state not as it was: {left}")
        return 1
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
