"""The indexes as reconcile reads them: what the index functions keep is what Observed gives back, as a fresh copy."""

from __future__ import annotations

import asyncio

import kopf

from dflash_operator.kube.ownership import CHILD_KINDS
from dflash_operator.reconcile.handlers import index_child, index_dfd, index_pod
from dflash_operator.reconcile.observed import (
    DFDS_INDEX,
    PODS_INDEX,
    Observed,
    index_id,
    slim_child,
    slim_pod,
    trim_watch_event,
)
from dflash_operator.render.serving import INSTANCE_LABEL

JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "cache-x", "namespace": "ns", "managedFields": [{"manager": "kube-controller-manager"}]},
       "spec": {"template": {"spec": {"containers": [{"name": "fetch", "image": "op:1"}]}}},
       "status": {"active": 1}}
DFD = {"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
       "metadata": {"name": "coder", "namespace": "ns", "uid": "u1"}, "spec": {"numSpeculativeTokens": 4},
       "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
POD = {"metadata": {"name": "coder-1", "namespace": "ns", "labels": {INSTANCE_LABEL: "coder"}},
       "status": {"phase": "Running", "podIP": "10.1.0.5",
                  "conditions": [{"type": "Ready", "status": "True"}]}}


def _observed() -> Observed:
    jobs = asyncio.run(index_child(kopf.Body(JOB), namespace="ns", name="cache-x"))
    dfds = asyncio.run(index_dfd(kopf.Body(DFD), namespace="ns", name="coder"))
    pods = asyncio.run(index_pod(kopf.Body(POD), namespace="ns", labels=POD["metadata"]["labels"]))
    indexes = {index_id(k.plural): {} for k in CHILD_KINDS}
    indexes[index_id("jobs")] = {key: [value] for key, value in jobs.items()}
    return Observed({**indexes, DFDS_INDEX: {k: [v] for k, v in dfds.items()},
                     PODS_INDEX: {k: [v] for k, v in pods.items()}})


def test_reads_give_back_the_slim_copy_the_index_function_kept() -> None:
    observed = _observed()
    assert observed.child("batch/v1", "Job", "ns", "cache-x") == slim_child(JOB)
    assert "managedFields" not in observed.child("batch/v1", "Job", "ns", "cache-x")["metadata"]
    assert observed.dfd("ns", "coder") == DFD
    assert observed.running_pods("ns", "coder") == [("coder-1", "10.1.0.5")]
    assert observed.child("batch/v1", "Job", "ns", "other") is None and observed.dfd("ns", "other") is None


def test_a_caller_changing_what_it_read_does_not_change_the_index() -> None:
    observed = _observed()
    job = observed.child("batch/v1", "Job", "ns", "cache-x")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "changed"
    observed.dfd("ns", "coder")["status"]["conditions"].clear()
    assert observed.child("batch/v1", "Job", "ns", "cache-x") == slim_child(JOB)
    assert observed.dfd("ns", "coder") == DFD


def test_watch_events_shed_what_nothing_reads_before_kopf_queues_them() -> None:
    job = {"type": "MODIFIED", "object": {"metadata": {"name": "j", "managedFields": [{"manager": "x"}]},
                                          "spec": {"parallelism": 1}}}
    pod = {"type": None, "object": {"metadata": {"name": "p", "labels": {INSTANCE_LABEL: "coder"},
                                                 "managedFields": [{"manager": "kubelet"}]},
                                    "spec": {"containers": [{"name": "vllm"}]}, "status": POD["status"]}}
    indexed_untrimmed = slim_pod(pod["object"])
    trim_watch_event("jobs", job)
    trim_watch_event("pods", pod)
    assert job["object"] == {"metadata": {"name": "j"}, "spec": {"parallelism": 1}}  # a child keeps its spec
    assert pod["object"] == {"metadata": {"name": "p", "labels": {INSTANCE_LABEL: "coder"}}, "status": POD["status"]}
    assert slim_pod(pod["object"]) == indexed_untrimmed  # the trim loses nothing the pod index keeps
    trim_watch_event("pods", "LISTED")  # kopf's end-of-listing bookmark passes through untouched
    trim_watch_event("jobs", {"type": "ERROR", "object": {"code": 410}})
