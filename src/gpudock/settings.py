"""Typed settings (`GPUDOCK_*` environment variables; CLI flags override).

Built by the app factory or the CLI, never at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_IMAGE = "gpudock/base:bookworm"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUDOCK_", extra="ignore")

    # -- where things live ------------------------------------------------
    data_dir: Path = Field(
        default=Path.home() / ".local/share/gpudock",
        description="Directory for the SQLite database, the admin token and keys.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; default is SQLite in the data dir. "
        "PostgreSQL: postgresql+psycopg://user:pass@host/db",
    )

    # -- HTTP -------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)

    # -- GPUs -------------------------------------------------------------
    simulate: str | None = Field(
        default=None,
        description="Simulated fleet, e.g. '2x8xA100-80GB,1x4xRTX4090-24GB' "
        "(hosts x GPUs x model). Without it, GPUs are discovered through NVML.",
    )

    # -- runtime ----------------------------------------------------------
    runtime: str = Field(default="docker", pattern="^(docker|fake)$")
    docker_host: str | None = Field(
        default=None, description="Docker Engine URL; default is the local socket."
    )
    default_image: str = DEFAULT_IMAGE
    image_pull: str = Field(
        default="missing",
        pattern="^(missing|never)$",
        description="'missing': pull images the engine lacks; 'never': use local images only.",
    )
    pids_limit: int = Field(default=4096, ge=64)
    stop_timeout_s: int = Field(default=5, ge=0, le=300)
    runtime_call_timeout_s: float = Field(default=120.0, gt=0)

    # -- reconciler -------------------------------------------------------
    reconcile_interval_s: float = Field(default=2.0, gt=0)
    lease_s: float = Field(default=60.0, gt=0)
    reconcile_workers: int = Field(default=8, ge=1, le=64)
    health_check_interval_s: float = Field(default=10.0, gt=0)

    # -- instance sizing --------------------------------------------------
    no_gpu_cpu: float = Field(default=1.0, gt=0)
    no_gpu_memory_gb: int = Field(default=4, gt=0)
    default_disk_gb: int = Field(default=50, gt=0)
    max_disk_gb: int = Field(default=10_000, gt=0)

    # -- test-only: named points at which the server SIGKILLs itself -------
    crash_points: str = Field(
        default="",
        description="Comma-separated crash points (tests only); empty in production.",
    )

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'gpudock.db'}"

    @property
    def crash_point_set(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.crash_points.split(",") if p.strip())
