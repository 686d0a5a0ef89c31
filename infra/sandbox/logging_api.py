"""A local stand-in for Cloud Logging's `POST /v2/entries:list` (reference/gcp-apis.md §6).

Serves generated LogEntry JSON so the real google-cloud-logging client (HTTP transport) can be
pointed at it: `Client(project=…, credentials=AnonymousCredentials(), _use_grpc=False,
client_options={"api_endpoint": server.url})`.

Filters: clauses joined by `AND`, each a comparison on `timestamp`, `severity`, `resource.type`,
`resource.labels.<k>`, `logName`, `textPayload`, `jsonPayload.<k>` with `= != < <= > >= :`, or a
parenthesised `OR` of such comparisons; a bare quoted string searches the payload. That is the
subset `infra.cloud_logging.build_filter` and the client emit, not the whole query language.
`orderBy` (`timestamp asc|desc`), `pageSize` (default 50, >1000 rejected) and `pageToken` are
honoured. `fail_next(n)` makes the next n requests answer 429 exactly as the quota error does.
Requests and responses are checked against Google's `logging.v2` discovery document
(`infra.sandbox.discovery`): an unknown field gets the real 400 INVALID_ARGUMENT naming it.
"""

from __future__ import annotations

import json
import random
import re
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infra.sandbox.http_server import ServerThread, handler_class, read_body, reply
from infra.sandbox.discovery import DiscoveryApi, RequestRejected, held_to_schema, load_api
from infra.sandbox.google_errors import error_body, error_info

SEVERITY_NUMBERS = {
    "DEFAULT": 0, "DEBUG": 100, "INFO": 200, "NOTICE": 300, "WARNING": 400,
    "ERROR": 500, "CRITICAL": 600, "ALERT": 700, "EMERGENCY": 800,
}  # fmt: skip

QUOTA_MESSAGE = (
    "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service "
    "'logging.googleapis.com' for consumer 'project_number:123456789012'."
)

_COMPARISON_RE = re.compile(r'^\s*(NOT\s+)?([\w.@]+)\s*(>=|<=|!=|=|<|>|:)\s*"((?:[^"\\]|\\.)*)"\s*$')
_BARE_STRING_RE = re.compile(r'^\s*"((?:[^"\\]|\\.)*)"\s*$')


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 with `Z`, `+00:00` or the client's colon-less `+0000`, any fraction length."""
    value = text.strip().replace("Z", "+00:00")
    match = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(\.\d+)?([+-]\d{2}):?(\d{2})$", value)
    if not match:
        return datetime.fromisoformat(value)
    base, fraction, hours, minutes = match.groups()
    fraction = (fraction or ".0")[1:7].ljust(6, "0")
    return datetime.fromisoformat(f"{base}.{fraction}{hours}:{minutes}")


def format_timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_MESSAGES = (
    ("INFO", "Compiling XLA program for step {n}"),
    ("INFO", "step {n} loss={loss:.4f} tokens/s={tps}"),
    ("INFO", "checkpoint saved to gs://bucket/run-7/step_{n}"),
    ("NOTICE", "TPU runtime heartbeat ok on worker {w}"),
    ("WARNING", "slow host-to-device transfer: {ms} ms on worker {w}"),
    ("WARNING", "preemption notice received for node tpu-v5e-{w}"),
    ("ERROR", "RPC to worker {w} failed: DEADLINE_EXCEEDED after {ms} ms"),
    ("ERROR", "HBM out of memory on chip {w}: tried to allocate {mb} MiB"),
    ("CRITICAL", "TPU runtime crashed: core dump written to /tmp/core.{n}"),
)


def generate_entries(
    project: str, count: int, *, end: datetime | None = None, span: timedelta = timedelta(hours=6), seed: int = 1
) -> list[dict[str, Any]]:
    """`count` LogEntry dicts spread evenly over `span` before `end`, oldest first."""
    rng = random.Random(seed)
    end = end or datetime.now(timezone.utc)
    step = span / max(count, 1)
    entries = []
    for n in range(count):
        severity, template = _MESSAGES[rng.randrange(len(_MESSAGES))]
        worker = rng.randrange(4)
        text = template.format(
            n=n, loss=rng.random() * 3, tps=rng.randrange(1000, 9000), w=worker, ms=rng.randrange(50, 9000), mb=rng.randrange(64, 4096)
        )
        moment = end - span + step * (n + 1)
        resource_type = "tpu_worker" if n % 5 else "gce_instance"
        labels = (
            {"project_id": project, "zone": "us-west4-a", "node_id": "tpubot-v5e", "worker_id": str(worker)}
            if resource_type == "tpu_worker"
            else {"project_id": project, "zone": "us-west4-a", "instance_id": str(1000 + worker)}
        )
        entry: dict[str, Any] = {
            "logName": f"projects/{project}/logs/{'tpu_runtime' if resource_type == 'tpu_worker' else 'syslog'}",
            "resource": {"type": resource_type, "labels": labels},
            "timestamp": format_timestamp(moment),
            "receiveTimestamp": format_timestamp(moment + timedelta(milliseconds=120)),
            "severity": severity,
            "insertId": f"{n:08x}{rng.randrange(16**6):06x}",
            "labels": {"source": "sandbox"},
        }
        if n % 3 == 0:
            entry["jsonPayload"] = {"message": text, "step": n, "worker": worker}
        else:
            entry["textPayload"] = text
        entries.append(entry)
    return entries


class LoggingEmulator:
    """Owns the entries, the 429 switch and the request log; `start()` serves them over HTTP."""

    def __init__(self, project: str = "sandbox-project", entries: list[dict[str, Any]] | None = None):
        self.project = project
        self.entries: list[dict[str, Any]] = entries if entries is not None else generate_entries(project, 500)
        self.requests: list[dict[str, Any]] = []  # request bodies, in arrival order
        self._fail_next = 0
        self._succeed_first = 0
        self.api: DiscoveryApi | None = load_api("logging.v2", "google.logging.v2")
        self.rejected: list[RequestRejected] = []
        self.response_problems: list[str] = []
        self._lock = threading.Lock()
        self._http: ServerThread | None = None

    # --- control ---
    def fail_next(self, count: int, *, after: int = 0) -> None:
        """The next `count` requests get HTTP 429 RESOURCE_EXHAUSTED, after `after` good ones."""
        with self._lock:
            self._fail_next = count
            self._succeed_first = after

    @property
    def url(self) -> str:
        assert self._http is not None, "call start() first"
        return self._http.root

    def start(self, host: str = "127.0.0.1", port: int = 0) -> LoggingEmulator:
        handler = handler_class(self._serve_http, ("POST",), timeout=None, protocol="HTTP/1.0")
        self._http = ServerThread((host, port), handler, "logging-emulator").start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()
            self._http = None

    def __enter__(self) -> LoggingEmulator:
        return self.start() if self._http is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the API ---
    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        status, body = self.handle(http.path, read_body(http))
        reply(http, status, json.dumps(body).encode(), "application/json; charset=UTF-8")

    @property
    def strict(self) -> bool:
        return self.api is not None

    def handle(self, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        url = urlsplit(path)
        if url.path != "/v2/entries:list":
            return 404, error_body(404, f"unknown path {path}")
        try:
            request = json.loads(raw or b"{}")
        except ValueError:
            return 400, error_body(400, "request body is not JSON")
        query = parse_qs(url.query, keep_blank_values=True)
        return held_to_schema(self.api, ("POST", url.path, query, request), lambda: self._list(request),
                              self.rejected, self.response_problems, "logging")

    def _list(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
            if self._fail_next > 0 and self._succeed_first > 0:
                self._succeed_first -= 1
            elif self._fail_next > 0:
                self._fail_next -= 1
                return 429, _quota_error()
            entries = list(self.entries)
        page_size = int(request.get("pageSize") or 50)
        if page_size > 1000:
            return 400, error_body(400, "pageSize must be <= 1000")
        try:
            matcher = compile_filter(request.get("filter") or "")
        except ValueError as exc:
            return 400, error_body(400, f"invalid filter: {exc}")
        selected = [entry for entry in entries if matcher(entry)]
        order = (request.get("orderBy") or "timestamp asc").lower()
        selected.sort(key=lambda e: parse_timestamp(e["timestamp"]), reverse=order.endswith("desc"))
        offset = int(request.get("pageToken") or 0)
        page = selected[offset : offset + page_size]
        body: dict[str, Any] = {"entries": page}
        if offset + page_size < len(selected):
            body["nextPageToken"] = str(offset + page_size)
        return 200, body


def compile_filter(text: str):
    """Entry predicate for the supported subset of the Logging query language."""
    clauses = [_compile_clause(part) for part in _split_top_level(text, " AND ") if part.strip()]
    return lambda entry: all(clause(entry) for clause in clauses)


def _split_top_level(text: str, separator: str) -> list[str]:
    parts, depth, quoted, current, index = [], 0, False, [], 0
    while index < len(text):
        char = text[index]
        if char == "\\" and quoted:
            current.append(text[index : index + 2])
            index += 2
            continue
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        if not quoted and depth == 0 and text.startswith(separator, index):
            parts.append("".join(current))
            current = []
            index += len(separator)
            continue
        current.append(char)
        index += 1
    parts.append("".join(current))
    return parts


def _compile_clause(text: str):
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        options = [_compile_clause(part) for part in _split_top_level(text[1:-1], " OR ")]
        return lambda entry: any(option(entry) for option in options)
    bare = _BARE_STRING_RE.match(text)
    if bare:
        needle = _unquote(bare.group(1)).lower()
        return lambda entry: needle in _payload_text(entry).lower()
    match = _COMPARISON_RE.match(text)
    if not match:
        raise ValueError(f"unsupported clause {text!r}")
    negate, field_name, operator, raw_value = match.groups()
    value = _unquote(raw_value)

    def clause(entry: dict[str, Any]) -> bool:
        result = _compare(entry, field_name, operator, value)
        return not result if negate else result

    return clause


def _compare(entry: dict[str, Any], field_name: str, operator: str, value: str) -> bool:
    if field_name == "timestamp":
        left: Any = parse_timestamp(entry["timestamp"])
        right: Any = parse_timestamp(value)
    elif field_name == "severity":
        left = SEVERITY_NUMBERS.get(entry.get("severity", "DEFAULT"), 0)
        right = SEVERITY_NUMBERS.get(value.upper(), int(value) if value.isdigit() else 0)
    else:
        found = _field(entry, field_name)
        if found is None:
            return operator == "!="
        left, right = str(found).lower(), value.lower()  # string comparisons are case-insensitive
        if operator == ":":
            return right in left
    if operator == ":":
        return left == right
    return {
        "=": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[operator]


def _field(entry: dict[str, Any], dotted: str) -> Any:
    current: Any = entry
    for part in dotted.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def _payload_text(entry: dict[str, Any]) -> str:
    if "textPayload" in entry:
        return entry["textPayload"]
    return json.dumps(entry.get("jsonPayload", {}))


def _unquote(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _quota_error() -> dict[str, Any]:
    return error_body(429, QUOTA_MESSAGE, "RESOURCE_EXHAUSTED", [error_info(
        "RATE_LIMIT_EXCEEDED", "googleapis.com", quota_limit="ReadRequestsPerMinutePerProject",
        quota_limit_value="60", quota_metric="logging.googleapis.com/read_requests",
        service="logging.googleapis.com", consumer="projects/123456789012")])
