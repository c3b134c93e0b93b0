"""What the cluster says of a DFlashDeployment's objects in trouble, beyond what the watched indexes hold: the
reasons only events carry (a pod's failing speculative probe, a claim its provisioner refuses). Read only for objects
in that state, at most once a minute each (a claim every 10 s while its events say nothing; Ledger.recent_read):
nothing for what serves, binds or is still starting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflash_operator.api import DFlashDeployment
from dflash_operator.kube.client import Kube
from dflash_operator.reconcile import cache_outcome
from dflash_operator.reconcile.ledger import CLAIM_NOTHING_SAID_READ_SECONDS, Ledger
from dflash_operator.reconcile.observed import Observed
from dflash_operator.render.cache import cache_name
from dflash_operator.runtime import metrics
from dflash_operator.runtime.clock import Clock, parse_rfc3339
from dflash_operator.status import trouble

# The scheduler's mark on a WaitForFirstConsumer claim once it picked a node: provisioning has been asked for.
SELECTED_NODE = "volume.kubernetes.io/selected-node"
# A claim Pending this long (Immediate binding: no node mark) is not a provisioner at work but one that refuses.
PENDING_LONG_SECONDS = 60.0


def provisioning_stalled(claim: Mapping[str, Any] | None, now: float) -> bool:
    """A Pending claim whose provisioning was asked for (a node selected) or that has waited a minute: its events
    may say why it does not bind. Fresh claims of a burst of new DFlashDeployments cost no read."""
    if ((claim or {}).get("status") or {}).get("phase") != "Pending":
        return False
    meta = (claim or {}).get("metadata") or {}
    if SELECTED_NODE in (meta.get("annotations") or {}):
        return True
    try:
        born = parse_rfc3339(str(meta.get("creationTimestamp"))).timestamp()
    except ValueError:
        return False
    return now - born >= PENDING_LONG_SECONDS


def cache_trouble(kube: Kube, observed: Observed, ledger: Ledger, clock: Clock, dfd: DFlashDeployment,
                   job_name: str, outcome: cache_outcome.CacheOutcome) -> trouble.Trouble | None:
    if outcome.phase != cache_outcome.DOWNLOADING:
        return None
    namespace, uid, name = dfd.metadata["namespace"], dfd.metadata["uid"], cache_name(dfd)
    claim = observed.child("v1", "PersistentVolumeClaim", namespace, name)
    found = trouble.cache_trouble(observed.job_pods(namespace, job_name), claim)
    stalled = provisioning_stalled(claim, clock.now().timestamp())
    ledger.forget_reads(uid, "claim", [f"claim/{name}"] if stalled else [])
    if found is not None or not stalled:
        return found
    # A claim waiting for its volume is what every new cache does for a moment; one its provisioner refuses (an
    # access mode the class cannot give, a full disk) says so only in its own events: read them.
    said = ledger.recent_read(uid, f"claim/{name}", clock.monotonic(), lambda: _newest_event(
        kube, namespace, "PersistentVolumeClaim", name, "ProvisioningFailed", ""), CLAIM_NOTHING_SAID_READ_SECONDS)
    return trouble.claim_trouble(name, said) if said else None


def probe_trouble(kube: Kube, ledger: Ledger, clock: Clock, uid: str, namespace: str,
                pods: list[dict[str, Any]]) -> trouble.Trouble | None:
    """A running pod that fails its probe (startup or readiness: both are the speculative probe): the probe's own
    FAIL line, from the kubelet's event (read only for running unready pods, at most once a minute each; nothing for
    pods that serve, nor while vLLM is still loading)."""
    failing = trouble.probing_pods(pods)
    ledger.forget_reads(uid, "pod", [f"pod/{pod}" for pod in failing])
    for pod in failing:
        def read(pod: str = pod) -> str:
            return _newest_event(kube, namespace, "Pod", pod, "Unhealthy", trouble.PROBE_FAILED)
        found = trouble.probe_trouble(pod, ledger.recent_read(uid, f"pod/{pod}", clock.monotonic(), read))
        if found is not None:
            return found
    return None


def _newest_event(kube: Kube, namespace: str, kind: str, name: str, reason: str, starting: str | tuple[str, ...]
                  ) -> str:
    metrics.EVENT_READS.labels(kind).inc()
    return kube.newest_event(namespace, kind, name, reason, starting)
