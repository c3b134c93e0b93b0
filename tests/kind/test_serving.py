"""The tiny pair served on kind the way a user serves a model there: the vLLM image `docker build` made from
images/vllm/Dockerfile (FROM the CPU stand-in of vllm/vllm-openai) and `kind load`ed, the hub mirror where the chart's
hub.endpoint points, `kubectl apply`, the cache Job, the pod passing its speculative probe, a completion through
`kubectl port-forward`; then a `helm upgrade` to changed values while it serves, which rolls the operator and no
serving pod."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dflash_testkit import REPO
from dflash_testkit.dfd import SELECTOR
from dflash_testkit.flow import DRAFT, TARGET, complete_through_port_forward, dfd
from dflash_testkit.kindpath import (
    KindHub,
    conditions,
    get,
    helm,
    kind_hub,
    kubectl,
    kubectl_argv,
    set_fake_gpus,
    vllm_image,
)
from dflash_testkit.waiting import wait_for

pytestmark = pytest.mark.kind
NAME = "tiny"
OPERATOR = ("-n", "dflash-system", "deployment", "dflash-dflash-operator")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindHub]:
    with kind_hub(tmp_path_factory.mktemp("hub")) as running:
        yield running


@pytest.fixture(scope="module")
def serving(hub: KindHub) -> Iterator[str]:
    """A namespace whose DFlashDeployment of the tiny pair is Ready; returns the namespace."""
    namespace = f"t-kind-serve-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", namespace)
    set_fake_gpus(1)
    try:
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(dfd(NAME, vllm_image())))
        wait_for(lambda: ready(namespace) or stopped(namespace), "the DFlashDeployment Ready", timeout=900,
                 interval=3)
        assert ready(namespace), stopped(namespace)
        yield namespace
    finally:
        kubectl("delete", "namespace", namespace, "--wait=true", check=False, timeout=300)
        set_fake_gpus(None)


def ready(namespace: str) -> dict[str, Any] | None:
    found = conditions(get("dfd", "-n", namespace, NAME)).get("Ready")
    return found if found and found["status"] == "True" else None


def stopped(namespace: str) -> str | None:
    """What stopped the DFlashDeployment short of serving, as status says it (fails the wait at once)."""
    found = conditions(get("dfd", "-n", namespace, NAME))
    stalled = found.get("Stalled", {})
    return f"Stalled {stalled.get('reason')}: {stalled.get('message')}" if stalled.get("status") == "True" else None


def serving_pods(namespace: str) -> list[dict[str, Any]]:
    return list(get("pods", "-n", namespace, "-l", SELECTOR.format(NAME))["items"])


@pytest.mark.timeout(1200)
def test_the_built_image_passes_its_speculative_probe_and_answers(serving: str, hub: KindHub) -> None:
    obj = get("dfd", "-n", serving, NAME)
    assert obj["status"]["cache"]["phase"] == "Complete", obj["status"]["cache"]
    # The cache Job fetched exactly the commits the hub mirror published under the tag.
    assert obj["status"]["resolved"] == {"targetCommit": hub.commits[TARGET], "draftCommit": hub.commits[DRAFT]}
    [pod] = serving_pods(serving)
    container = pod["spec"]["containers"][0]
    assert container["image"] == vllm_image() and pod["spec"]["nodeName"] == "dflash-worker"
    # Ready came through the speculative probe (the image's dflash-probe), not a plain /health check.
    assert "dflash-probe" in " ".join(container["startupProbe"]["exec"]["command"])
    assert all(status["ready"] for status in pod["status"]["containerStatuses"])

    answer = complete_through_port_forward(kubectl_argv(), serving, NAME, max_tokens=8)
    assert answer["model"] == TARGET and answer["usage"]["completion_tokens"] == 8


@pytest.mark.timeout(600)
def test_helm_upgrade_rolls_the_operator_and_no_serving_pod(serving: str, tmp_path: Path) -> None:
    [before] = serving_pods(serving)
    operator_before = get(*OPERATOR)["metadata"]["generation"]
    ready_since = ready(serving)["lastTransitionTime"]  # type: ignore[index]
    changed = tmp_path / "changed-values.yaml"
    changed.write_text("operator:\n  logLevel: DEBUG\n")
    try:
        helm("upgrade", "dflash", str(REPO / "charts" / "dflash-operator"), "-n", "dflash-system", "--reuse-values",
             "-f", str(changed), "--wait", "--timeout", "300s")
        deploy = get(*OPERATOR)
        assert deploy["metadata"]["generation"] > operator_before
        env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "DEBUG" in env.values(), env
        wait_for(lambda: (status := get(*OPERATOR)["status"]).get("updatedReplicas") == 1
                 and status.get("availableReplicas") == 1 and not status.get("unavailableReplicas"),
                 "the upgraded operator available", timeout=180, interval=2)
        # The new operator's own pass over the DFlashDeployment it finds serving (its Ready gauge, read through the
        # API server's pod proxy), and the serving pod left alone.
        [operator] = [pod["metadata"]["name"] for pod in get(
            "pods", "-n", "dflash-system", "-l", "app.kubernetes.io/name=dflash-operator")["items"]
            if not pod["metadata"].get("deletionTimestamp")]
        ready_gauge = (f'dflash_deployment_condition{{dflashdeployment="{NAME}",namespace="{serving}",'
                       'reason="AllReplicasReady",status="True",type="Ready"} 1.0')
        wait_for(lambda: ready_gauge in kubectl(
            "get", "--raw", f"/api/v1/namespaces/dflash-system/pods/{operator}:9090/proxy/metrics").stdout,
            f"the new operator ({operator}) to report {NAME} Ready", timeout=120, interval=3)
        [after] = serving_pods(serving)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert [s["restartCount"] for s in after["status"]["containerStatuses"]] == \
            [s["restartCount"] for s in before["status"]["containerStatuses"]]
        assert ready(serving) and ready(serving)["lastTransitionTime"] == ready_since  # type: ignore[index]
    finally:
        helm("rollback", "dflash", "-n", "dflash-system", "--wait", "--timeout", "300s")
