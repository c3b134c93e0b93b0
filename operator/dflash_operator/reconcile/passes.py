"""One reconcile pass: parse -> validate -> observe the cache -> apply what `desired_objects` returns -> status.

Called by every handler; level-based and idempotent. An orchestrator only: rendering, status and events are
decided by pure functions elsewhere. It reads the world from the watch-fed indexes (`Observed`) and writes only
what differs, so a pass over an unchanged world sends nothing to the API server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from dflash_cache.pairing import speculative_tokens_problems
from dflash_cache.result import FETCH_CONTAINER
from dflash_operator.api import DFlashDeployment, DFlashDeploymentSpec
from dflash_operator.api.models import (
    CacheStatus,
    Condition,
    DFlashDeploymentStatus,
    ResolvedRevisions,
    SpeculationStatus,
)
from dflash_operator.api.tuning import TunedSchedule
from dflash_operator.kube.client import Kube
from dflash_operator.kube.errors import already_exists, api_message, namespace_terminating
from dflash_operator.kube.ownership import field_manager
from dflash_operator.reconcile import cache_outcome, capacity, cluster_says
from dflash_operator.reconcile.drift import covers
from dflash_operator.reconcile.ledger import Ledger
from dflash_operator.reconcile.observed import Observed
from dflash_operator.reconcile.validation import spec_problems
from dflash_operator.render.cache import cache_job_name, cache_name, claim_not_smaller, render_cache_pvc
from dflash_operator.render.desired import desired_objects
from dflash_operator.render.serving import (
    SERVING_PORT,
    CacheFacts,
    endpoint,
    probe_speculates,
    render_deployment,
    selector_string,
)
from dflash_operator.runtime import metrics
from dflash_operator.runtime.clock import SYSTEM_CLOCK, Clock
from dflash_operator.runtime.config import OperatorConfig
from dflash_operator.speculation import auto, autopilot
from dflash_operator.speculation import counters as speculation
from dflash_operator.speculation.recommendation import recommendation, shipped_cost_model_for
from dflash_operator.speculation.vllm_features import declared_version, missing_features
from dflash_operator.speculation.window import WindowFigures, Windows
from dflash_operator.status import conditions as status
from dflash_operator.status import trouble

log = logging.getLogger(__name__)

# (event type, reason, message) -> posted on the DFlashDeployment
EventSink = Callable[[str, str, str], None]
# Kinds created with a POST when absent (Kube.create), applied otherwise. Their fields never go away, which a
# created object's ownership needs: a Job's template is immutable (the API server refuses a change), and a claim's
# only change is growing, through an apply (claim_not_smaller).
CREATED_ONCE = frozenset({"Job", "PersistentVolumeClaim"})


class RetryLater(Exception):
    """A transient API failure (conflict, throttling, server error): the handler retries with backoff."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


class NamespaceTerminating(Exception):
    """The DFlashDeployment's namespace is being deleted (a create was refused with NamespaceTerminating): the
    DFlashDeployment goes with it, so no pass over it can do anything but be refused again."""


class _Rejected(Exception):
    """The API server refused a child for good (400/422); the pass stalls with its message."""


class _CannotRun(Exception):
    """The cluster can never run this spec (reconcile.capacity); the pass stalls with the reason, nothing created."""

    def __init__(self, finding: capacity.Finding) -> None:
        super().__init__(finding.message)
        self.reason = finding.reason


# One DFlashDeployment's own answer to "may a cluster autoscaler add the node that fits?" (config: node_autoscaling).
NODE_AUTOSCALING_ANNOTATION = "serving.dflash.dev/node-autoscaling"
NODE_CHECK_SKIPPED = "NodeCheckSkipped"


def _validation_message(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def reconcile(kube: Kube, observed: Observed, ledger: Ledger, body: dict[str, Any], config: OperatorConfig,
              emit: EventSink, measure: bool = False, windows: Windows | None = None,
              clock: Clock = SYSTEM_CLOCK) -> None:
    """Brings the children in line with the spec and writes status if anything changed.

    The serving objects exist only once both models are cached, verified and compatible, so no GPU pod is ever
    created for a pair that cannot work. `measure` also reads the running pods' /metrics into the DFlashDeployment's
    window (`windows`) and judges it (dflash_operator.speculation.autopilot); otherwise the last verdict stays."""
    meta = body["metadata"]
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation", 0)
    try:
        dfd = DFlashDeployment.model_validate(body)
    except ValidationError as error:
        _stall(kube, ledger, clock, body, "InvalidSpec", _validation_message(error), emit)
        return
    problems = spec_problems(dfd)
    if problems:
        _stall(kube, ledger, clock, body, problems[0].reason, "; ".join(p.message for p in problems), emit)
        return

    job_name = cache_job_name(dfd, config.cache)
    try:
        _preflight(kube, observed, ledger, dfd, config, job_name, emit)
    except _Rejected as error:
        _stall(kube, ledger, clock, body, "ChildRejected", f"nothing was downloaded: {error}", emit)
        return
    except _CannotRun as error:
        _stall(kube, ledger, clock, body, error.reason, f"nothing was downloaded: {error}", emit)
        return

    outcome = _cache_outcome(kube, observed, namespace, job_name)
    cache_says = cluster_says.cache_trouble(kube, observed, ledger, clock, dfd, job_name, outcome)
    gate = _cache_gate(outcome, dfd.spec, cache_says)
    facts = None if gate is not None else CacheFacts(
        claim_name=cache_name(dfd), target_commit=outcome.target_commit, draft_commit=outcome.draft_commit)
    old_status = _last_status(ledger, body)
    previous = _previous_speculation(old_status)
    fallback = autopilot.fallback_in_force(dfd, previous)
    tuned = auto.in_force(dfd, previous)
    served = auto.as_served(dfd, tuned)  # what the pods run: Auto's length in place of the spec's (never written)
    desired = desired_objects(served, config.render, config.cache, facts, speculate=fallback is None)
    try:
        current = _apply_differing(kube, observed, ledger, desired, meta["uid"])
    except _Rejected as error:
        _stall(kube, ledger, clock, body, "ChildRejected", str(error), emit)
        return

    new = DFlashDeploymentStatus(
        observed_generation=generation, selector=selector_string(name),
        cache=CacheStatus.model_validate({"name": cache_name(dfd), "phase": outcome.phase,
                                          "message": outcome.message, **outcome.progress}),
    )
    if outcome.target_commit or outcome.draft_commit:
        new.resolved = ResolvedRevisions(target_commit=outcome.target_commit, draft_commit=outcome.draft_commit)
    new.pair_check = outcome.pair_check
    if gate is not None:
        _write_status(kube, ledger, clock, body, new, gate, emit)
        return

    deployment = next(c for o, c in zip(desired, current, strict=True) if o["kind"] == "Deployment")
    facts_of_rollout = status.rollout_facts(deployment, dfd.spec.replicas)
    probe = (status.PLAIN_PROBE if fallback is not None else status.SPECULATIVE_PROBE
             if probe_speculates(served.spec) else status.UNSCHEDULED_PROBE)
    serving_pods = observed.serving_pods(namespace, name)
    pods_say = trouble.serving_trouble(deployment, serving_pods) or cluster_says.probe_trouble(
        kube, ledger, clock, meta["uid"], namespace, serving_pods)
    conditions = status.cache_ready_conditions() + status.rollout_conditions(facts_of_rollout, probe, pods_say)
    new.replicas, new.ready_replicas, new.endpoint = facts_of_rollout.replicas, facts_of_rollout.ready, endpoint(dfd)
    if measure:
        window = (windows or Windows()).of(meta["uid"], autopilot.speculation_fingerprint(dfd))
        span = dfd.spec.speculation.window_seconds
        measured = _measure(observed, namespace, name, config)
        window.record(clock.monotonic(), {pod: m.counters for pod, m in measured.items()}, span,
                      {pod: m.running for pod, m in measured.items()})
        healthy = next((c for c in old_status.get("conditions") or [] if c.get("type") == status.SPECULATION_HEALTHY),
                       None)
        seen = window.figures(clock.monotonic(), span)
        verdict = autopilot.judge(dfd, seen, previous, healthy, clock.now(), config.speculation_min_draft_tokens)
        new.speculation = verdict.figures
        if fallback is None and not verdict.started_fallback:
            # The version the pair check found in the image, else the one the spec declares.
            serving = (new.pair_check.vllm_version if new.pair_check is not None else None) \
                or declared_version(dfd.spec)
            new.speculation = _tuned(dfd, new.speculation, tuned, seen, config, clock, emit, serving)
        conditions.append(verdict.healthy)
    elif previous is not None and previous.fallback is not None and fallback is None:
        # Speculation is back (a spec change, or the resume annotation): the pods roll with the draft again.
        new.speculation = SpeculationStatus(fingerprint=autopilot.speculation_fingerprint(dfd))
        conditions.append(status.condition(status.SPECULATION_HEALTHY, "Unknown", autopilot.NO_DRAFT_TOKENS_YET,
                                           "speculation resumed; judged once the window holds enough draft tokens"))
    _write_status(kube, ledger, clock, body, new, conditions, emit)
    if new.speculation is not None:
        metrics.publish_speculation(meta["uid"], namespace, name, new.speculation, autopilot.floor(dfd),
                                    autopilot.pauses_under_load(auto.as_served(dfd, new.speculation.tuned)))


def _tuned(dfd: DFlashDeployment, figures: SpeculationStatus, tuned: TunedSchedule | None,
           seen: WindowFigures | None, config: OperatorConfig, clock: Clock, emit: EventSink,
           vllm_version: str | None) -> SpeculationStatus:
    """The window's figures with the recommendation (tuning Recommend or Auto) and the schedule Auto has the pods
    run: kept while nothing new is measured, replaced when a recommendation pays enough (an event says so).
    `vllm_version`: the serving vLLM's, which picks the shipped cost model when the chart gives none."""
    if seen is None:  # no pod exposes counters: nothing to recommend, and what runs stays
        return figures.model_copy(update={"tuned": tuned})
    default = config.cost_model or shipped_cost_model_for(vllm_version)
    advice = recommendation(dfd, figures.acceptance_by_position, seen.increase.drafts, default,
                            config.speculation_min_draft_tokens, seen.batch_sizes)
    decision = auto.decide(dfd, tuned, advice.found, figures.acceptance_by_position or [], advice.cost, clock.now(),
                           advice.traffic)
    if decision.event is not None:
        emit("Normal", auto.SPECULATION_TUNED, decision.event)
    said = advice.status
    if said is not None and decision.note is not None:
        said = said.model_copy(update={"message": "; ".join(m for m in (said.message, decision.note) if m)})
    return figures.model_copy(update={"recommendation": said, "tuned": decision.tuned})


def _last_status(ledger: Ledger, body: dict[str, Any]) -> dict[str, Any]:
    """Status as the server holds it: the ledger knows this process's last write before the watch shows it."""
    return {**(body.get("status") or {}), **(ledger.last_status(body["metadata"]["uid"]) or {})}


def _previous_speculation(old_status: dict[str, Any]) -> SpeculationStatus | None:
    try:
        return SpeculationStatus.model_validate(old_status["speculation"]) if old_status.get("speculation") else None
    except ValidationError:
        return None  # written by an older operator in another shape: judged afresh


def _preflight(kube: Kube, observed: Observed, ledger: Ledger, dfd: DFlashDeployment, config: OperatorConfig,
               job_name: str, emit: EventSink) -> None:
    """Before a download starts: can this spec ever run here (quota, storage class, a node that fits: from the
    indexes, no request), and would the API server take its serving Deployment (validation and admission, as a dry
    run)? A spec that cannot stalls now, not after hundreds of GB. Once per generation, and only while this spec's
    cache Job does not exist yet: from then on the download is under way and the real apply reports the same
    errors. A stalled spec is checked again on its next pass (a quota raised, a class or a node added)."""
    meta = dfd.metadata
    if observed.child("batch/v1", "Job", meta["namespace"], job_name) is not None:
        return
    if ledger.preflighted(meta["uid"], meta.get("generation", 0)):
        return
    deployment = render_deployment(dfd, config.render, CacheFacts(claim_name=cache_name(dfd)))
    for finding in _capacity_findings(observed, dfd, config, deployment):
        if finding.stall:
            raise _CannotRun(finding)
        emit("Warning", finding.reason, finding.message)
    if observed.nodes() is None:
        emit("Normal", NODE_CHECK_SKIPPED, "the operator does not watch Nodes (chart value nodeCheck.enabled, or "
                                           "no permission): whether a node can hold a serving pod is not checked")
    try:
        kube.create(deployment, field_manager=field_manager(deployment, meta["uid"]), dry_run=True)
    except ApiException as error:
        # A dry-run create validates the rendered object as a whole, even where one exists already (a spec change
        # while serving): the server answers AlreadyExists only once validation and admission have passed.
        if not already_exists(error):
            _raise_api_error(error, deployment)
    ledger.record_preflight(meta["uid"], meta.get("generation", 0))


def _capacity_findings(observed: Observed, dfd: DFlashDeployment, config: OperatorConfig,
                       deployment: dict[str, Any]) -> list[capacity.Finding]:
    """Everything reconcile.capacity finds against this spec, stalls first."""
    namespace = dfd.metadata["namespace"]
    pod_spec = deployment["spec"]["template"]["spec"]
    claim = render_cache_pvc(dfd)
    class_name, class_finding = capacity.storage_class_finding(claim, observed.storage_classes())
    needs = capacity.pod_needs(pod_spec)
    quotas = observed.quotas(namespace)
    found = [class_finding,
             capacity.quota_finding(quotas, needs, "one serving pod"),
             capacity.quota_finding(quotas, capacity.claim_needs(claim, class_name), "the cache claim")]
    nodes = observed.nodes()
    if nodes is not None:
        annotation = (dfd.metadata.get("annotations") or {}).get(NODE_AUTOSCALING_ANNOTATION)
        autoscaling = annotation == "true" if annotation in ("true", "false") else config.node_autoscaling
        found.append(capacity.node_finding(pod_spec, needs, dfd.spec.gpu_resource_name, nodes, autoscaling))
    return sorted((f for f in found if f is not None), key=lambda f: not f.stall)


def _raise_api_error(error: ApiException, obj: dict[str, Any]) -> NoReturn:
    """A failed write as the pass treats it: transient (retry with backoff), a rejection (stall), or a bug."""
    # A namespace being deleted refuses new objects with 403; the DFlashDeployment goes with it: no verdict, no retry.
    if namespace_terminating(error):
        raise NamespaceTerminating(f"namespace {obj['metadata']['namespace']} is being deleted") from error
    if error.status in (409, 429) or (error.status or 0) >= 500:
        raise RetryLater(f"applying {obj['kind']} {obj['metadata']['name']}: HTTP {error.status}",
                         delay=2.0) from error
    # 403 is an answer too: a quota exceeded, an admission policy, a claim that cannot be resized, missing RBAC.
    if error.status in (400, 403, 422):
        raise _Rejected(f"the API server rejected the {obj['kind']}: {api_message(error)}") from error
    raise error


def _apply_differing(kube: Kube, observed: Observed, ledger: Ledger, objects: list[dict[str, Any]], uid: str
                     ) -> list[dict[str, Any] | None]:
    """Applies, in order, each object the server does not already hold as rendered; returns every object as the
    server has it. Stops at the first rejection."""
    current: list[dict[str, Any] | None] = []
    for obj in objects:
        meta = obj["metadata"]
        seen = observed.child(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if obj["kind"] == "PersistentVolumeClaim":
            obj = claim_not_smaller(obj, seen)
        if seen is not None and (covers(seen, obj) or ledger.seen_before_own_apply(obj, seen)):
            current.append(seen)
            continue
        if seen is None and ledger.applied_unseen(obj):
            current.append(None)  # applied by an earlier pass; its watch event is on the way
            continue
        try:
            answer = _create_or_apply(kube, obj, field_manager(obj, uid), absent=seen is None)
            current.append(answer)
            ledger.record_apply(obj, answer)
        except ApiException as error:
            _raise_api_error(error, obj)
    return current


def _create_or_apply(kube: Kube, obj: dict[str, Any], manager: str, absent: bool) -> dict[str, Any]:
    """A cache object the indexes do not show is created (a POST costs the API server less than an apply that
    creates: Kube.create); one that exists after all (the watch lags) is applied. Everything else is applied."""
    if absent and obj["kind"] in CREATED_ONCE:
        try:
            return kube.create(obj, field_manager=manager)
        except ApiException as error:
            if not already_exists(error):
                raise
    return kube.apply(obj, field_manager=manager)



def _cache_outcome(kube: Kube, observed: Observed, namespace: str, job_name: str) -> cache_outcome.CacheOutcome:
    job = observed.child("batch/v1", "Job", namespace, job_name)
    if job is None:
        return cache_outcome.cache_outcome(None, [])
    pods = observed.job_pods(namespace, job_name)
    fetching = [p for p in pods if cache_outcome.fetch_running(p)]
    # Progress is the last JSON line the download step printed; read only while it runs.
    last_line = kube.last_log_line(namespace, fetching[0]["metadata"]["name"], FETCH_CONTAINER) if fetching else ""
    return cache_outcome.cache_outcome(job, pods, last_line)


def _cache_gate(outcome: cache_outcome.CacheOutcome, spec: DFlashDeploymentSpec,
                cache_says: trouble.Trouble | None = None) -> list[Condition] | None:
    """Conditions that hold the serving objects back, or None when the cache is ready, the pair fits and the
    serving vLLM has every field the spec uses."""
    if outcome.phase == cache_outcome.DOWNLOADING:
        return status.waiting_for_cache_conditions(outcome.message, cache_says)
    if outcome.phase == cache_outcome.FAILED:
        return status.cache_failed_conditions(outcome.message)
    # The pair's own problems come from the Job; the token count is this deployment's, checked here.
    problems = [p["message"] for p in outcome.problems] + [
        p.message for p in speculative_tokens_problems(spec.num_speculative_tokens, outcome.draft_block_size)]
    if problems:
        return status.incompatible_pair_conditions(problems)
    found = outcome.pair_check.vllm_version if outcome.pair_check is not None else None
    missing = missing_features(spec, found, "the serving image (its pair check)")
    if missing:
        return status.needs_newer_vllm_conditions(missing)
    return None






def _stall(kube: Kube, ledger: Ledger, clock: Clock, body: dict[str, Any], reason: str, message: str,
           emit: EventSink) -> None:
    new = DFlashDeploymentStatus(observed_generation=body["metadata"].get("generation", 0))
    _write_status(kube, ledger, clock, body, new, status.stalled_conditions(reason, message), emit)


def _write_status(kube: Kube, ledger: Ledger, clock: Clock, body: dict[str, Any], new: DFlashDeploymentStatus,
                  conditions: list[Condition], emit: EventSink) -> None:
    meta = body["metadata"]
    old = _last_status(ledger, body)
    old_conditions = old.get("conditions") or []
    new.conditions = status.merge_conditions(old_conditions, conditions, meta.get("generation", 0),
                                             clock.rfc3339())
    metrics.publish_conditions(meta["uid"], meta["namespace"], meta["name"], new.conditions)
    wire = status.to_wire(new)
    if not status.status_changed(old, wire):
        return
    try:
        kube.patch_dfd_status(meta["namespace"], meta["name"], wire)
        metrics.STATUS_WRITES.inc()
    except ApiException as error:
        if error.status == 404:
            return  # deleted since this pass began: nothing left to report on
        raise
    ledger.record_status(meta["uid"], status.merge_patched(old, wire))
    for event in status.transition_events(old_conditions, new.conditions):
        emit(event.type, event.reason, event.message)


def _measure(observed: Observed, namespace: str, name: str, config: OperatorConfig
             ) -> dict[str, speculation.PodMetrics]:
    """The counters and running batch sizes of every running serving pod that answers, by pod (name and address)."""
    readings: dict[str, speculation.PodMetrics] = {}
    for pod_name, ip in observed.running_pods(namespace, name):
        try:
            url = speculation.metrics_url(ip, SERVING_PORT, config.metrics_allowed_networks)
            metrics = speculation.read_pod_metrics(url, config.metrics_timeout_seconds)
        except (OSError, ValueError) as error:
            log.debug("no metrics from pod %s of %s/%s: %s", ip, namespace, name, error)
            continue
        if metrics is not None:
            readings[f"{pod_name}/{ip}"] = metrics
    return readings
