"""Thin kopf handlers, all event-driven: every change the watches see runs the same level-based reconcile.

Indexes (reconcile.observed) keep slim copies of the children, their pods and the DFlashDeployments, so a
pass reads nothing from the API server. Plain event handlers rather than kopf's create/update handlers: those
persist progress on the object (an annotation and a status field per change), which is write traffic a
level-based reconcile does not need. Handlers only put the DFlashDeployment's key on a work queue
(reconcile.workqueue), whose threads run each pass on the newest indexed copy; failed passes go back on it
after a delay.
One resync thread does only what no watch can tell: progress lines of running downloads and /metrics of running
pods. It is not a kopf timer: kopf puts a finalizer on every object that has a timer or daemon, which costs a write
per object and leaves DFlashDeployments stuck behind it once the operator is uninstalled.

`register` adds everything to a registry set up for one configuration, so nothing is read at import time.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from dflash_operator.api import GROUP, KIND, PLURAL, VERSION, DFlashDeployment
from dflash_operator.kube.client import Kube, load_client
from dflash_operator.kube.ownership import CHILD_KINDS, MANAGED_BY, MANAGED_BY_LABEL
from dflash_operator.reconcile import capacity, cluster_says
from dflash_operator.reconcile.cache_outcome import fetch_running
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.observed import (
    ALL,
    DFDS_INDEX,
    NODES_INDEX,
    PODS_INDEX,
    QUOTAS_INDEX,
    STORAGE_CLASSES_INDEX,
    Observed,
    index_id,
    packed,
    pod_keys,
    slim_child,
    slim_node,
    slim_pod,
    slim_quota,
    slim_storage_class,
    trim_watch_event,
)
from dflash_operator.reconcile.passes import NamespaceTerminating, RetryLater, reconcile
from dflash_operator.reconcile.workqueue import WorkQueue
from dflash_operator.render.cache import cache_claim_of_job, cache_job_name
from dflash_operator.runtime import metrics
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.runtime.memory import release_free_memory
from dflash_operator.runtime.no_diffbase import NoDiffBase
from dflash_operator.runtime.scope import WatchScope
from dflash_operator.runtime.watch_health import WatchActivity, WatchWedged, observe_kopf_watches, verdict
from dflash_operator.speculation.window import Windows
from dflash_operator.status import trouble

log = logging.getLogger(__name__)
# The API server filters the child and pod watches by it (kopf's label_selectors), so no handler re-checks it.
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
ERROR_RETRY_SECONDS = 10.0
# Threads taking DFlashDeployments off the work queue. A pass mostly waits for the API server; eight keep a
# 2-core control plane busy without piling up requests it can only queue (the scale bench's 10,000 CRs).
RECONCILE_THREADS = 8


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Only warnings become Kubernetes events; the operator posts its own events for condition transitions.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 120
    settings.networking.request_timeout = 30
    # No kopf peering objects: one operator replica, chosen by the Deployment, not by a CRD of kopf's.
    settings.peering.standalone = True
    # The API server filters the child and pod watches to the operator's own objects: the cluster's other pods,
    # Jobs and Services never reach this process (before, each of their events was sent, decoded and passed through
    # kopf's per-object processing only to be dropped by a client-side label filter).
    watched: list[Any] = [kind.watch_resource for kind in CHILD_KINDS] + [("v1", "pods")]
    for resource in watched:
        settings.watching.label_selectors[resource] = MANAGED_SELECTOR
    # No progress or diff-base is written on the objects, or built in memory: event handlers need neither.
    settings.persistence.diffbase_storage = NoDiffBase()
    memo.kube = Kube(load_client())
    # Startup handlers finish before kopf opens its first watch: every stream reports to the liveness probe.
    memo.watch_activity = WatchActivity()
    observe_kopf_watches(memo.watch_activity, trim=trim_watch_event)
    memo.ledger = Ledger()
    memo.windows = Windows()  # spec-decode readings of each DFlashDeployment's pods over its window
    memo.retries = set()
    memo.retries_lock = threading.Lock()
    # kopf hands each object a shallow copy of the memo: state every handler shares lives in mutable objects.
    # The live indexes are handed over by the first handler call (kopf passes indexes to handlers only).
    memo.shared = {"observed": None, "context": None}
    memo.cache_jobs = {}  # uid -> (generation, cache Job name): the spec is validated once per generation
    memo.work = WorkQueue(functools.partial(_pass_for_key, memo), RECONCILE_THREADS)
    memo.work.start()
    memo.locks = collections.defaultdict(threading.Lock)  # one reconcile at a time per DFlashDeployment
    # DFlashDeployments stalled because the cluster cannot run them (reconcile.capacity): a quota, StorageClass or
    # Node change passes them again. Kept here, so those frequent events cost nothing while none is stalled.
    memo.capacity_stalled = set()
    config: OperatorConfig = memo.config
    metrics.serve(config.metrics_port, config.metrics_address)
    threading.Thread(target=_resync_forever, args=(memo, config.resync_seconds), name="resync", daemon=True).start()


def _observed(memo: kopf.Memo, kwargs: Mapping[str, Any]) -> Observed:
    observed = Observed.from_kwargs(kwargs)
    if memo.shared["observed"] is None:
        memo.shared["observed"] = observed
        # kopf.event finds its settings and event queue in context variables, which kopf sets for handlers only;
        # the resync and retry threads run their passes in a copy of a handler's context, or their events fail.
        memo.shared["context"] = contextvars.copy_context()
    return observed


def _in_handler_context(memo: kopf.Memo, fn: Callable[..., None], *args: Any) -> None:
    context: contextvars.Context | None = memo.shared["context"]
    if context is None:
        fn(*args)
    else:
        context.copy().run(fn, *args)   # a copy each time: one Context cannot be entered by two threads at once


def _pass_for_key(memo: kopf.Memo, key: tuple[str, str]) -> None:
    """A work-queue thread's pass over one DFlashDeployment, on the newest copy the index holds."""
    observed: Observed | None = memo.shared["observed"]  # set by the handler that added the first key
    body = observed.dfd(*key) if observed is not None else None
    if body is not None:
        _in_handler_context(memo, _run, memo, body, observed)


def _run(memo: kopf.Memo, body: Mapping[str, Any], observed: Observed, measure: bool = False) -> None:
    meta = body["metadata"]
    if meta.get("deletionTimestamp") or memo.ledger.namespace_going(meta.get("uid")):
        return  # going away; the garbage collector takes the children with it

    def emit(kind: str, reason: str, message: str) -> None:
        # kopf.event reads only apiVersion, kind and metadata (name, namespace, uid): a plain dict serves.
        kopf.event(dict(body), type=kind, reason=reason, message=message)  # type: ignore[arg-type]

    with memo.locks[meta.get("uid")], metrics.RECONCILE_SECONDS.time():
        try:
            reconcile(memo.kube, observed, memo.ledger, dict(body), memo.config, emit, measure=measure,
                      windows=memo.windows)
        except NamespaceTerminating as error:
            metrics.RECONCILES.labels("ok").inc()
            log.info("no more passes over %s/%s: %s", meta["namespace"], meta["name"], error)
            memo.ledger.record_namespace_going(meta.get("uid"))
            return
        except RetryLater as error:
            metrics.RECONCILES.labels("retry").inc()
            log.info("retrying %s/%s in %.0f s: %s", meta["namespace"], meta["name"], error.delay, error)
            _retry_later(memo, meta["namespace"], meta["name"], error.delay)
            return
        except Exception:
            metrics.RECONCILES.labels("error").inc()
            log.exception("reconcile of %s/%s failed; retrying in %.0f s", meta["namespace"], meta["name"],
                          ERROR_RETRY_SECONDS)
            _retry_later(memo, meta["namespace"], meta["name"], ERROR_RETRY_SECONDS)
            return
    metrics.RECONCILES.labels("ok").inc()
    written = memo.ledger.last_status(meta.get("uid")) or {}
    stalled = next((c for c in written.get("conditions") or [] if c.get("type") == "Stalled"), None)
    key = (meta["namespace"], meta["name"])
    if stalled is not None and stalled.get("status") == "True" and stalled.get("reason") in CAPACITY_REASONS:
        memo.capacity_stalled.add(key)
    elif written:
        memo.capacity_stalled.discard(key)


CAPACITY_REASONS = frozenset({capacity.QUOTA_EXCEEDED, capacity.STORAGE_CLASS_NOT_FOUND, capacity.NO_NODE_FITS})


def _retry_later(memo: kopf.Memo, namespace: str, name: str, delay: float) -> None:
    """One pending retry per DFlashDeployment: its key goes back on the work queue after `delay`."""
    key = (namespace, name)
    with memo.retries_lock:
        if key in memo.retries:
            return
        memo.retries.add(key)

    def again() -> None:
        with memo.retries_lock:
            memo.retries.discard(key)
        memo.work.add(key)

    timer = threading.Timer(delay, again)
    timer.daemon = True
    timer.start()


def probe_watches(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """The liveness endpoint's check: fails (HTTP 500) on a watch stream wedged while the API server answers."""
    activity: WatchActivity | None = getattr(memo, "watch_activity", None)
    if activity is None:
        return {}  # still starting: no stream is open yet
    try:
        return verdict(activity, memo.config.watch_silence_seconds, memo.kube.answers)
    except WatchWedged as wedged:
        log.error("liveness fails: %s", wedged)
        raise kopf.PermanentError(str(wedged)) from None


# --- indexes ------------------------------------------------------------------------------------------------------
# Indexers and event handlers are coroutines: kopf runs a plain function in its thread pool, two hand-offs per
# watch event (an indexer and an event handler) that cost more than the work itself, which is a dict built or a
# key queued without blocking.

async def index_child(body: kopf.Body, namespace: str | None, name: str | None, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): packed(slim_child(body))}


async def index_pod(body: kopf.Body, namespace: str | None, labels: Mapping[str, str], **_: Any) -> dict[Any, Any]:
    pod = packed(slim_pod(body))
    return {key: pod for key in pod_keys(namespace or "", labels)}


async def index_dfd(body: kopf.Body, namespace: str | None, name: str | None, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): packed(slim_child(body))}


async def index_quota(body: kopf.Body, namespace: str | None, **_: Any) -> dict[Any, Any]:
    return {namespace: packed(slim_quota(body))}


async def index_storage_class(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {ALL: packed(slim_storage_class(body))}


async def index_node(body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {ALL: packed(slim_node(body))}


# --- event handlers -----------------------------------------------------------------------------------------------

async def on_dfd_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **kwargs: Any) -> None:
    if type == "DELETED":
        memo.ledger.forget_owner(body.metadata.uid or "")
        memo.locks.pop(body.metadata.uid, None)  # one lock per live DFlashDeployment, not per one ever seen
        memo.cache_jobs.pop(body.metadata.uid, None)
        memo.windows.forget(body.metadata.uid or "")
        metrics.forget(body.metadata.uid or "")
        return
    _observed(memo, kwargs)
    memo.work.add((body.metadata.namespace or "", body.metadata.name or ""))


async def on_child_event(type: str | None, body: kopf.Body, memo: kopf.Memo, namespace: str | None,
                         **kwargs: Any) -> None:
    """A child changed or vanished: reconcile its owners, which re-apply the child if it drifted.

    A shared cache has one owner per DFlashDeployment using it; serving objects have exactly one."""
    if type == "DELETED":
        memo.ledger.forget((body.get("apiVersion"), body.get("kind"), namespace, body.metadata.name))
    _observed(memo, kwargs)
    # Only the key: the pass reads the owner from the index, and finds nothing to do for one that is gone. (One
    # replaced under the same name gets a pass too: it may have to create again what the collector takes.)
    for owner in body.metadata.get("ownerReferences", []):
        if owner.get("kind") == KIND:
            memo.work.add((namespace or "", owner["name"]))


async def on_pod_event(body: kopf.Body, memo: kopf.Memo, namespace: str | None, labels: Mapping[str, str],
                       **kwargs: Any) -> None:
    """A pod the kubelet or the scheduler reports trouble with (an image it cannot pull, a crash loop, no node):
    its DFlashDeployment says so now, not at the next resync. Untroubled pods change nothing here: their progress
    reaches status through the Deployment's or the Job's own status."""
    if trouble.pod_trouble(slim_pod(body), "") is None:
        return
    observed = _observed(memo, kwargs)
    for kind, _, owner in pod_keys(namespace or "", labels):
        if kind == "serving":
            memo.work.add((namespace or "", owner))
            continue
        job = observed.child("batch/v1", "Job", namespace or "", owner)
        for reference in ((job or {}).get("metadata") or {}).get("ownerReferences") or []:
            if reference.get("kind") == KIND:
                memo.work.add((namespace or "", reference["name"]))


async def on_capacity_event(memo: kopf.Memo, **kwargs: Any) -> None:
    """A quota, StorageClass or Node changed: the DFlashDeployments it stalled are checked again."""
    if memo.capacity_stalled:
        _observed(memo, kwargs)
        for key in list(memo.capacity_stalled):
            memo.work.add(key)


def resync(memo: kopf.Memo, observed: Observed, body: Mapping[str, Any]) -> None:
    """Only what no watch event can tell: download progress in a cache pod's download-step log, and the speculation
    figures of running serving pods. A DFlashDeployment with neither costs nothing here."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if observed.running_pod_ips(namespace, name):
        _run(memo, body, observed, measure=True)
        return
    job = _cache_job(memo, body)
    if job is None:
        return  # an invalid spec has no cache; its Stalled status came from the event handler
    if any(fetch_running(p) for p in observed.job_pods(namespace, job)):
        _run(memo, body, observed)
        return
    # A claim its provisioner was asked for and has not bound: the provisioner's refusal is only in the claim's
    # events, and nothing watched changes while it retries (cluster_says reads them at most once a minute).
    claim = observed.child("v1", "PersistentVolumeClaim", namespace, cache_claim_of_job(job))
    if cluster_says.provisioning_stalled(claim, time.time()):
        _run(memo, body, observed)


def _cache_job(memo: kopf.Memo, body: Mapping[str, Any]) -> str | None:
    """The cache Job's name for the spec's current generation; None for a spec that does not validate. Validating a
    spec costs more than everything else a resync pass does per DFlashDeployment, so it happens once per generation."""
    meta = body["metadata"]
    uid, generation = meta.get("uid"), meta.get("generation")
    known = memo.cache_jobs.get(uid)
    if known is not None and known[0] == generation:
        return known[1]
    try:
        job: str | None = cache_job_name(DFlashDeployment.model_validate(dict(body)), memo.config.cache)
    except ValueError:
        job = None
    memo.cache_jobs[uid] = (generation, job)
    return job


def _resync_forever(memo: kopf.Memo, interval: float) -> None:
    while True:
        release_free_memory()  # what start-up, the last pass and the watches freed goes back to the system
        time.sleep(interval)
        observed: Observed | None = memo.shared["observed"]
        if observed is not None:
            _resync_all(memo, observed)


def _resync_all(memo: kopf.Memo, observed: Observed) -> None:
    for namespace, name in observed.dfd_keys():
        body = observed.dfd(namespace, name)
        if body is not None:
            try:
                _in_handler_context(memo, resync, memo, observed, body)
            except Exception:  # noqa: BLE001 - one object's failure must not end the loop
                log.exception("resync of %s/%s failed", namespace, name)


def register(config: OperatorConfig) -> kopf.OperatorRegistry:
    """A registry holding every handler and index, set up for `config`."""
    registry = kopf.OperatorRegistry()
    scope = WatchScope(config.namespaces)
    # Glob scopes are watched cluster-wide (see runtime.scope): objects of other namespaces never reach an
    # index or a handler.
    when: Any = (lambda namespace, **_: scope.serves(namespace)) if scope.filtered else None
    # A registry of our own starts empty: kopf's default login (kubeconfig or in-cluster) must be added to it.
    kopf.on.login(registry=registry)(kopf.login_via_client)
    kopf.on.startup(registry=registry)(configure)
    kopf.on.probe(id="watches", registry=registry)(probe_watches)
    for kind in CHILD_KINDS:
        kopf.index(*kind.watch_resource, id=index_id(kind.plural), when=when, registry=registry)(index_child)
        kopf.on.event(*kind.watch_resource, id=f"{kind.plural}_event", when=when, registry=registry)(on_child_event)
    kopf.index("v1", "pods", id=PODS_INDEX, when=when, registry=registry)(index_pod)
    kopf.on.event("v1", "pods", id="pods_event", when=when, registry=registry)(on_pod_event)
    # What the cluster offers (reconcile.capacity). StorageClasses and Nodes are cluster-scoped: watched
    # cluster-wide whatever the operator's namespaces (the chart's ClusterRole grants them).
    kopf.index("v1", "resourcequotas", id=QUOTAS_INDEX, when=when, registry=registry)(index_quota)
    kopf.on.event("v1", "resourcequotas", id="resourcequotas_event", when=when, registry=registry)(on_capacity_event)
    kopf.index("storage.k8s.io", "v1", "storageclasses", id=STORAGE_CLASSES_INDEX, registry=registry)(
        index_storage_class)
    kopf.on.event("storage.k8s.io", "v1", "storageclasses", id="storageclasses_event", registry=registry)(
        on_capacity_event)
    if config.node_check:
        kopf.index("v1", "nodes", id=NODES_INDEX, registry=registry)(index_node)
        kopf.on.event("v1", "nodes", id="nodes_event", registry=registry)(on_capacity_event)
    kopf.index(GROUP, VERSION, PLURAL, id=DFDS_INDEX, when=when, registry=registry)(index_dfd)
    kopf.on.event(GROUP, VERSION, PLURAL, when=when, registry=registry)(on_dfd_event)
    return registry
