"""Deployment settings: one typed object read from `tpu.env` and the environment.

Real environment variables always win over `tpu.env` (pydantic-settings' source order).
Validation rejects the spellings that are known to fail at the TPU API and names the fix,
so a wrong value stops at start-up instead of looking like "no capacity" an hour later.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, PrivateAttr, SecretStr, field_validator, model_validator
from dotenv import dotenv_values
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing_extensions import Annotated

from infra.deployment_mode import DeploymentMode
from infra.durations import FLEX_START_LONGEST, SHORTEST_LEASE, format_duration, parse_duration
from infra.prices import PriceTableSetting, default_price_table
from infra.vllm_flags import (
    DEFAULT_IMAGE,
    DEFAULT_MM_LIMITS,
    DEFAULT_MODEL_REVISION,
    TPU_UNSERVED_MODALITIES,
    V5E_MAX_GPU_MEMORY_UTILIZATION,
    V5E_MAX_NUM_SEQS,
    explicit_mm_limits,
    largest_mm_item,
)
from infra.vllm_images import image_digest, image_tag, unusable_reason
from infra.gcp_names import BOT_LABEL_KEYS, LABEL_LIMIT, label_problem, project_id_problem, zone_name_problem

if TYPE_CHECKING:
    from handlers.incident_routes import AlertRoute

ENV_FILE_VAR = "TPUBOT_ENV_FILE"
DEFAULT_ENV_FILE = "tpu.env"
ENV_FILE_ENCODING = "utf-8-sig"  # UTF-8, with or without the byte-order mark some editors write

# accelerator family -> (runtime versions that boot it, GCE machine type, chips per host)
ACCELERATOR_FAMILIES: dict[str, dict[str, Any]] = {
    "v5litepod": {
        "runtimes": ("v2-alpha-tpuv5-lite",),
        "machine_type": "ct5lp-hightpu-1t",
        "label": "v5e",
    },
    "v6e": {
        "runtimes": ("v2-alpha-tpuv6e",),
        "machine_type": "ct6e-standard-1t",
        "label": "v6e",
    },
}
WRONG_ACCELERATOR_SPELLINGS = {"v5e-1": "v5litepod-1", "v5e-4": "v5litepod-4", "v5e-8": "v5litepod-8"}


def env_file_path() -> Path:
    # Set but empty (`TPUBOT_ENV_FILE= tpubot …`) is unset, not the working directory.
    return Path(os.environ.get(ENV_FILE_VAR) or DEFAULT_ENV_FILE)


class SettingError(ValueError):
    """A setting problem found outside field validation (bot/cli/errors.py prints it as is)."""


# Slack id shapes, by the first letter Slack gives each kind: users U/W, user groups S,
# channels C (public), G (private, legacy) and D (DMs).
_SLACK_ID = re.compile(r"^[A-Z][A-Z0-9]{2,}$")
ID_PREFIXES = {"users": ("U", "W"), "groups": ("S",), "channels": ("C", "G", "D")}
# (field, what it lists); MCP_USER may stand in a user list (bot/mcp_server.py's identity).
ID_LIST_FIELDS = {
    "admins": "users", "admin_groups": "groups", "admin_channels": "channels",
    "read_users": "users", "read_groups": "groups", "read_channels": "channels",
    "write_users": "users", "write_groups": "groups", "write_channels": "channels",
}
URL_SCHEMES = {"redis_url": ("redis", "rediss", "unix"), **dict.fromkeys((
    "slack_api_url", "gemma_base_url", "tpu_api_endpoint", "logging_api_endpoint", "compute_api_endpoint",
    "quotas_api_endpoint", "secretmanager_api_endpoint", "storage_api_endpoint", "resourcemanager_api_endpoint",
    "iam_api_endpoint",
), ("http", "https"))}


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


CsvList = Annotated[list[str], NoDecode, BeforeValidator(_split_csv)]
DurationList = Annotated[list[timedelta], NoDecode]
# One parser for durations (settings and `/tpu up`): infra/durations.py.
Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class Settings(BaseSettings):
    """Everything a deployment can set. Field names are the variable names, case-insensitive."""

    model_config = SettingsConfigDict(
        env_file=DEFAULT_ENV_FILE,
        env_file_encoding=ENV_FILE_ENCODING,
        extra="ignore",
        case_sensitive=False,
        validate_default=True,
    )

    # --- GCP -------------------------------------------------------------------------------
    gcp_project: str = Field("", description="GCP project id; empty runs against the local sandbox")
    tpu_zone: str = Field("us-west4-a", description="zone tried first by /tpu up without a zone")
    # The two zones Google documents flex-start v5e in first (reference/gcp-apis.md), then others that
    # list v5e; the zone search learns from there which accept it.
    tpu_zones: CsvList = Field(
        default_factory=lambda: ["us-west4-a", "us-central1-a", "us-west1-c", "us-south1-a", "europe-west4-a"],
        description="zones /tpu up may search (comma-separated)",
    )
    tpu_accelerator_type: str = Field("v5litepod-1", description="TPU accelerator type")
    tpu_runtime_version: str = Field("v2-alpha-tpuv5-lite", description="TPU VM runtime (software) version")
    tpu_machine_type: str = Field("ct5lp-hightpu-1t", description="GCE machine type of the TPU host")
    tensor_parallel_size: int = Field(1, description="vLLM --tensor-parallel-size")
    max_run_duration: Duration = Field(timedelta(hours=4), description="flex-start maxRunDuration (lease length)")
    min_run_duration: Duration = Field(SHORTEST_LEASE, description="the shortest lease `/tpu up` accepts (at least 1s)")
    valid_until_duration: Duration = Field(timedelta(hours=4), description="how long a request may queue")
    network: str = Field("default", description="VPC network of the TPU VM")
    subnetwork: str = Field("", description="subnetwork (empty: the network's default)")
    tpu_labels: dict[str, str] = Field(default_factory=dict, description="extra labels on every QR, JSON")
    tpu_api_endpoint: str = Field("", description="override the TPU API base URL (sandbox sets it)")
    logging_api_endpoint: str = Field("", description="override the Cloud Logging API base URL")
    compute_api_endpoint: str = Field("", description="override the Compute Engine API base URL (doctor)")
    quotas_api_endpoint: str = Field("", description="override the Cloud Quotas API base URL (doctor)")
    secretmanager_api_endpoint: str = Field("", description="override the Secret Manager API base URL (doctor)")
    storage_api_endpoint: str = Field("", description="override the Cloud Storage JSON API base URL (doctor, and the "
                                                      "TPU VM's compile cache)")
    resourcemanager_api_endpoint: str = Field("", description="override the Cloud Resource Manager API base URL "
                                                              "(the project's number: the TPU VM's default account)")
    iam_api_endpoint: str = Field("", description="override the IAM API base URL (doctor: may the bot act as "
                                                  "TPU_SERVICE_ACCOUNT)")
    tpu_service_account: str = Field("", description="service account the TPU VM runs as (an email), sent with every "
                                                     "create; empty: the project's default Compute Engine account")
    # --- the private model endpoint (issue 15) ----------------------------------------------
    model_source_ranges: CsvList = Field(
        default_factory=list,
        description="CIDR ranges the bot reaches vLLM from (its egress IP/32); doctor checks a firewall rule admits them",
    )
    endpoint_address: Literal["external", "internal"] = Field(
        "external", description="external: call vLLM on the node's external IP; internal: on its VPC IP (no external IP)"
    )
    model_network_tag: str = Field("tpubot-model", description="network tag on every TPU node; the firewall rule targets it")

    # --- model -----------------------------------------------------------------------------
    model_name: str = Field("google/gemma-4-E2B-it", description="Hugging Face model vLLM serves")
    model_revision: str = Field(DEFAULT_MODEL_REVISION, description="Hugging Face commit of MODEL_NAME to serve "
                                "(pins its chat template too); empty serves the repository's main")
    model_port: int = Field(8000, description="port vLLM listens on inside the TPU VM")
    hf_token_secret: str = Field("hf-token", description="Secret Manager secret holding the HF token")
    vllm_image: str = Field(DEFAULT_IMAGE, description="container image the TPU VM runs vLLM from (a release tag "
                                                      "or a digest, in any registry)")
    vllm_max_model_len: int = Field(16384, description="vLLM --max-model-len")
    vllm_max_num_batched_tokens: int = Field(4096, description="vLLM --max_num_batched_tokens")
    vllm_max_num_seqs: int = Field(V5E_MAX_NUM_SEQS, ge=1, description="vLLM --max-num-seqs (32 fits a v5e chip at "
                                                                    "the default context; vLLM's own default, 256, "
                                                                    "can run out of memory compiling)")
    vllm_limit_mm_per_prompt: str = Field(DEFAULT_MM_LIMITS, description="vLLM --limit-mm-per-prompt (JSON; audio and "
                                                                         "video must be 0 on a TPU)")
    vllm_gpu_memory_utilization: float | None = Field(
        None, description="vLLM --gpu-memory-utilization (at most 0.92 on v5e); empty: vLLM's own default")
    xla_cache_bucket: str = Field("", description="Cloud Storage bucket (gs://name or name) the TPU VM restores "
                                                  "vLLM's compile cache from and saves it to; empty: no bucket")
    model_boot_timeout: Duration = Field(
        timedelta(minutes=60), description="how long after ACTIVE vLLM may take to answer before the lease FAILS"
    )
    model_boot_silence: Duration = Field(
        timedelta(minutes=3), description="how long after ACTIVE the TPU VM may publish no boot phase before the "
                                          "card says its startup script is not reporting")
    preflight_ttl: Duration = Field(timedelta(hours=6), description="how long a `tpubot doctor` result is trusted")
    gemma_base_url: str = Field("", description="a fixed OpenAI-compatible endpoint for the agent")
    gemma_api_key: SecretStr = Field(SecretStr(""), description="the key of GEMMA_BASE_URL (and of `tpubot eval "
                                     "--endpoint`) when its server was started with --api-key / VLLM_API_KEY")
    agent_max_steps: int = Field(4, ge=1, le=10, description="model calls per mention before the agent must answer")
    agent_stream: bool = Field(True, description="stream model replies (and Slack replies, where the workspace can)")
    agent_use_model: bool = Field(True, description="False: mentions always get the model-less answer")
    # Not a variable: `tpubot shell --no-model` names itself here, so an answer says what the user did.
    _model_off_by: str = PrivateAttr("AGENT_USE_MODEL=false")
    runbooks_dir: str = Field("", description="a folder of the team's runbooks (Markdown, docs/runbooks.md), "
                                              "searched with the built-in ones; re-read when a file changes")
    runbooks_urls: CsvList = Field(default_factory=list, description="http(s) URLs of Markdown runbooks, "
                                   "comma-separated; fetched again after a minute")

    # --- Slack -----------------------------------------------------------------------------
    slack_bot_token: SecretStr = Field(SecretStr(""), description="xoxb- bot token")
    slack_signing_secret: SecretStr = Field(SecretStr(""), description="request signing secret")
    slack_app_token: SecretStr = Field(SecretStr(""), description="xapp- token, Socket Mode only")
    slack_api_url: str = Field("", description="Slack Web API base URL (tests and shell point it locally)")
    # Slack's own payloads are well under 100 KB (a message action carries one message); 1 MiB leaves
    # room for the largest and still bounds what one unauthenticated request can make us hold.
    slack_max_body_bytes: int = Field(1024 * 1024, ge=1024, description="largest request body /slack/events reads "
                                      "(Slack's payloads are a few KB); a larger one gets a 413")
    # Slack's documented response_url hosts (commercial and GovSlack); sandboxes add their own.
    slack_response_url_hosts: CsvList = Field(
        default_factory=lambda: ["hooks.slack.com", "hooks.slack-gov.com"],
        description="hosts (host or host:port) a payload's response_url may name; SLACK_API_URL's host is added")
    admins: CsvList = Field(default_factory=list, description="Slack user ids allowed to act on any lease")

    # --- access control (empty users+groups: everyone; empty channels: every channel) ----
    admin_groups: CsvList = Field(default_factory=list, description="user groups (S…) whose members are admins")
    admin_channels: CsvList = Field(default_factory=list, description="channels where admin actions are allowed")
    read_users: CsvList = Field(default_factory=list, description="users allowed read actions (status, zones, cost)")
    read_groups: CsvList = Field(default_factory=list, description="user groups allowed read actions")
    read_channels: CsvList = Field(default_factory=list, description="channels where read actions are allowed")
    write_users: CsvList = Field(default_factory=list, description="users allowed write actions (up, down)")
    write_groups: CsvList = Field(default_factory=list, description="user groups allowed write actions")
    write_channels: CsvList = Field(default_factory=list, description="channels where write actions are allowed")

    # --- MCP (`tpubot mcp`) ----------------------------------------------------------------
    # The MCP identity is checked by the same rules as a Slack user (holder or ADMINS for teardown).
    mcp_user: str = Field("mcp-local", min_length=1, description="user id an MCP session acts as (list it in ADMINS to act on any lease)")
    mcp_team: str = Field("local", description="Slack team id whose channel lease an MCP session acts on")
    mcp_channel: str = Field("mcp-local", min_length=1, description="Slack channel id whose lease an MCP session acts on (its status card goes there)")
    mcp_read_outside_cwd: bool = Field(False, description="let summarize_logs read a `path` outside the directory `tpubot mcp` was started in")

    # --- state and processes ---------------------------------------------------------------
    redis_url: str = Field("", description="Redis URL; empty starts an embedded server")
    port: int = Field(3000, description="HTTP port of `tpubot serve`")
    worker_metrics_port: int = Field(0, description="port for the worker's Prometheus /metrics (0: off)")
    redis_startup_wait: Duration = Field(
        timedelta(seconds=30), description="how long a starting worker or web process waits for Redis before exiting "
                                          "with one line")
    log_format: str = Field("auto", description="log lines: json, text, or auto (JSON unless stderr is a terminal)")
    poll_interval: Duration = Field(timedelta(seconds=10), description="how often a QR is polled")
    lock_ttl: Duration = Field(timedelta(seconds=60), description="operation lock TTL")
    job_timeout: Duration = Field(timedelta(minutes=5), description="worker job timeout")
    sandbox_time_scale: float = Field(
        1.0, description="sandbox only: multiply emulated cloud timings (lower is faster)"
    )
    prices: PriceTableSetting = Field(
        default_factory=default_price_table,
        description="TPU USD per chip-hour: JSON list of entries merged over the defaults (infra/prices.py)",
    )

    # --- alerts, idle clock, reconciler (issue 4) -----------------------------------------
    alert_lead_times: DurationList = Field(
        default_factory=lambda: [timedelta(minutes=30), timedelta(minutes=5)],
        description="warnings this long before the cloud deadline (comma-separated, e.g. 30m,5m)",
    )
    alert_late_after: Duration = Field(
        timedelta(minutes=1), description="an alert posted this long after its time is marked late"
    )
    idle_teardown_minutes: float = Field(
        0.0, ge=0, description="tear down a model nobody used for this many minutes (0: never)"
    )
    idle_check_interval: Duration = Field(timedelta(minutes=1), description="how often vLLM's /metrics is read")
    reconcile_interval: Duration = Field(
        timedelta(minutes=5), description="how often the worker repairs Redis from the labelled QRs in GCP"
    )
    alert_admin_channel: str = Field("", description="channel for admin alerts (empty: a DM to each of ADMINS)")

    # --- spend guardrails (issue 21) ----------------------------------------------------------
    budget_workspace_monthly: float | None = Field(
        None, description="USD the whole workspace may spend per calendar month (UTC) unless `/tpu budget set` "
                          "says otherwise; empty: no limit")
    budget_channel_monthly: float | None = Field(
        None, description="USD each channel may spend per calendar month (UTC) unless `/tpu budget set … #channel` "
                          "says otherwise; empty: no limit")

    # --- incident webhooks (issue 32) ---------------------------------------------------------
    alert_routes: str = Field("", description="which channel an alert's thread opens in: label=value:CHANNEL rules, "
                                              "first match wins, *:CHANNEL for the rest (README, Incidents from alerts); "
                                              "empty: the alert webhooks are off")
    alertmanager_webhook_token: SecretStr = Field(SecretStr(""), description="/alerts/alertmanager: the bearer token "
                                                  "(or basic-auth password, or ?token=) Alertmanager sends; empty: refused")
    cloud_monitoring_token: SecretStr = Field(SecretStr(""), description="/alerts/cloud-monitoring: the "
                                                      "?auth_token= (or basic-auth password) Cloud Monitoring sends; empty: refused")
    pagerduty_webhook_secret: SecretStr = Field(SecretStr(""), description="/alerts/pagerduty: the v3 webhook "
                                                "subscription's signing secret; empty: refused")
    alert_max_body_bytes: int = Field(1024 * 1024, ge=1024, description="largest Cloud Monitoring or PagerDuty "
                                      "webhook body read (PagerDuty sends at most 256 KB); a larger one gets a 413. "
                                      "Alertmanager groups are read as a stream, up to ALERTMANAGER_MAX_GROUP_BYTES")
    alertmanager_max_group_bytes: int = Field(
        64 * 1024 * 1024, ge=1024 * 1024, description="largest Alertmanager group read (about 60,000 alerts of "
        "kube-prometheus' size; 1,200 are 1.15 MB); a larger one gets a 507, which Alertmanager retries and reports "
        "as failing, never a 4xx it would drop: set max_alerts on its receiver")
    alert_read_timeout: Duration = Field(
        timedelta(seconds=60), description="how long an alert webhook's body may take to arrive; a slower one gets "
        "a 503 for its sender to retry")
    alertmanager_group_interval: Duration = Field(
        timedelta(minutes=5), description="the group_interval of the Alertmanager routes that notify tpubot (the "
        "smallest, if they differ): an identical body within it is a retry, answered 200; after it, the group "
        "still firing, counted in its thread")
    alert_storm_threads: int = Field(5, ge=1, description="new incident threads one ALERT_ROUTES rule may open for "
                                     "one severity per ALERT_STORM_WINDOW; the rest are counted in one storm message "
                                     "(an alert that pages is never folded)")
    alert_storm_window: Duration = Field(timedelta(minutes=10), description="the window ALERT_STORM_THREADS counts in")
    followup_max_age: Duration = Field(timedelta(hours=24), description="a plain reply in a thread the bot started "
                                        "or answered is answered without a mention for this long (0s: never)")
    alert_page_severities: CsvList = Field(
        default_factory=lambda: ["critical", "page", "high", "p1"],
        description="alert severities (PagerDuty: urgency or priority) that page the channel's on-call; they rank "
                    "above all others when a group's alerts differ (the first listed highest)")

    @property
    def model_off_by(self) -> str:
        """What switched the model off, as whoever did it would name it (AGENT_USE_MODEL=false, a flag)."""
        return self._model_off_by

    def secret_values(self) -> list[str]:
        """The values of every SecretStr setting (SECRET_FIELDS), for redaction."""
        return [getattr(self, name).get_secret_value() for name in SECRET_FIELDS]

    def without_model(self, by: str) -> "Settings":
        """These settings with the model switched off by `by` (a command-line flag), which answers name."""
        copy = self.model_copy(update={"gemma_base_url": "", "agent_use_model": False})
        copy._model_off_by = by
        return copy

    @field_validator("budget_workspace_monthly", "budget_channel_monthly", mode="before")
    @classmethod
    def _budget(cls, value: Any, info: Any) -> float | None:
        if value is None or str(value).strip().lower() in ("", "none", "off"):
            return None
        text = str(value).strip().lstrip("$")
        try:
            usd = float(text)
        except ValueError:
            raise ValueError(f"{info.field_name.upper()}={value!r} is not an amount of USD; write it like 200 "
                             "(or leave it empty for no limit)") from None
        if not math.isfinite(usd) or usd < 0:  # inf would read as a limit and show as no amount at all
            raise ValueError(f"{info.field_name.upper()} must be 0 or more USD; write it like 200")
        return usd

    @field_validator("alert_routes")
    @classmethod
    def _alert_routes(cls, value: str) -> str:
        from handlers.incident_routes import EXAMPLE, parse_routes

        try:
            parse_routes(value)
        except ValueError as error:
            raise ValueError(f"ALERT_ROUTES: {error}; write it like {EXAMPLE}") from None
        return value

    @field_validator("alertmanager_group_interval")
    @classmethod
    def _group_interval(cls, value: timedelta) -> timedelta:
        if value.total_seconds() < 1:
            raise ValueError("ALERTMANAGER_GROUP_INTERVAL must be at least 1s; write it like the route's "
                             "group_interval, e.g. 5m")
        return value

    @field_validator("alert_page_severities")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [item.lower() for item in value]

    @field_validator("model_source_ranges")
    @classmethod
    def _source_ranges(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"MODEL_SOURCE_RANGES={','.join(value)}: {item!r} is not an address range; write "
                                 "it like 203.0.113.7/32 (the bot's egress IP) or 10.128.0.0/20") from None
        return [str(ipaddress.ip_network(item, strict=False)) for item in value]

    @field_validator("gcp_project")
    @classmethod
    def _project_id(cls, value: str) -> str:
        value = value.strip()
        problem = project_id_problem(value) if value else None
        if problem:
            raise ValueError(f"GCP_PROJECT={value} {problem}, or leave it empty for the local sandbox")
        return value

    @field_validator("tpu_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        example = "TPU_LABELS='{\"team\": \"ml\", \"cost-center\": \"cc-123\"}'"
        for key, label in value.items():
            problem = label_problem(key, str(label))
            if problem:
                raise ValueError(f"TPU_LABELS: {problem}; Google refuses the queued resource otherwise. Write it like "
                                 f"{example}")
            if key in BOT_LABEL_KEYS:
                raise ValueError(f"TPU_LABELS: the key {key!r} is one of the bot's own ({', '.join(BOT_LABEL_KEYS)}), "
                                 f"which find and attribute its TPUs; use another key, like {example}")
        if len(value) + len(BOT_LABEL_KEYS) > LABEL_LIMIT:
            raise ValueError(f"TPU_LABELS has {len(value)} labels; with the bot's {len(BOT_LABEL_KEYS)} that is more "
                             f"than the {LABEL_LIMIT} a resource may carry: keep at most "
                             f"{LABEL_LIMIT - len(BOT_LABEL_KEYS)}")
        return {key: str(label) for key, label in value.items()}

    @field_validator("tpu_zone", mode="before")
    @classmethod
    def _zone_name(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = value.strip().lower()
        problem = zone_name_problem(value)
        if problem:
            raise ValueError(f"TPU_ZONE={value} {problem}")
        return value

    @field_validator("tpu_zones")
    @classmethod
    def _zone_names(cls, value: list[str]) -> list[str]:
        zones = [zone.lower() for zone in value]
        for zone in zones:
            problem = zone_name_problem(zone)
            if problem:
                raise ValueError(f"TPU_ZONES={','.join(zones)}: {zone!r} {problem}")
        return zones

    @field_validator("runbooks_dir")
    @classmethod
    def _runbooks_dir(cls, value: str) -> str:
        if value and not Path(value).expanduser().is_dir():
            raise ValueError(f"RUNBOOKS_DIR={value} is not a folder; name a folder of Markdown runbooks "
                             "(docs/runbooks.md), or leave it empty for the built-in ones only")
        return str(Path(value).expanduser()) if value else value

    @field_validator("runbooks_urls")
    @classmethod
    def _runbooks_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise ValueError(f"RUNBOOKS_URLS: {url!r} is not an http(s) URL; write it like "
                                 "https://raw.githubusercontent.com/acme/runbooks/main/tpu.md")
        return value

    @field_validator("vllm_image")
    @classmethod
    def _pinned_image(cls, value: str) -> str:
        if not image_digest(value).startswith("sha256:") and image_tag(value) in ("", "latest", "nightly"):
            raise ValueError(f"VLLM_IMAGE={value} is not pinned: what boots tomorrow would not be what was tested; "
                             f"name a release tag or digest, like VLLM_IMAGE={DEFAULT_IMAGE}")
        reason = unusable_reason(value)
        if reason:
            raise ValueError(f"VLLM_IMAGE={value} cannot serve Gemma 4 E2B on a TPU: {reason}; "
                             f"use VLLM_IMAGE={DEFAULT_IMAGE} (or your mirror of that tag)")
        return value

    @field_validator("vllm_gpu_memory_utilization", mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("xla_cache_bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        name = value.strip().removeprefix("gs://").strip("/")
        if name and not re.fullmatch(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]", name):
            raise ValueError(f"XLA_CACHE_BUCKET={value} is not a Cloud Storage bucket name; write it like "
                             "gs://my-project-vllm-cache (lower-case letters, digits, - _ .; no path)")
        return name

    @field_validator("port", "model_port", "worker_metrics_port")
    @classmethod
    def _port(cls, value: int, info: Any) -> int:
        lowest = 0 if info.field_name == "worker_metrics_port" else 1
        if not lowest <= value <= 65535:
            raise ValueError(f"{info.field_name.upper()}={value} is not a TCP port; use {lowest}-65535")
        return value

    @field_validator(*URL_SCHEMES)
    @classmethod
    def _url_scheme(cls, value: str, info: Any) -> str:
        schemes = URL_SCHEMES[info.field_name]
        scheme, sep, rest = value.partition("://")
        if value and (not sep or scheme.lower() not in schemes or not rest):
            example = "redis://localhost:6379/0" if "redis" in schemes else "http://127.0.0.1:8080"
            raise ValueError(f"{info.field_name.upper()}={_masked_url(value)} is not a "
                             f"{' or '.join(s + '://' for s in schemes)} URL; write it like {example}")
        return value

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in ("auto", "json", "text"):
            raise ValueError(f"LOG_FORMAT={value} is not a log format; use json, text or auto")
        return value

    @field_validator("vllm_limit_mm_per_prompt")
    @classmethod
    def _mm_limits(cls, value: str) -> str:
        try:
            limits = json.loads(value)
        except ValueError:
            limits = None
        if not isinstance(limits, dict) or not all(isinstance(v, int) and v >= 0 for v in limits.values()):
            raise ValueError(
                f"VLLM_LIMIT_MM_PER_PROMPT={value} is not a JSON object of counts; write it like "
                f"{DEFAULT_MM_LIMITS}"
            )
        served = [m for m in TPU_UNSERVED_MODALITIES if limits.get(m, 0) > 0]
        if served:
            raise ValueError(
                f"VLLM_LIMIT_MM_PER_PROMPT={value} allows {' and '.join(served)}, which vLLM on a TPU cannot embed: "
                "tpu-inference 0.32.0 skips Gemma 4's audio tower weights at load and embeds images only (video "
                f'raises "Video not yet supported"); set {" and ".join(served)} to 0, like {DEFAULT_MM_LIMITS}')
        # Said out loud: a modality left out gets vLLM's default of 999, not 0.
        return json.dumps(explicit_mm_limits(json.dumps(limits)), separators=(",", ":"))

    @field_validator("tpu_service_account")
    @classmethod
    def _service_account(cls, value: str) -> str:
        value = value.strip().removeprefix("serviceAccount:")
        if value and not re.fullmatch(r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com", value):
            raise ValueError(f"TPU_SERVICE_ACCOUNT={value} is not a service account's email; write it like "
                             "tpubot-node@my-project.iam.gserviceaccount.com, or leave it empty for the project's "
                             "default Compute Engine service account")
        return value

    @field_validator("alert_lead_times", mode="before")
    @classmethod
    def _lead_times(cls, value: Any) -> list[timedelta]:
        items = _split_csv(value) if isinstance(value, str) else list(value)
        leads = sorted({parse_duration(item) for item in items}, reverse=True)
        if any(lead.total_seconds() <= 0 for lead in leads):
            raise ValueError("ALERT_LEAD_TIMES must be positive durations, like 30m,5m")
        return leads

    @field_validator("idle_check_interval", "reconcile_interval", "alert_storm_window", "alert_read_timeout")
    @classmethod
    def _positive_interval(cls, value: timedelta, info: Any) -> timedelta:
        if value.total_seconds() <= 0:
            raise ValueError(f"{info.field_name.upper()} must be longer than 0; write it like 1m")
        return value

    @field_validator("tpu_accelerator_type")
    @classmethod
    def _accelerator(cls, value: str) -> str:
        return check_accelerator(value)

    @field_validator("max_run_duration", "min_run_duration", "valid_until_duration")
    @classmethod
    def _flex_start_window(cls, value: timedelta, info: Any) -> timedelta:
        name = info.field_name.upper()
        if value.total_seconds() < 1:
            raise ValueError(f"{name} must be at least 1s; write it like 4h")
        if value > FLEX_START_LONGEST:
            raise ValueError(f"{name}={format_duration(value)} exceeds flex-start's limit of 7 days; use at most 7d")
        return value

    @model_validator(mode="after")
    def _accelerator_consistency(self) -> "Settings":
        family = accelerator_family(self.tpu_accelerator_type)
        assert family is not None, "the field's check_accelerator accepted it"
        spec = ACCELERATOR_FAMILIES[family]
        if self.tpu_runtime_version not in spec["runtimes"]:
            raise ValueError(
                f"TPU_RUNTIME_VERSION={self.tpu_runtime_version} does not boot {self.tpu_accelerator_type}; "
                f"use TPU_RUNTIME_VERSION={spec['runtimes'][0]}"
            )
        if self.tpu_machine_type != spec["machine_type"]:
            raise ValueError(
                f"TPU_MACHINE_TYPE={self.tpu_machine_type} is the {_family_of_machine(self.tpu_machine_type)} "
                f"machine type, not {spec['label']}'s; use TPU_MACHINE_TYPE={spec['machine_type']}"
            )
        chips = chip_count(self.tpu_accelerator_type)
        if not 1 <= self.tensor_parallel_size <= chips:
            raise ValueError(
                f"TENSOR_PARALLEL_SIZE={self.tensor_parallel_size} does not fit {self.tpu_accelerator_type} "
                f"({chips} chip{'s' if chips > 1 else ''}); use TENSOR_PARALLEL_SIZE={chips}"
            )
        if self.tpu_zone not in self.tpu_zones:
            self.tpu_zones = [self.tpu_zone, *self.tpu_zones]
        return self

    @model_validator(mode="after")
    def _vllm_flags_that_start(self) -> "Settings":
        """Refuse flags that vLLM would only reject after the VM booted (or a 15-minute compile)."""
        modality, largest = largest_mm_item(self.vllm_limit_mm_per_prompt)
        if self.vllm_max_num_batched_tokens < largest:
            raise ValueError(
                f"VLLM_MAX_NUM_BATCHED_TOKENS={self.vllm_max_num_batched_tokens} is below the largest multimodal "
                f"item VLLM_LIMIT_MM_PER_PROMPT={self.vllm_limit_mm_per_prompt} allows (one {modality}, {largest} "
                f"tokens), so vLLM would refuse to start; use VLLM_MAX_NUM_BATCHED_TOKENS=4096 (at least {largest})")
        if self.vllm_max_num_seqs > self.vllm_max_num_batched_tokens:
            raise ValueError(
                f"VLLM_MAX_NUM_SEQS={self.vllm_max_num_seqs} is more than VLLM_MAX_NUM_BATCHED_TOKENS="
                f"{self.vllm_max_num_batched_tokens} (one step schedules at most one token per sequence), so vLLM "
                f"would refuse to start; use VLLM_MAX_NUM_SEQS={V5E_MAX_NUM_SEQS} or raise VLLM_MAX_NUM_BATCHED_TOKENS")
        utilization = self.vllm_gpu_memory_utilization
        if utilization is not None and not 0 < utilization <= 1:
            raise ValueError(f"VLLM_GPU_MEMORY_UTILIZATION={utilization:g} is not a fraction of the chip's memory; "
                             f"use a value above 0 and at most {V5E_MAX_GPU_MEMORY_UTILIZATION}, or leave it empty")
        if (utilization is not None and accelerator_family(self.tpu_accelerator_type) == "v5litepod"
                and utilization > V5E_MAX_GPU_MEMORY_UTILIZATION):
            raise ValueError(
                f"VLLM_GPU_MEMORY_UTILIZATION={utilization:g} is more than a v5e chip allocates for the model's "
                f"compiled programs (0.95 failed with RuntimeProgramAllocationFailure after a 691 s compile); use "
                f"VLLM_GPU_MEMORY_UTILIZATION={V5E_MAX_GPU_MEMORY_UTILIZATION} or leave it empty")
        return self

    @model_validator(mode="after")
    def _boot_timeout_outlasts_the_vm(self) -> "Settings":
        """The VM gives up on a step before vLLM (and says why) within its own waits: the bot must wait longer."""
        from infra.startup_script import WaitBudget

        waits = timedelta(seconds=WaitBudget().pre_vllm_wait_seconds())
        if self.model_boot_timeout <= waits:
            raise ValueError(
                f"MODEL_BOOT_TIMEOUT={format_duration(self.model_boot_timeout)} is not longer than what the TPU VM "
                f"may wait before it starts vLLM ({format_duration(waits)}: secrets and image pull retried), so the "
                "lease would fail before the VM could say why; use MODEL_BOOT_TIMEOUT=60m (vLLM's first compile "
                "takes 15 minutes and more after that)")
        return self

    @model_validator(mode="after")
    def _lease_length_bounds(self) -> "Settings":
        if self.max_run_duration < self.min_run_duration:
            raise ValueError(
                f"MAX_RUN_DURATION={format_duration(self.max_run_duration)} is shorter than the shortest lease, "
                f"MIN_RUN_DURATION={format_duration(self.min_run_duration)}; raise MAX_RUN_DURATION or lower "
                f"MIN_RUN_DURATION")
        return self

    @model_validator(mode="after")
    def _slack_id_lists(self) -> "Settings":
        for name, kind in ID_LIST_FIELDS.items():
            for item in getattr(self, name):
                if kind == "users" and item == self.mcp_user:
                    continue
                if not (_SLACK_ID.match(item) and item.startswith(ID_PREFIXES[kind])):
                    first = "/".join(p + "…" for p in ID_PREFIXES[kind])
                    raise ValueError(
                        f"{name.upper()}={','.join(getattr(self, name))}: {item!r} is not a Slack "
                        f"{kind[:-1]} id ({first}); list ids separated by commas, like "
                        f"{name.upper()}={ID_PREFIXES[kind][0]}012ABCDEF,{ID_PREFIXES[kind][0]}034GHIJKL")
        return self

    # --- derived ---------------------------------------------------------------------------
    @property
    def mode(self) -> DeploymentMode:
        """The one place the mode is decided: no GCP project configured means the sandbox, where
        every cloud call goes to the local emulators."""
        return DeploymentMode.for_project(self.gcp_project)

    @property
    def project(self) -> str:
        return self.gcp_project or "tpubot-sandbox"

    def alert_route_list(self) -> list["AlertRoute"]:
        """ALERT_ROUTES as rules (handlers/incident_routes.py); validated at load."""
        from handlers.incident_routes import parse_routes

        return parse_routes(self.alert_routes)

    def response_url_hosts(self) -> list[str]:
        """SLACK_RESPONSE_URL_HOSTS, plus SLACK_API_URL's host: a Slack stand-in (the sandbox's)
        serves response_urls beside its Web API."""
        hosts = [host.lower() for host in self.slack_response_url_hosts]
        if self.slack_api_url:
            parts = urlsplit(self.slack_api_url)
            hosts.append(parts.netloc.lower())
        return hosts

    @staticmethod
    def region_of(zone: str) -> str:
        return zone.rsplit("-", 1)[0]

    @classmethod
    def load(cls, env_file: str | Path | None = None, **overrides: Any) -> "Settings":
        path = Path(env_file) if env_file is not None else env_file_path()
        named = f"{ENV_FILE_VAR}={path}" if env_file is None and os.environ.get(ENV_FILE_VAR) else str(path)
        if env_file is None and os.environ.get(ENV_FILE_VAR) and not path.exists():
            where = "" if path.is_absolute() else f" (looked in {Path.cwd()})"
            raise SettingError(f"{ENV_FILE_VAR}={path} names no file{where}; "
                               f"create it (.env.example lists every variable) or unset {ENV_FILE_VAR}")
        if path.is_dir():
            raise SettingError(f"{named} is a folder, not a file of settings; name the file in it "
                               f"({ENV_FILE_VAR}={path / DEFAULT_ENV_FILE}), or unset {ENV_FILE_VAR}")
        if path.exists():
            _check_text(path, named)
        return cls(_env_file=path if path.exists() else None, **overrides)


def _check_text(path: Path, named: str) -> None:
    """The env file must be UTF-8 text (a UTF-8 byte-order mark is fine); an editor's UTF-16 would
    otherwise surface as a decoding traceback."""
    try:
        path.read_bytes().decode(ENV_FILE_ENCODING)
    except OSError as error:
        raise SettingError(f"{named} cannot be read ({error.strerror or error}); make it readable, or unset "
                           f"{ENV_FILE_VAR}") from None
    except UnicodeDecodeError:
        head = path.read_bytes()[:2]
        what = "UTF-16 text" if head in (b"\xff\xfe", b"\xfe\xff") else "not UTF-8 text"
        raise SettingError(f"{named} is {what}; save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8 {path} > "
                           f"{path}.utf8 && mv {path}.utf8 {path}`)") from None


def check_accelerator(value: str, name: str = "TPU_ACCELERATOR_TYPE") -> str:
    """The one check of an accelerator name, for settings and every CLI option that takes one."""
    value = value.strip().lower()
    if value in WRONG_ACCELERATOR_SPELLINGS:
        raise ValueError(f"{name}={value} is not a name the TPU API accepts; use {name}={WRONG_ACCELERATOR_SPELLINGS[value]}")
    if accelerator_family(value) is None:
        raise ValueError(f"{name}={value} is not a known accelerator; use v5litepod-1 (v5e, one chip)")
    return value


def _masked_url(url: str) -> str:
    """A URL as it may be printed: a password in it is replaced."""
    return re.sub(r"(://[^/@:]*:)[^@/]+@", r"\1***@", url)


def accelerator_family(accelerator: str) -> str | None:
    for family in ACCELERATOR_FAMILIES:
        if accelerator.startswith(family + "-"):
            return family
    return None


def chip_count(accelerator: str) -> int:
    try:
        return int(accelerator.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 1


def _family_of_machine(machine_type: str) -> str:
    for spec in ACCELERATOR_FAMILIES.values():
        if spec["machine_type"] == machine_type:
            return spec["label"]
    return "unknown"


SECRET_FIELDS = tuple(name for name, field in Settings.model_fields.items() if field.annotation is SecretStr)


def describe_sources(settings: Settings, env_file: str | Path | None = None) -> list[tuple[str, str, str]]:
    """(VARIABLE, effective value with secrets masked, where it came from) for `tpubot config`."""
    path = Path(env_file) if env_file is not None else env_file_path()
    from_file = _read_env_file(path)
    environ = {key.lower(): value for key, value in os.environ.items()}
    rows = []
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if name in environ:
            source = "environment"
        elif name in from_file:
            source = str(path)
        else:
            source = "default"
        rows.append((name.upper(), _display(name, value), source))
    return rows


UNSET = "(unset)"  # how `tpubot config` shows a setting with no value, whatever its type


def _display(name: str, value: Any) -> str:
    if isinstance(value, SecretStr):
        raw = value.get_secret_value()
        return UNSET if not raw else f"{raw[:5]}…(set, {len(raw)} chars)" if raw.startswith(("xox", "xapp")) else "********"
    if value is None or (isinstance(value, (str, list, dict)) and not value):
        return UNSET
    if isinstance(value, bool):
        return str(value).lower()  # as it is written in tpu.env
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, list):
        return ",".join(format_duration(v) if isinstance(v, timedelta) else str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def setting_json(name: str, value: Any) -> Any:
    """A setting's value for `tpubot config --json`, in its JSON type: numbers and booleans as such,
    lists as arrays, null when unset; durations as written (`4h`), secrets masked, the price table
    as its entries."""
    if isinstance(value, SecretStr):
        return None if not value.get_secret_value() else _display(name, value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, list):
        return [format_duration(v) if isinstance(v, timedelta) else v for v in value]
    if isinstance(value, str):
        return value or None
    if value is None or isinstance(value, (bool, int, float, dict)):
        return value
    dump = getattr(value, "model_dump", None)  # the price table
    return dump(mode="json") if callable(dump) else str(value)


def _read_env_file(path: Path) -> set[str]:
    """The variables the file sets, read by the parser pydantic-settings reads it with."""
    if not path.exists():
        return set()
    return {key.lower() for key, value in dotenv_values(path, encoding=ENV_FILE_ENCODING).items() if value is not None}

