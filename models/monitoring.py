"""`vllm-fleet:monitoring`: the thresholds of the alert and recording rules generated for the stack
(render/monitoring.py). Every field has a default that suits a production fleet; a stack sets only what
differs (the end-to-end test sets seconds, so an alert fires while it waits)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from models.base import ConfigModel
from models.types import Float, Int

Seconds = Annotated[Int, Field(ge=1, le=86400)]


class Monitoring(ConfigModel):
    down_for_seconds: Seconds = Field(
        300,
        description="VllmFleetDeploymentDown: the front door's /metrics of the deployment did not answer (engine "
        "stopped, loading, crashed, host gone) for this long.",
    )
    stuck_for_seconds: Seconds = Field(
        600,
        description="VllmFleetNoSuccessfulRequests: requests reached the engine in the window but none succeeded, "
        "this long.",
    )
    waiting_requests: Annotated[
        Int,
        Field(ge=1, le=100000, description="VllmFleetRequestsWaiting: more than this many requests queued, this long."),
    ] = 16
    waiting_for_seconds: Seconds = Field(
        600, description="how long requests must wait above `waitingRequests` before the alert fires"
    )
    kv_cache_fraction: Annotated[
        Float,
        Field(
            gt=0,
            le=1,
            description="VllmFleetKvCacheNearlyFull: the KV cache's use (0-1) above this fraction, this long.",
        ),
    ] = 0.95
    kv_cache_for_seconds: Seconds = Field(
        900, description="how long the KV cache must stay above `kvCacheFraction` before the alert fires"
    )
    drift_for_seconds: Seconds = Field(
        120,
        description="VllmFleetModelDrift: the engine behind the front door serves a name other than the stack's, "
        "this long.",
    )
    rate_window_seconds: Annotated[
        Int,
        Field(
            ge=10,
            le=3600,
            description="The window of the rates and percentiles of the recording rules and the alerts (a few "
            "scrapes at least).",
        ),
    ] = 300
    scrape_interval_seconds: Annotated[
        Int, Field(ge=1, le=600, description="How often the generated scrape job reads each deployment's /metrics.")
    ] = 30
