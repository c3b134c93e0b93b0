"""Why no pod serves, in the words of the kubelet, the scheduler and the controllers. Pure: index entries in.

Read from what the operator's watches already hold (the slim pods of reconcile.observed, the Deployment's status),
so saying it costs no request. `stalled` marks what the cluster will not fix by itself: an image that does not
exist, a container that keeps crashing. The rest (no node now, a quota full now, a registry that does not answer)
may pass, and the rollout goes on once it does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

UNSCHEDULABLE = "Unschedulable"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"
PODS_REFUSED = "PodsRefused"
PROBE_FAILING = "ProbeFailing"
CLAIM_PENDING = "ClaimPending"
# The kubelet's event message for a failed probe starts so; the rest is the probe's own output. The serving pod's
# startup probe is the speculative probe too (render.serving), so a pod whose drafts are rejected fails there first.
PROBE_FAILED = ("Startup probe failed:", "Readiness probe failed:")
# dflash-probe's words while vLLM does not answer yet: what every pod says while it loads, not trouble.
SERVER_STARTING = "server unreachable"

# The kubelet's waiting reasons for an image it could not get.
_PULL_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
# Registry answers that no retry changes: the image or tag does not exist, or this pod may not pull it.
_IMAGE_GONE = re.compile(r"not found|manifest unknown|does not exist|repository .* not exist|pull access denied|"
                         r"unauthorized|InvalidImageName|ErrImageNeverPull", re.I)
# The restarts after which a crash loop is judged for good (the same container, failing each time it starts).
CRASH_LOOP_STALL_RESTARTS = 3
_ERROR_LINE = re.compile(r"error|exception|invalid|unrecognized|not supported|refused|out of memory|assert",
                         re.I)


@dataclass(frozen=True)
class Trouble:
    reason: str  # one of the constants above: programs match it
    message: str  # people act on it
    stalled: bool


def error_line(text: str) -> str:
    """The line of a log tail or termination message that says what went wrong: the last line that reads like an
    error (vLLM prints its traceback's last line, argparse its usage error), else the last non-empty line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return line[-400:]
    return lines[-1][-400:] if lines else ""


def _container_trouble(status: Mapping[str, Any], where: str) -> Trouble | None:
    name = status.get("name")
    state = status.get("state") or {}
    waiting = state.get("waiting") or {}
    last = status.get("lastTerminated") or {}
    restarts = int(status.get("restartCount") or 0)
    if waiting.get("reason") in _PULL_REASONS:
        said = waiting.get("message") or waiting["reason"]
        return Trouble(IMAGE_PULL_BACK_OFF, f"{where}: container {name} cannot pull its image: {said}",
                       stalled=bool(_IMAGE_GONE.search(f"{waiting['reason']} {said}")))
    ended = state.get("terminated") or {}
    if ended.get("reason") == OOM_KILLED or (waiting.get("reason") == CRASH_LOOP_BACK_OFF
                                             and last.get("reason") == OOM_KILLED):
        return Trouble(OOM_KILLED, f"{where}: container {name} was killed for exceeding its memory limit "
                                   f"(restarts: {restarts}); raise spec.resources.limits.memory",
                       stalled=restarts >= CRASH_LOOP_STALL_RESTARTS)
    if waiting.get("reason") == CRASH_LOOP_BACK_OFF:
        line = error_line(last.get("message") or "")
        exit_code = last.get("exitCode")
        said = f"exit code {exit_code}" + (f": {line}" if line else "")
        return Trouble(CRASH_LOOP_BACK_OFF, f"{where}: container {name} keeps crashing (restarts: {restarts}; "
                                            f"last {said})", stalled=restarts >= CRASH_LOOP_STALL_RESTARTS)
    return None


def pod_trouble(pod: Mapping[str, Any], where: str) -> Trouble | None:
    """What keeps one pod from running, if the kubelet or the scheduler says so."""
    status = pod.get("status") or {}
    if status.get("unschedulable"):
        return Trouble(UNSCHEDULABLE, f"{where} cannot be scheduled: {status['unschedulable']}", stalled=False)
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        found = _container_trouble(container, where)
        if found is not None:
            return found
    return None


def _worst(troubles: Iterable[Trouble | None]) -> Trouble | None:
    order = {PODS_REFUSED: 0, IMAGE_PULL_BACK_OFF: 1, OOM_KILLED: 2, CRASH_LOOP_BACK_OFF: 3, UNSCHEDULABLE: 4}
    found = [t for t in troubles if t is not None]
    return min(found, key=lambda t: (not t.stalled, order.get(t.reason, 9))) if found else None


def serving_trouble(deployment: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> Trouble | None:
    """Why the serving pods do not all serve: the Deployment's ReplicaFailure (its pods refused by a quota, an
    admission webhook, PodSecurity), or the worst of what its live pods report."""
    troubles: list[Trouble | None] = []
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            troubles.append(Trouble(PODS_REFUSED, f"the API server refuses the serving pods: "
                                                  f"{cond.get('message') or cond.get('reason')}", stalled=False))
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    troubles += [pod_trouble(p, f"serving pod {p['metadata'].get('name')}") for p in live]
    return _worst(troubles)


def probing_pods(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Serving pods whose containers all run and that are not ready: the readiness probe is what holds them back
    (the startup probe has passed; a crash or a pull shows in the container states instead)."""
    found = []
    for pod in pods:
        status = pod.get("status") or {}
        containers = status.get("containerStatuses") or []
        if ((pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running"
                or status.get("ready") or not containers
                or not all("running" in (c.get("state") or {}) for c in containers)):
            continue
        found.append(pod["metadata"]["name"])
    return found


def probe_trouble(pod: str, kubelet_says: str) -> Trouble | None:
    """The probe's own verdict (its FAIL line: acceptance under the floor, no completion) as the kubelet relayed it;
    None while it only says that vLLM does not answer yet."""
    probe, line = "probe", kubelet_says.strip()
    for prefix in PROBE_FAILED:
        if line.startswith(prefix):
            probe, line = f"{prefix.split()[0].lower()} probe", line.removeprefix(prefix).strip()
    if not line or SERVER_STARTING in line:
        return None
    return Trouble(PROBE_FAILING, f"serving pod {pod} runs and fails its {probe}: {error_line(line) or line}",
                   stalled=False)


def claim_trouble(claim: str, provisioner_says: str) -> Trouble:
    """A cache claim its provisioner refuses: waits (a class or access mode fixed, space freed), so not a stall."""
    return Trouble(CLAIM_PENDING, f"the cache claim {claim} is Pending: its provisioner says: "
                                  f"{provisioner_says[-400:]}", stalled=False)


def cache_trouble(pods: Sequence[Mapping[str, Any]], claim: Mapping[str, Any] | None) -> Trouble | None:
    """Why the cache Job's pod does not get on: not scheduled (with the claim's state) or an image it cannot pull
    (its check step runs the serving image: a wrong spec.image shows here first)."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    found = _worst(pod_trouble(p, f"the cache Job's pod {p['metadata'].get('name')}") for p in live)
    phase = ((claim or {}).get("status") or {}).get("phase")
    if found is not None and found.reason == UNSCHEDULABLE and phase == "Pending" and _WAITS_FOR_CLAIM.search(
            found.message):
        # The scheduler waits for the claim's volume: what every new cache does while its provisioner works (the
        # StorageClass was checked before the download). Not trouble; a claim that never binds says why only in
        # its own events.
        return None
    return found


_WAITS_FOR_CLAIM = re.compile(r"unbound (immediate )?PersistentVolumeClaim", re.I)
