"""The operator's liveness endpoint tells a wedged watch from an unreachable API server.

The operator reaches the real API server through a proxy that can wedge watch streams the way a dead load balancer
does (dflash_testkit.wedge). Wedged: the operator stops hearing about DFlashDeployments, and its liveness endpoint
fails once the stream has been silent past DFLASH_WATCH_SILENCE_SECONDS while the API server still answers, so the
kubelet would restart it. Healed: it hears again and liveness recovers. Unreachable (every request held): liveness
stays healthy and says why, since a restart would cure nothing. Timings go to the test's output.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes
import pytest

from dflash_testkit.controlplane import ControlPlane, free_port
from dflash_testkit.operator import running_operator
from dflash_testkit.waiting import wait_for
from dflash_testkit.wedge import wedging_proxy

pytestmark = pytest.mark.cluster

SILENCE_SECONDS = 90  # the chart's smallest watchSilenceSeconds


def liveness(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {}


def dfd(namespace: str, name: str) -> str:
    return json.dumps({"apiVersion": "serving.dflash.dev/v1alpha1", "kind": "DFlashDeployment",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {"target": {"repo": "org/target"}, "draft": {"repo": "org/draft"}}})


def test_liveness_fails_on_a_wedged_watch_recovers_when_healed_and_stays_up_when_the_api_server_is_unreachable(
        control_plane: ControlPlane, own_namespace: str, tmp_path: Path) -> None:
    namespace = own_namespace
    custom = kubernetes.client.CustomObjectsApi(kubernetes.config.new_client_from_config(str(control_plane.kubeconfig)))

    def status_of(name: str) -> dict:
        body = custom.get_namespaced_custom_object("serving.dflash.dev", "v1alpha1", namespace,
                                                   "dflashdeployments", name)
        return body.get("status") or {}

    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    log = control_plane.workdir / "logs" / "operator-wedge.log"
    settings = {"DFLASH_WATCH_SILENCE_SECONDS": str(SILENCE_SECONDS), "DFLASH_RESYNC_SECONDS": "2"}
    with wedging_proxy(control_plane) as proxy, \
            running_operator(proxy.kubeconfig(tmp_path / "kubeconfig"), log, settings, namespaces=(namespace,),
                             liveness_port=port):
        control_plane.kubectl("apply", "-f", "-", input=dfd(namespace, "before"))
        wait_for(lambda: status_of("before").get("conditions"), "the status of a DFlashDeployment made before", 60)
        # kopf keeps a probe's result for 10 s: the first answer may predate the streams.
        wait_for(lambda: liveness(url)[1].get("watches", {}).get("watchStreams", 0) >= 1,
                 "liveness counting the operator's watch streams", 30, interval=2)

        # Wedged: watches of DFlashDeployments in the namespace go silent; everything else still passes.
        wedged_at = time.monotonic()
        proxy.wedge(f"/apis/serving.dflash.dev/v1alpha1/namespaces/{namespace}/dflashdeployments")
        control_plane.kubectl("apply", "-f", "-", input=dfd(namespace, "during"))
        wait_for(lambda: liveness(url)[0] == 500, "liveness failing on the wedged watch",
                        SILENCE_SECONDS + 70 + 90, interval=2)
        failed_after = time.monotonic() - wedged_at
        assert status_of("during") == {}, "the operator heard of a DFlashDeployment through a wedged watch"
        assert any("dflashdeployments" in target and "watch=" in target for target in proxy.held), proxy.held
        logged = log.read_text(errors="replace")
        assert f"dflashdeployments.serving.dflash.dev in {namespace} heard nothing for" in logged, logged[-2000:]

        # Healed: the held connections are reset, kopf reopens the stream and the missed object is reconciled.
        healed_at = time.monotonic()
        proxy.heal()
        wait_for(lambda: status_of("during").get("conditions"), "the status of the DFlashDeployment made during", 120)
        wait_for(lambda: liveness(url)[0] == 200, "liveness healthy again", 60, interval=2)
        recovered_after = time.monotonic() - healed_at

        # Unreachable: every request is held, the probe's own question included; liveness stays up and says why.
        proxy.hold_everything()
        held_at, answers = time.monotonic(), []
        while time.monotonic() - held_at < SILENCE_SECONDS + 45:
            answers.append(liveness(url))
            time.sleep(5)
        codes = sorted({code for code, _ in answers})
        assert codes == [200], f"liveness answered {codes} while the API server was unreachable"
        assert "apiServer" in answers[-1][1]["watches"], answers[-1]
        proxy.heal()

    print(f"\nwedged watch: liveness failed after {failed_after:.0f} s (limit {SILENCE_SECONDS} s); healed: reconciled "
          f"and healthy after {recovered_after:.0f} s; unreachable API server: {len(answers)} probes over "
          f"{SILENCE_SECONDS + 45} s, all 200")
