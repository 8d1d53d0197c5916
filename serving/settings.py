"""Service settings, read from ``FLEETMIND_*`` environment variables (pydantic-settings).

Every field below maps to ``FLEETMIND_<FIELD>`` (case-insensitive), e.g. ``FLEETMIND_DATABASE_URL``.
Routes receive the settings through the cached :func:`get_settings` dependency, which tests replace
with ``app.dependency_overrides[get_settings]``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of the FleetMind service (see ``docs/serving.md`` for the table)."""

    model_config = SettingsConfigDict(env_prefix="FLEETMIND_", extra="ignore")

    database_url: str = Field(
        "sqlite:///fleetmind.db",
        description="SQLAlchemy URL: a SQLite file (WAL mode) or postgresql+psycopg://user@host/db",
    )
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = Field(
        "FULL",
        description="SQLite PRAGMA synchronous; FULL fsyncs every commit (durable on power loss)",
    )
    graph: str | None = Field(
        None, description="dependency graph JSON file; the committed example graph when unset"
    )
    api_token: str | None = Field(
        None, description="when set, every /api/v1 route needs 'Authorization: Bearer <token>'"
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="largest request body accepted; the default holds a webhook of 10,000 "
        "Alertmanager alerts of about 1.5 KB (labels, annotations, generatorURL)",
    )
    telemetry: Literal["sim", "nvml", "prometheus"] = Field("sim", description="telemetry source")
    prometheus_url: str = Field(
        "http://127.0.0.1:9400/metrics",
        description="DCGM-exporter /metrics URL (telemetry=prometheus)",
    )
    telemetry_cluster: str = Field(
        "local", description="cluster name for GPUs whose telemetry carries no 'cluster' label"
    )
    telemetry_timeout_s: float = Field(
        2.0, gt=0, description="scrape timeout of the prometheus source"
    )
    telemetry_ttl_s: float = Field(5.0, ge=0, description="how long a telemetry snapshot is reused")
    rca_model: str | None = Field(
        None,
        description="RCA model: a local artifact path, an MLflow URI (models:/fleetmind-rca@champion), "
        "'baseline:<name>' for a baseline, or unset for the released artifact in models/rca/",
    )
    placement_model: str | None = Field(
        None,
        description="placement model: a local path, an MLflow URI, 'heuristic:<name>', or unset for "
        "the released artifact in models/placement/",
    )
    incident_window_s: float = Field(
        600.0, gt=0, description="alerts this close in time (s) may join the same incident"
    )
    incident_hops: int = Field(
        2,
        ge=0,
        le=10,
        description="alerts whose nodes are within this many graph hops group together",
    )
    incident_worker: bool = Field(
        True, description="let this process compete for the incident worker (leader lock)"
    )
    incident_rank_interval_s: float = Field(
        2.0, ge=0, description="an incident is re-ranked at most this often during a storm (s)"
    )
    rca_top_k: int = Field(5, ge=1, le=1000, description="ranked causes kept per incident")
    rca_max_batch: int = Field(
        16, ge=1, le=1024, description="most concurrent RCA requests ranked in one batch"
    )
    rca_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="ranking processes for POST /api/v1/rca (0: rank in the server process); "
        "requests wait in one queue and a free process takes the next ones; about one per core",
    )
    rca_process_max_batch: int = Field(
        4,
        ge=1,
        le=1024,
        description="most RCA requests a ranking process takes from the queue for one batch; "
        "smaller than rca_max_batch: a request waits for the whole batch it is in, so big "
        "batches lengthen the latency tail more than they save (4 since 2026-11-30: in its "
        "pre-registered series, 4 had a lower median p99 than 2, with and without keep-warm)",
    )
    rca_process_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="niceness added to the RCA ranking processes, so that the server process "
        "(HTTP, ingestion, incident worker) is scheduled before them when the CPUs are busy",
    )
    keep_warm_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="keep the CPUs busy at idle priority (one SCHED_IDLE busy loop per CPU) until "
        "this many seconds after the last request, so that a VM's vCPUs do not halt between "
        "requests (0: off; Linux only; see docs/serving.md, Scaling)",
    )
    gc_gen0_threshold: int | None = Field(
        100_000,
        ge=1,
        description="Python GC generation-0 threshold while serving (unset: Python's 700); "
        "startup objects are also frozen out of collections",
    )
    malloc_mmap_threshold_mb: int | None = Field(
        32,
        ge=0,
        le=1024,
        description="glibc malloc: allocations below this many MiB come from the heap, and up to "
        "twice as much freed memory is kept for reuse instead of being returned to the OS "
        "(0: glibc's adaptive defaults, which map and unmap the GAT's per-request tensors)",
    )
    torch_threads: int | None = Field(
        1,
        ge=1,
        description="torch intra-op threads per process (1 suits one worker per core; unset: torch's default)",
    )


@lru_cache
def get_settings() -> Settings:
    """Return the process-wide settings (read once from the environment)."""
    return Settings()
