"""Read Cloud Logging entries for the digest, over HTTP (not gRPC): `cloud_logs_query(...)`
whose `newest_first()` hands each entry on as its page arrives (the digest's way: only the
client's current page is in memory), or `query_cloud_logs`, all of them in a list, oldest first.

The filter is built from plain parameters and always names `timestamp`, because the client
silently appends `timestamp>="<now-24h>"` to any filter that does not (reference/gcp-apis.md §6),
which would cap every query at one day and ignore the window asked for. The resource clauses
(the scope: `resource.type="tpu_worker"` and its node_id/zone labels, as Cloud TPU VMs log)
come first and every value is a quoted literal, so no parameter can widen what is read.

Rate limits: Cloud Logging allows 60-120 read requests per minute per project and answers 429
(`TooManyRequests` on the HTTP path). The query then backs off (exponential, full jitter,
bounded) and resumes from the oldest entry already read rather than starting over: the client
hides page tokens behind a generator, so the resume narrows the time window instead and drops
the entries it has already seen by insertId.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from google.api_core.exceptions import TooManyRequests

TPU_WORKER_RESOURCE = "tpu_worker"  # a TPU VM's logs; labels project_id, zone, node_id, worker_id
SEVERITY_ORDER = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
DEFAULT_WINDOW = timedelta(hours=1)
DEFAULT_MAX_ENTRIES = 5_000
DEFAULT_PAGE_SIZE = 1_000  # the API rejects more than 1,000 per page
DEFAULT_MAX_RETRIES = 5
DEFAULT_BASE_DELAY = 1.0  # seconds; the quota is per minute, so waits grow to tens of seconds
MAX_DELAY = 32.0


@dataclass(frozen=True)
class CloudLoggingConfig:
    """Where to read logs. `api_endpoint` points the client at a sandbox (http://127.0.0.1:PORT)."""

    wired: ClassVar[bool] = True  # the tools that read it are offered (agent/actions/registry.py)
    project: str
    api_endpoint: str | None = None
    credentials: Any = None  # google.auth credentials; None = application default
    anonymous: bool = False  # sandbox: no credentials at all


class CloudLoggingAbsent(Exception):
    """A read of NoCloudLogging; the message says what to set."""


class NoCloudLogging:
    """Cloud Logging where this deployment has none: a sandbox without its emulator (anonymous
    calls to Google would only fail). Its tools are not offered; a read says so."""

    wired: ClassVar[bool] = False

    def list_entries(self, **_: Any) -> Iterator[Any]:
        raise CloudLoggingAbsent("Cloud Logging is not configured for this bot (set GCP_PROJECT).")


@dataclass
class CloudLogsResult:
    entries: list[Any]  # google.cloud.logging entries, oldest first
    filter: str
    truncated: bool  # stopped at max_entries; older entries in the window were not read
    retries: int = 0
    start: datetime | None = None
    end: datetime | None = None
    notes: list[str] = field(default_factory=list)


def make_client(config: CloudLoggingConfig):
    """A google-cloud-logging client on the HTTP transport."""
    from google.cloud import logging as cloud_logging

    credentials = config.credentials
    if config.anonymous and credentials is None:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    options = {"api_endpoint": config.api_endpoint} if config.api_endpoint else None
    return cloud_logging.Client(
        project=config.project, credentials=credentials, _use_grpc=False, client_options=options
    )


def quote(value: str) -> str:
    """A Logging query language string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_filter(
    *,
    start: datetime,
    end: datetime | None = None,
    min_severity: str | None = "WARNING",
    resource_type: str | None = None,
    resource_labels: Mapping[str, str] | None = None,
    text_contains: str | None = None,
) -> str:
    """A Logging filter from plain parameters; the resource scope first, always `timestamp>=`."""
    clauses = []
    if resource_type:
        clauses.append(f"resource.type={quote(resource_type)}")
    for key, value in (resource_labels or {}).items():
        if not key.replace("_", "").isalnum():
            raise ValueError(f"resource label name {key!r} is not a plain identifier")
        clauses.append(f"resource.labels.{key}={quote(str(value))}")
    clauses.append(f"timestamp>={quote(format_timestamp(start))}")
    if end is not None:
        clauses.append(f"timestamp<{quote(format_timestamp(end))}")
    if min_severity:
        severity = min_severity.upper()
        if severity not in SEVERITY_ORDER:
            raise ValueError(f"unknown severity {min_severity!r}; use one of {', '.join(SEVERITY_ORDER)}")
        clauses.append(f"severity>={quote(severity)}")
    if text_contains:
        text = quote(text_contains)
        clauses.append(f"(textPayload:{text} OR jsonPayload.message:{text})")
    return " AND ".join(clauses)


def cloud_logs_query(
    client_or_config: Any,
    *,
    min_severity: str | None = "WARNING",
    resource_type: str | None = None,
    resource_labels: Mapping[str, str] | None = None,
    text_contains: str | None = None,
    since: timedelta = DEFAULT_WINDOW,
    start: datetime | None = None,
    end: datetime | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    page_size: int = DEFAULT_PAGE_SIZE,
    max_retries: int = DEFAULT_MAX_RETRIES,
    base_delay: float = DEFAULT_BASE_DELAY,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    rng: random.Random | None = None,
) -> CloudLogsQuery:
    """A query for the entries matching the parameters (nothing is read yet; a bad parameter
    raises ValueError here). The window is `[start, end)` when `start` is given, else the last
    `since` (default 1 h)."""
    if not 1 <= page_size <= 1_000:
        raise ValueError("page_size must be between 1 and 1000")
    client = make_client(client_or_config) if isinstance(client_or_config, CloudLoggingConfig) else client_or_config
    if start is None:
        start = (end or now()) - since
    base_filter = build_filter(
        start=start,
        end=end,
        min_severity=min_severity,
        resource_type=resource_type,
        resource_labels=resource_labels,
        text_contains=text_contains,
    )
    return CloudLogsQuery(client, base_filter, start, end, max_entries=max_entries, page_size=page_size,
                          max_retries=max_retries, base_delay=base_delay, sleep=sleep, rng=rng or random.Random())


@dataclass
class CloudLogsQuery:
    """`newest_first()` reads the entries page by page as they are consumed, so only the client's
    current page is held; `truncated` and `retries` are final once it is exhausted."""

    client: Any
    filter: str
    start: datetime
    end: datetime | None
    max_entries: int
    page_size: int
    max_retries: int
    base_delay: float
    sleep: Callable[[float], None]
    rng: random.Random
    retries: int = 0
    truncated: bool = False  # stopped at max_entries; older entries in the window were not read
    read: int = 0

    def newest_first(self) -> Iterator[Any]:
        """The newest `max_entries` entries of the window, newest first, each once (also across a
        resume after 429). Raises TooManyRequests when 429 persists through `max_retries` backoffs."""
        # A resume re-reads from the oldest timestamp read so far (order is timestamp desc), so
        # only entries of that timestamp can come twice: their keys are all the dedupe keeps.
        seen: set[Any] = set()
        oldest: datetime | None = None
        self.read, self.retries, self.truncated = 0, 0, False
        while self.read < self.max_entries:
            query = self.filter if oldest is None else f"{self.filter} AND timestamp<={quote(format_timestamp(oldest))}"
            try:
                for entry in self.client.list_entries(filter_=query, order_by="timestamp desc",
                                                      page_size=self.page_size):
                    key = entry.insert_id or (entry.timestamp, entry.log_name, repr(entry.payload))
                    if key in seen:
                        continue
                    if entry.timestamp is not None and entry.timestamp != oldest:
                        seen.clear()  # older than every entry before it: none of those can come again
                        oldest = entry.timestamp
                    seen.add(key)
                    self.read += 1
                    yield entry
                    if self.read >= self.max_entries:
                        self.truncated = True
                        break
                return
            except TooManyRequests:
                self.retries += 1
                if self.retries > self.max_retries:
                    raise
                # full jitter: spread retries from several workers over the whole interval
                delay = min(MAX_DELAY, self.base_delay * 2 ** (self.retries - 1))
                self.sleep(delay * (0.5 + self.rng.random() / 2))


def query_cloud_logs(client_or_config: Any, **params: Any) -> CloudLogsResult:
    """Entries matching the parameters (those of `cloud_logs_query`), newest `max_entries` of the
    window, returned oldest first, all in memory; the digest reads `newest_first()` instead.

    Raises TooManyRequests when 429 persists through `max_retries` backoffs."""
    query = cloud_logs_query(client_or_config, **params)
    entries = list(query.newest_first())
    entries.reverse()
    return CloudLogsResult(entries=entries, filter=query.filter, truncated=query.truncated, retries=query.retries,
                           start=query.start, end=query.end)
