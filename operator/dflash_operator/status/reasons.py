"""Every reason a DFlashDeployment's conditions (and the events that follow them) can carry: what it means and what
to do. The one home of that table: docs/troubleshooting.md is generated from it (`dflash-operator docs`), and a unit
test holds both this table and the code's reasons to it, so no reason ships undocumented.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    where: str  # the conditions (or "event") that carry it
    means: str
    action: str


R = Reason
REASONS: dict[str, Reason] = {
    # Before anything is created: the spec itself.
    "InvalidSpec": R("Ready, Stalled", "the spec does not parse (an older CRD admitted what this operator refuses)",
                     "fix the field the message names; `kubectl explain dfd.spec`"),
    "InvalidName": R("Ready, Stalled", "the name is not a valid Service name (DNS-1035), which the Service needs",
                     "use lower-case letters, digits and '-', starting with a letter"),
    "EnvCollides": R("Ready, Stalled", "spec.env sets a variable the operator sets itself",
                     "remove it from spec.env"),
    "EnvRepeated": R("Ready, Stalled", "spec.env sets one name twice", "give each name once"),
    "ExtraArgsCollide": R("Ready, Stalled", "spec.extraArgs sets a flag the operator renders from typed fields",
                          "use the typed field the message names"),
    "GpuInResources": R("Ready, Stalled", "spec.resources asks for the GPU resource, which tensorParallelSize sets",
                        "remove it; set spec.tensorParallelSize"),
    "InvalidBatchSchedule": R("Ready, Stalled", "spec.speculation.tokensByBatchSize cannot be rendered",
                              "fix the ranges as the message says"),
    "NeedsNewerVLLM": R("Ready, Stalled", "a field needs a newer vLLM than the image declares or the pair check found",
                        "use an image of the release the message names, or drop the field"),
    # Before anything is downloaded: can the cluster ever run it (reconcile.capacity, the dry run).
    "ChildRejected": R("Ready, Stalled", "the API server refuses the serving Deployment or another child (validation, "
                                         "admission, PodSecurity); nothing was downloaded",
                       "fix the pod settings the server's message names (tolerations, affinity, env, resources)"),
    "QuotaExceeded": R("Ready, Stalled; event", "a ResourceQuota can never admit one serving pod or the cache claim "
                                                "(as a Warning event only: the quota is full now, and the operator "
                                                "waits)",
                       "raise the quota the message names, or ask for fewer GPUs or less cache"),
    "StorageClassNotFound": R("Ready, Stalled", "the cache claim names a StorageClass that does not exist, or none "
                                                "and no class is the default",
                              "create the class, mark one as the default, or set spec.cache.storageClassName"),
    "NoNodeFits": R("Ready, Stalled; event", "no node could ever hold one serving pod (GPUs, nodeSelector, required "
                                             "affinity, taints); the message names the closest node and what it "
                                             "lacks (with an autoscaler: a Warning event only)",
                    "add such a node, fix the selector or tolerations, or set nodeCheck.autoscaling / the "
                    "serving.dflash.dev/node-autoscaling annotation if an autoscaler will add one"),
    "NodeCheckSkipped": R("event", "the operator does not watch Nodes (nodeCheck.enabled false, or no permission): "
                                   "whether a node fits is not checked before the download",
                          "enable nodeCheck.enabled in the chart if you want the check"),
    # The cache.
    "CacheNotReady": R("Ready", "the target and draft are being downloaded and verified",
                       "wait; status.cache shows the progress"),
    "Downloading": R("CacheReady, Reconciling, Stalled(False)", "the cache Job runs", "wait"),
    "WaitingForCache": R("ModelsCompatible", "the pair is checked once both models are cached", "wait"),
    "Cached": R("CacheReady", "both models are cached and verified", "nothing"),
    "CacheFailed": R("Ready, Stalled, CacheReady", "the download failed for good (no such repository or revision, a "
                                                   "verification error after retries)",
                     "fix spec.target / spec.draft as the message says; the cache Job's pod log has the detail"),
    "PairChecked": R("ModelsCompatible", "the draft fits the target", "nothing"),
    "IncompatiblePair": R("Ready, Stalled, ModelsCompatible", "the draft does not fit the target (the serving vLLM's "
                                                             "verdict where it judged); no GPU pod is created",
                          "use the draft made for this target and revision"),
    # The serving pods.
    "RollingOut": R("Ready, Reconciling", "pods of the current spec are being created", "wait"),
    "WaitingForSpeculativeProbe": R("Ready, Reconciling", "pods run but have not all passed the speculative probe",
                                    "wait; if it lasts, see SpeculationHealthy and the pods' Unhealthy events"),
    "Reconciling": R("Stalled(False)", "the spec is applied; waiting for the pods", "wait"),
    "AllReplicasReady": R("Ready, Reconciling(False)", "every wanted pod passed the probe", "nothing"),
    "ScaledToZero": R("Ready, Reconciling(False)", "spec.replicas is 0", "nothing"),
    "Reconciled": R("Stalled(False)", "the spec is applied", "nothing"),
    "Unschedulable": R("Ready, Reconciling", "the scheduler cannot place a serving or cache pod now (its message says "
                                             "why); it retries",
                       "free or add capacity; check nodeSelector, tolerations and GPU requests"),
    "ImagePullBackOff": R("Ready, Reconciling or Stalled", "the kubelet cannot pull an image (the cache Job's check "
                                                           "step runs spec.image, so a wrong image shows there "
                                                           "first); Stalled when the registry says it does not exist",
                          "fix spec.image (or the operator image), or add imagePullSecrets"),
    "CrashLoopBackOff": R("Ready, Reconciling or Stalled", "the vLLM container keeps exiting; the message carries "
                                                           "vLLM's own error line; Stalled after 3 restarts",
                          "fix what the line says (a flag in spec.extraArgs, memory, the model)"),
    "OOMKilled": R("Ready, Reconciling or Stalled", "the vLLM container exceeded its memory limit",
                   "raise spec.resources.limits.memory"),
    "ClaimPending": R("Ready, Reconciling", "the cache claim is not bound and its provisioner says why (its "
                                           "ProvisioningFailed event: e.g. an access mode the class cannot give, "
                                           "as kind's local-path refuses ReadWriteMany)",
                      "fix what the message says: spec.cache.accessMode or storageClassName, or the provisioner"),
    "ProbeFailing": R("Ready, Reconciling", "a serving pod runs and fails its startup or readiness probe (both are "
                                            "the speculative probe); the message carries the probe's own FAIL line "
                                            "(acceptance under spec.readiness.minAcceptanceRate, no completion), as "
                                            "the kubelet reported it",
                      "fix what the line says: a draft that does not fit the traffic or target, a floor set too "
                      "high, a server that does not answer; see also SpeculationHealthy"),
    "PodsRefused": R("Ready, Reconciling", "the API server refuses the serving pods (a quota full now, an admission "
                                           "webhook, PodSecurity): the Deployment's ReplicaFailure",
                     "free the quota or fix what the message names; the rollout goes on by itself after"),
    # Speculation on live traffic.
    "NoDraftTokensYet": R("SpeculationHealthy", "the window holds too few draft tokens to judge", "wait for traffic"),
    "AcceptanceAboveFloor": R("SpeculationHealthy", "the window's acceptance is at or above the floor", "nothing"),
    "AcceptanceBelowFloor": R("SpeculationHealthy", "the window's acceptance is under the floor",
                              "check the draft matches the target and the traffic; see docs/operations.md"),
    "FellBackToTarget": R("SpeculationHealthy", "Fallback is in force: the pods serve the target without the draft",
                          "fix the draft, then annotate serving.dflash.dev/resume-speculation"),
    "SpeculationTuned": R("event", "tuning Auto rolled the pods onto a new draft-length schedule (status.speculation"
                                   ".tuned), with the expected speedup before and after",
                          "nothing; set tuning to Recommend to keep the spec's own length"),
}


def troubleshooting_markdown() -> str:
    """docs/troubleshooting.md: the table above, for people."""
    lines = [
        "# Troubleshooting: every status reason",
        "",
        "Generated by `dflash-operator docs` from `dflash_operator/status/reasons.py`; do not edit by hand.",
        "`kubectl get dfd` shows Ready's reason in its REASON column (`-o wide`), `kubectl describe dfd` every",
        "condition, and each transition that needs attention is a Warning event on the DFlashDeployment.",
        "",
        "| reason | where | what it means | what to do |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{name}` | {r.where} | {r.means} | {r.action} |" for name, r in REASONS.items()]
    return "\n".join(lines) + "\n"
