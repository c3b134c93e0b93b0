"""The operator's configuration: one frozen object, built once from the environment and the command line.

Every setting is documented in the chart's values.yaml, which sets the environment variables below.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from dflash_operator.api.models import HUB_ENDPOINT_PATTERN
from dflash_operator.render.cache import CacheConfig
from dflash_operator.render.serving import RenderConfig
from dflash_operator.speculation.recommendation import parse_cost_model
from dflash_operator.speculation.tuner import CostModel

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class OperatorConfig:
    render: RenderConfig = field(default_factory=RenderConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    # Seconds between resync passes: drift repair and reading speculation metrics (chart: operator.resyncSeconds).
    resync_seconds: float = 30.0
    metrics_timeout_seconds: float = 2.0
    # The fewest draft tokens a window must hold before its acceptance decides anything (SpeculationHealthy,
    # Fallback): a handful of probe completions is too small a sample (chart: speculation.minDraftTokens).
    speculation_min_draft_tokens: int = 200
    # Pod addresses the operator may dial for /metrics; empty allows every pod address. Tests allow only loopback.
    metrics_allowed_networks: tuple[Network, ...] = ()
    # The operator's own Prometheus endpoint; port 0 turns it off (chart: metrics.port).
    metrics_port: int = 0
    metrics_address: str = "0.0.0.0"
    log_level: str = "INFO"
    # Empty: the whole cluster. Otherwise only these namespaces: exact names or kopf patterns (runtime.scope).
    namespaces: tuple[str, ...] = ()
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    # Liveness fails once a watch stream has heard nothing (no object, no bookmark, no answer to a reopening) for this
    # long while the API server answers (runtime.watch_health). kopf reopens a silent stream after 70 s, so
    # 300 s is several unanswered reopenings (chart: operator.watchSilenceSeconds).
    watch_silence_seconds: float = 300.0
    # Whether the operator watches Nodes to tell, before any download, that no node could ever hold a serving pod
    # (chart: nodeCheck.enabled, which also grants the permission). Off, or without the permission, the check is
    # skipped and each DFlashDeployment's event says so.
    node_check: bool = True
    # A cluster autoscaler may add the node that fits: NoNodeFits then warns and waits instead of stalling
    # (chart: nodeCheck.autoscaling; one DFlashDeployment: the annotation serving.dflash.dev/node-autoscaling).
    node_autoscaling: bool = False
    # The draft-length recommendation's default cost model (chart: operator.costModel). None: the one shipped for
    # each DFlashDeployment's serving vLLM release (speculation.recommendation.shipped_cost_model_for). A
    # DFlashDeployment may bring its own.
    cost_model: CostModel | None = None


class ConfigError(ValueError):
    """A setting the operator cannot start with; the message names the variable."""


def parse_networks(text: str) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(part.strip()) for part in text.split(",") if part.strip())


def _number(environ: Mapping[str, str], name: str, default: float, kind: type = float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a {kind.__name__}") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def _flag(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (environ.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw not in ("true", "false"):
        raise ConfigError(f"{name}={environ[name]!r} is not true or false")
    return raw == "true"


def from_environment(environ: Mapping[str, str], *, namespaces: tuple[str, ...] = (),
                     liveness_endpoint: str | None = None) -> OperatorConfig:
    """The configuration from DFLASH_* variables (set by the chart) and the command line's options."""
    try:
        networks = parse_networks(environ.get("DFLASH_METRICS_ALLOWED_NETWORKS", ""))
    except ValueError as error:
        raise ConfigError(f"DFLASH_METRICS_ALLOWED_NETWORKS: {error}") from None
    hub = environ.get("DFLASH_HUB_ENDPOINT") or None
    if hub is not None and not re.fullmatch(HUB_ENDPOINT_PATTERN, hub):
        raise ConfigError(f"DFLASH_HUB_ENDPOINT={hub!r} is not an http(s) URL without query or credentials")
    resync = _number(environ, "DFLASH_RESYNC_SECONDS", 30.0)
    if resync == 0:
        raise ConfigError("DFLASH_RESYNC_SECONDS must be positive")
    silence = _number(environ, "DFLASH_WATCH_SILENCE_SECONDS", OperatorConfig.watch_silence_seconds)
    if silence == 0:
        raise ConfigError("DFLASH_WATCH_SILENCE_SECONDS must be positive")
    defaults = OperatorConfig()
    cost_model = defaults.cost_model
    if environ.get("DFLASH_COST_MODEL"):
        try:
            cost_model = parse_cost_model(environ["DFLASH_COST_MODEL"])
        except ValueError as error:
            raise ConfigError(f"DFLASH_COST_MODEL: {error}") from None
    return OperatorConfig(
        cache=CacheConfig(image=environ.get("DFLASH_OPERATOR_IMAGE") or CacheConfig().image, hub_endpoint=hub),
        resync_seconds=resync,
        metrics_timeout_seconds=_number(environ, "DFLASH_METRICS_TIMEOUT_SECONDS", 2.0),
        speculation_min_draft_tokens=int(_number(environ, "DFLASH_SPECULATION_MIN_DRAFT_TOKENS",
                                                 defaults.speculation_min_draft_tokens, int)),
        metrics_allowed_networks=networks,
        metrics_port=int(_number(environ, "DFLASH_METRICS_PORT", 0, int)),
        metrics_address=environ.get("DFLASH_METRICS_ADDRESS") or defaults.metrics_address,
        log_level=(environ.get("DFLASH_LOG_LEVEL") or defaults.log_level).upper(),
        namespaces=namespaces,
        liveness_endpoint=liveness_endpoint or defaults.liveness_endpoint,
        watch_silence_seconds=silence,
        node_check=_flag(environ, "DFLASH_NODE_CHECK", defaults.node_check),
        node_autoscaling=_flag(environ, "DFLASH_NODE_AUTOSCALING", defaults.node_autoscaling),
        cost_model=cost_model,
    )
