"""Typed settings (`GPUDOCK_*` environment variables; CLI flags override).

Built by the app factory or the CLI, never at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from limits import parse_many
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpudock.scheduler.names import DEFAULT_POLICY, POLICY_NAMES, unknown_policy

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
    access_log: bool = Field(
        default=False,
        description="Log a line per HTTP request (uvicorn's access log); off by default, "
        "it costs a few per cent of the server's CPU under load.",
    )
    http_keep_alive_s: int = Field(
        default=75,
        ge=1,
        description="How long an idle HTTP connection stays open for the client's next "
        "request. Longer than clients keep theirs (httpx: 5 s; load balancers: 60 s), so "
        "that the client, not the server, closes an idle one: a server that closes as the "
        "client sends makes the client see a reset.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="warning",
        description="The server's own log (stderr): 'info' adds what the reconciler does "
        "step by step (placements, moves and how much each copy sent, resumes).",
    )
    token_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long a server reuses an API token's row and its user, read once, "
        "before it reads them again. A revoke, disable or delete made through this server "
        "takes effect on it at once; made through another server on the same database, "
        "within this many seconds. 0: read them on every request.",
    )

    # -- GPUs -------------------------------------------------------------
    simulate: str | None = Field(
        default=None,
        description="Simulated fleet, e.g. '2x8xA100-80GB,1x4xRTX4090-24GB' "
        "(hosts x GPUs x model). Without it, GPUs are discovered through NVML.",
    )

    # -- runtime ----------------------------------------------------------
    runtime: str = Field(
        default="docker",
        pattern="^(docker|fake|kubernetes)$",
        description="'kubernetes': one cluster is the backend, its GPU nodes the hosts "
        "(docs/kubernetes.md).",
    )
    kubeconfig: Path | None = Field(
        default=None,
        description="The cluster's kubeconfig (runtime 'kubernetes'); unset: the service "
        "account of the pod gpudock runs in.",
    )
    kubernetes_context: str | None = None
    kubernetes_storage_class: str | None = Field(
        default=None, description="Data volumes' storage class; unset: the cluster's default."
    )
    kubernetes_gpu_resource: str = "nvidia.com/gpu"
    kubernetes_hami: bool = Field(
        default=False,
        description="HAMi is installed: a share asks for nvidia.com/gpumem and gpucores.",
    )
    kubernetes_shared_storage: bool = Field(
        default=False,
        description="The storage class's volumes attach on any node (network storage): "
        "a move to another node takes the same claim along instead of copying it.",
    )
    kubernetes_home: bool = Field(
        default=False,
        description="Keep /root across stops: new claims hold the home directory beside "
        "the data (/root/data), seeded from the image's /root at the first start.",
    )
    kubernetes_start_timeout_s: float = Field(
        default=300.0, gt=0, description="How long a start waits for its pod to run."
    )
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
    volume_quota: str = Field(
        default="loop",
        pattern="^(loop|off)$",
        description="'loop': each data volume is an ext4 file system of the instance's "
        "disk size, loop-mounted on the Docker host (needs root there and a local engine); "
        "'off': volumes share the host's disk without a limit.",
    )
    volume_pool_size: int = Field(
        default=2,
        ge=0,
        le=32,
        description="Size-limited data volume images kept formatted and ready, for each "
        "disk size in use (the default disk size and the three last asked for), so that a "
        "start does not wait for mkfs; made in the background, deleted at start-up. "
        "Each costs a few MB of the volume directory's disk. 0: format each on demand.",
    )
    host_firewall: bool = Field(
        default=True,
        description="Drop new connections from tenant networks to the Docker host itself "
        "(iptables on a local engine; a remote engine's host needs the rule by hand).",
    )
    volume_dir: Path | None = Field(
        default=None,
        description="Where size-limited data volumes live on the Docker host "
        "(default: <data_dir>/volumes).",
    )
    volume_copy_timeout_s: float = Field(
        default=24 * 3600.0,
        gt=0,
        description="A data volume's copy to another host (a move) running longer is "
        "stopped; the next try resumes it. Raise it for volumes of many TB on slow disks.",
    )

    # -- GPU shares --------------------------------------------------------
    share_hook_library: Path | None = Field(
        default=None,
        description="HAMi-core's libvgpu.so on the Docker host: copied into every share's "
        "container and into its /etc/ld.so.preload, so every process there, SSH sessions "
        "included, is held to CUDA_DEVICE_MEMORY_LIMIT / CUDA_DEVICE_SM_LIMIT.",
    )
    share_enforce: Literal["off", "warn", "stop"] = Field(
        default="warn",
        description="The share watchdog, which reads each GPU process's memory from NVML: "
        "'warn' records an event on a share whose processes hold more GPU memory than its "
        "limit, 'stop' also stops it (container and data kept, never deleted), 'off' does "
        "not look.",
    )
    share_watch_interval_s: float = Field(
        default=10.0, gt=0, description="How often the share watchdog reads GPU memory."
    )

    # -- monitoring ------------------------------------------------------------
    metrics_interval_s: float = Field(
        default=10.0,
        ge=1,
        le=3600,
        description="How often each running instance's CPU, memory, disk, network and GPU "
        "figures are sampled (kept raw a day, as minute averages 30 days, hourly after).",
    )
    metrics_disk_interval_s: float = Field(
        default=120.0,
        gt=0,
        description="How often the samples measure disk use (the system disk's costs a "
        "walk of the container's layer); samples between repeat the last figure.",
    )
    metrics_workers: int = Field(
        default=4, ge=1, le=64, description="Containers read at once by the sampler."
    )
    metrics_hour_retention_days: int = Field(
        default=400,
        ge=31,
        description="Hourly averages older than this are deleted (the table stays bounded).",
    )
    metrics_bind: str | None = Field(
        default=None,
        pattern=r"^[^\s:]+:\d{1,5}$",
        description="HOST:PORT of a separate listener serving Prometheus' /metrics without "
        "a token (bind it where only the scraper reaches). Without it /metrics is served on "
        "the API port to an admin token only.",
    )

    # -- image builds -------------------------------------------------------
    build_cpus: float = Field(
        default=2.0, gt=0, description="CPUs each build step may use (capped at the engine's)."
    )
    build_memory_gb: int = Field(
        default=4, gt=0, description="Memory (no swap) each build step may use."
    )
    build_timeout_s: float = Field(
        default=3600.0, gt=0, description="A build running longer is stopped."
    )
    build_context_max_mb: int = Field(
        default=512, gt=0, le=64 * 1024, description="Largest build context accepted."
    )

    # -- reconciler -------------------------------------------------------
    reconcile_interval_s: float = Field(default=2.0, gt=0)
    lease_s: float = Field(default=60.0, gt=0)
    reconcile_workers: int = Field(default=8, ge=1, le=64)
    slow_step_s: float = Field(
        default=60.0,
        gt=0,
        description="A lifecycle step running longer than this is logged with its stack.",
    )
    queue_overtake_limit_s: float = Field(
        default=3600.0,
        ge=0,
        description="How long later, smaller requests may overtake a waiting one; after "
        "that it holds the host closest to fitting it until it runs.",
    )
    eviction_avoid_s: float = Field(
        default=600.0,
        ge=0,
        description="An instance whose container the platform ended (a Kubernetes eviction) "
        "moves to another host; the host that ended it takes it again only after this long.",
    )
    placement_policy: str = Field(
        default=DEFAULT_POLICY,
        description="How the placement pass chooses hosts and GPUs: one of "
        + ", ".join(POLICY_NAMES)
        + " (docs/scheduler.md).",
    )
    health_check_interval_s: float = Field(default=10.0, gt=0)

    # -- GPU health and migration ---------------------------------
    inventory_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="How often to read the hosts again where they come and go (a Kubernetes "
        "cluster's nodes): a new node is placed on, a cordoned one no longer.",
    )
    gpu_health_interval_s: float = Field(
        default=2.0, gt=0, description="How often to poll the GPUs' health (NVML events)."
    )
    migration_stop_timeout_s: int = Field(
        default=1,
        ge=0,
        le=60,
        description="Grace before SIGKILL when moving off a failed GPU (its CUDA work is lost).",
    )
    host_lost_after_s: float = Field(
        default=60.0,
        gt=0,
        description="A host unheard this long is lost: an agent host without a heartbeat "
        "(its instances stop being billed at the last one), the local runtime unreachable; "
        "its GPUs become unhealthy.",
    )

    # -- instance sizing --------------------------------------------------
    no_gpu_cpu: float = Field(default=1.0, gt=0)
    no_gpu_memory_gb: int = Field(default=4, gt=0)
    default_disk_gb: int = Field(default=50, gt=0)
    max_disk_gb: int = Field(default=10_000, gt=0)
    system_disk_gb: int = Field(
        default=30,
        gt=0,
        description="Default size of an instance's system disk (its image "
        "plus what is written outside /root/data), as AutoDL's 30 GB.",
    )
    max_system_disk_gb: int = Field(default=1000, gt=0)
    system_disk_enforce: str = Field(
        default="auto",
        pattern="^(auto|watchdog)$",
        description="'auto': the engine's own limit (overlay2 size= on XFS with pquota) "
        "where it has one, else the watchdog; 'watchdog': measure the writable layer, "
        "warn at 90 % and stop (never delete) an instance over its size.",
    )
    system_disk_check_interval_s: float = Field(
        default=120.0, gt=0, description="How often the watchdog measures system disks."
    )

    # -- web console ---------------------------------------------
    session_cookie_secure: bool = Field(
        default=False,
        description="Mark the console's cookies Secure (set it when served over HTTPS).",
    )
    session_ttl_h: float = Field(
        default=12.0, gt=0, le=24 * 30, description="How long a console login lasts (hours)."
    )

    # -- service URLs (the HTTP proxy into instances) -------------
    service_domain: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$",
        description="Serve each published port at http(s)://<service>-<instance id>.<domain>/ "
        "(needs wildcard DNS for *.<domain> pointing here); unset: at /i/<instance>/<service>/.",
    )
    service_idle_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="A proxied connection on which nothing has moved for this long is closed "
        "(WebSocket ends are pinged, so a live one never idles); active streams are never cut.",
    )
    service_auth_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How long the proxy trusts one credential check (a revoked link or a "
        "logged-out session stops working within this many seconds).",
    )

    # -- SSH gateway ----------------------------------------------
    ssh_enabled: bool = Field(
        default=True, description="Run the SSH gateway inside `gpudock server`."
    )
    ssh_host: str = Field(default="127.0.0.1", description="Address the SSH gateway listens on.")
    ssh_port: int = Field(
        default=2222, ge=0, le=65535, description="SSH gateway port (0: any free port)."
    )
    ssh_public_host: str | None = Field(
        default=None,
        description="Host name printed in ssh commands; default: ssh_host "
        "(or this machine's name when ssh_host is a wildcard address).",
    )
    ssh_keepalive_interval_s: float = Field(
        default=30.0, gt=0, description="Keepalive probe interval on idle SSH connections."
    )
    ssh_keepalive_count_max: int = Field(
        default=3, ge=1, description="Unanswered keepalives before a connection is dropped."
    )
    ssh_login_timeout_s: float = Field(
        default=30.0, gt=0, description="Time a client has to authenticate."
    )
    ssh_unverified_keys: Literal["allow", "refuse"] = Field(
        default="allow",
        description="Keys registered before adding one needed a proof of possession: "
        "'allow' lets them log in (their owners are told to prove them), 'refuse' ends that.",
    )

    # -- agents on other hosts, and the link they dial -----------
    agent_link_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port the agents of other hosts dial (0: any free port); unset: this "
        "server takes no agents and drives only its own engine.",
    )
    agent_link_host: str = Field(
        default="127.0.0.1", description="Address the agent link listens on."
    )
    agent_link_public_address: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$",
        description="HOST:PORT agents dial, printed in join commands; default: the link's "
        "host and port.",
    )
    agent_join_token_ttl_s: float = Field(
        default=3600.0, gt=0, description="How long a `gpudock hosts add` join token is good."
    )
    agent_heartbeat_s: float = Field(
        default=5.0, gt=0, le=300, description="How often agents report (told at each hello)."
    )
    agent_link_timeout_s: float = Field(
        default=15.0,
        gt=0,
        description="Time a new link has to authenticate and say hello; also the keepalive "
        "interval, three of which unanswered drop the link.",
    )
    agent_lease_s: float | None = Field(
        default=None,
        gt=0,
        description="How long an agent keeps its tenants running without hearing this "
        "server (renewed by every acknowledged heartbeat); then it stops them itself. "
        "Default: GPUDOCK_HOST_LOST_AFTER_S, when the server stops billing them.",
    )

    # -- rate limits: "N/second;M/minute" (the `limits` notation) --
    rate_limits_enabled: bool = Field(
        default=True, description="Answer 429 (API) or close the connection (SSH) past a limit."
    )
    rate_limit_api_token: str = Field(
        default="100/second;3000/minute",
        description="REST API requests per bearer token (counted whether or not it is valid).",
    )
    rate_limit_api_address: str = Field(
        default="300/second;9000/minute",
        description="REST API requests per client address, all tokens together.",
    )
    rate_limit_login_address: str = Field(
        default="20/minute;200/hour",
        description="Web console login attempts (POST /login) per client address.",
    )
    rate_limit_service_address: str = Field(
        default="300/second;9000/minute",
        description="Requests to service URLs (the proxy into instances) per client address.",
    )
    rate_limit_ssh_address: str = Field(
        default="30/minute;600/hour",
        description="SSH connections that begin authentication, per client address.",
    )
    rate_limit_ssh_key: str = Field(
        default="60/minute",
        description="SSH public-key authentication attempts per key fingerprint.",
    )
    rate_limit_terminal_address: str = Field(
        default="30/minute;600/hour",
        description="Console terminal WebSocket connections (new or reconnecting) per "
        "client address.",
    )
    terminal_reattach_grace_s: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="A console terminal whose browser went away keeps its shell this long, "
        "for the page to reconnect to it; then the shell gets SIGHUP.",
    )

    # -- test-only: named points at which the server SIGKILLs itself -------
    crash_points: str = Field(
        default="",
        description="Comma-separated crash points (tests only); empty in production.",
    )

    # -- billing ------------------------------------------------
    currency: str = Field(
        default="CNY",
        pattern="^[A-Z]{3}$",
        description="ISO 4217 code shown next to amounts; amounts are integer micro-units.",
    )
    billing_min_balance_seconds: int = Field(
        default=3600,
        ge=0,
        description="Create and start need a balance covering this many seconds at the "
        "instance's price (checked again at placement). Free (unpriced) requests skip it.",
    )
    billing_charge_period_s: int = Field(
        default=60, ge=1, le=3600, description="Running instances are charged per whole period."
    )
    billing_storage_period_s: int = Field(
        default=3600, ge=1, le=86_400, description="Stopped disks are charged per whole period."
    )
    billing_tick_s: float = Field(
        default=5.0, gt=0, description="How often the reconciler runs the charging pass."
    )
    billing_low_balance_warn_s: int = Field(
        default=600,
        ge=0,
        description="Warn (an instance event) when the balance lasts less than this many "
        "seconds at the current burn rate.",
    )

    # -- auto-stop ----------------------------------------------------
    auto_stop_interval_s: float = Field(
        default=30.0, gt=0, description="How often the auto-stop pass looks at idle and due stops."
    )
    idle_warning_s: int = Field(
        default=600,
        ge=0,
        description="Tell the owner this long before an idle stop (an instance idle for less "
        "than this is warned as soon as it is idle).",
    )
    idle_below_pct: float = Field(
        default=5.0,
        ge=0,
        le=100,
        description="Default utilisation under which every GPU of an instance counts as idle.",
    )

    # -- notifications -------------------------------------------------
    notify_interval_s: float = Field(
        default=5.0, gt=0, description="How often the delivery thread sends what is due."
    )
    notify_timeout_s: float = Field(
        default=10.0, gt=0, le=120, description="A webhook or SMTP exchange taking longer fails."
    )
    notify_retry_base_s: float = Field(
        default=30.0,
        gt=0,
        description="Wait before the first retry of a failed delivery; it doubles each time "
        "(at most an hour).",
    )
    webhook_private_targets: bool = Field(
        default=False,
        description="Let webhooks reach loopback, private and link-local addresses (the "
        "server's own network: off, so a user's webhook cannot probe it).",
    )
    notify_max_attempts: int = Field(
        default=8, ge=1, le=50, description="A delivery still failing after this many is dropped."
    )
    notify_queue_wait_s: float = Field(
        default=60.0,
        ge=0,
        description="An instance that waited this long for GPUs tells its owner when it runs.",
    )
    smtp_host: str | None = Field(
        default=None, description="SMTP server for email notifications; unset: no email."
    )
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_starttls: bool = Field(
        default=True, description="Upgrade the SMTP connection with STARTTLS before sending."
    )
    smtp_username: str | None = Field(default=None, description="SMTP login, if it needs one.")
    smtp_password: SecretStr | None = None
    smtp_from: str = Field(
        default="gpudock@localhost", description="The From address of notification emails."
    )

    @field_validator(
        "rate_limit_api_token",
        "rate_limit_api_address",
        "rate_limit_login_address",
        "rate_limit_service_address",
        "rate_limit_ssh_address",
        "rate_limit_ssh_key",
        "rate_limit_terminal_address",
    )
    @classmethod
    def _rate_limit(cls, value: str) -> str:
        try:
            items = parse_many(value)
        except ValueError:
            items = []
        if not items or any(item.amount < 1 for item in items):
            raise ValueError(f"{value!r} is not a rate limit such as '10/second;300/minute'")
        return value

    @field_validator("placement_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(unknown_policy(value))
        return value

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @model_validator(mode="after")
    def _quota_needs_a_local_engine(self) -> Settings:
        remote = self.docker_host and not self.docker_host.startswith("unix://")
        if self.runtime == "docker" and self.volume_quota == "loop" and remote:
            raise ValueError(
                "GPUDOCK_VOLUME_QUOTA=loop mounts volumes on this machine, so it needs the "
                "local Docker Engine; with a remote engine set GPUDOCK_VOLUME_QUOTA=off"
            )
        return self

    @property
    def effective_volume_dir(self) -> Path | None:
        """Where size-limited volumes live; None when quotas are off."""
        if self.volume_quota == "off":
            return None
        return (self.volume_dir or self.data_dir / "volumes").expanduser().resolve()

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'gpudock.db'}"

    @property
    def crash_point_set(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.crash_points.split(",") if p.strip())
