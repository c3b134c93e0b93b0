"""Requests the API server served, by verb and resource, from its own apiserver_request_total counters: how the
scale benchmark and the fault tests count the operator's writes."""

from __future__ import annotations

import collections
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from dflash_testkit.controlplane import ControlPlane

# What the operator writes: its children and the DFlashDeployments' status.
OWN_RESOURCES = {"jobs", "persistentvolumeclaims", "deployments", "services", "poddisruptionbudgets",
                 "dflashdeployments"}


def request_counts(plane: ControlPlane) -> collections.Counter:
    text = plane.kubectl("get", "--raw", "/metrics").stdout
    counts: collections.Counter = collections.Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource", "") + ("/" + labels["subresource"] if labels.get("subresource") else "")
            if labels.get("dry_run"):  # "All" for a dry run: validated and admitted, never stored
                resource += " (dry run)"
            counts[(labels.get("verb", ""), resource)] += int(sample.value)
    return counts


def delta(after: collections.Counter, before: collections.Counter) -> dict[str, int]:
    """'VERB resource' -> requests between the two readings, for the operator's own resources."""
    out = {}
    for (verb, resource), value in after.items():
        diff = int(value - before.get((verb, resource), 0))
        if diff and resource.split("/")[0].split(" ")[0] in OWN_RESOURCES:
            out[f"{verb} {resource}"] = diff
    return dict(sorted(out.items()))


# The operator's POSTs: cache objects created while absent, and the serving Deployment's pre-download dry run
# (dflash_operator.reconcile.CREATED_ONCE). No controller of the control plane creates these, nor do the tests.
OPERATOR_POSTS = {"POST jobs", "POST persistentvolumeclaims", "POST deployments (dry run)"}


def operator_writes(counts: dict[str, int]) -> int:
    """The operator's writes among `counts`: server-side applies (dry runs included), its POSTs (OPERATOR_POSTS)
    and status merge patches; the controllers' status updates (PUT) and the tests' own creates are not its."""
    return sum(n for key, n in counts.items()
               if key.startswith("APPLY ") or key in OPERATOR_POSTS or key == "PATCH dflashdeployments/status")


def sample_sum(metrics_url: str, sample_name: str) -> float:
    """The sum of a sample's values over its label sets, from a Prometheus text endpoint (the operator's own
    counters: what it alone did, where the API server counts every client)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == sample_name)
