"""Everything one DFlashDeployment should own, in apply order: what reconcile applies and `render` prints."""

from __future__ import annotations

from typing import Any

from dflash_operator.api import DFlashDeployment
from dflash_operator.render.cache import CacheConfig, render_cache_job, render_cache_pvc
from dflash_operator.render.serving import CacheFacts, RenderConfig, serving_objects


def desired_objects(dfd: DFlashDeployment, config: RenderConfig, cache_config: CacheConfig,
                    cache: CacheFacts | None, speculate: bool = True) -> list[dict[str, Any]]:
    """The cache objects always; the serving objects once the cache is verified and the pair fits (`cache` given).

    `speculate` False renders the serving pods without the draft (a Fallback in force). Assumes a spec without
    problems (validation.spec_problems); renders, never raises."""
    objects = [render_cache_pvc(dfd), render_cache_job(dfd, cache_config)]
    if cache is not None:
        objects += serving_objects(dfd, config, cache, speculate)
    return objects
