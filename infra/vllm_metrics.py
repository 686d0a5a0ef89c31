"""What a vLLM server says of itself besides the model: its Prometheus `/metrics` and its version.

- Is anyone using the model (the idle clock)? vLLM exposes (reference/gemma4-wire.md) gauges
  `vllm:num_requests_running` and `vllm:num_requests_waiting` and counters
  `vllm:request_success_total` (one series per finished_reason) and `vllm:generation_tokens_total`.
  A reading that cannot be fetched or parsed is `None`: callers must treat "unknown" as "not idle"
  (a broken scrape never tears a TPU down).
- `model_health`'s engine gauges: running, waiting and the KV cache gauge,
  `vllm:kv_cache_usage_perc` (a fraction, 1 = full; `vllm:gpu_cache_usage_perc` in older
  releases); unlike the idle reading, each gauge may be absent on its own.
- `GET /version` answers `{"version": "0.x.y"}` (vLLM's API server; outside `/v1`, so no API key).
  When it is missing, the version is read from a response's `system_fingerprint`
  (`vllm-<version>-…`, reference/gemma4-wire.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success_total"
GENERATION = "vllm:generation_tokens_total"
_REQUIRED = (RUNNING, WAITING, SUCCESS, GENERATION)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_FINGERPRINT_VERSION = re.compile(r"^vllm-(\d+\.\d+[^-\s]*)")
MAX_BYTES = 2_000_000  # a metrics page is a few KiB; anything huge is not vLLM


@dataclass(frozen=True)
class VllmUsage:
    running: float
    waiting: float
    requests: float  # finished requests, all finish reasons
    output_tokens: float

    @property
    def busy(self) -> bool:
        return self.running > 0 or self.waiting > 0


@dataclass(frozen=True)
class EngineGauges:
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # fraction of the KV cache in use, 0..1
    error: str = ""


def server_root(endpoint: str) -> str:
    """`http://IP:8000/v1` (the lease's endpoint) -> `http://IP:8000`."""
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def metrics_url(endpoint: str) -> str:
    return f"{server_root(endpoint)}/metrics"


def _summed(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Every series of each of `names`, summed; raises what the parser raises on text that is not Prometheus."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # The parser strips `_total` from counter family names but keeps it on samples.
            if sample.name in names:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


_NOT_PROMETHEUS = (ValueError, TypeError, IndexError, KeyError)


def parse_usage(text: str) -> VllmUsage | None:
    """Sum every series of the four metrics; None if the text is not vLLM's Prometheus output."""
    try:
        totals = _summed(text, _REQUIRED)
    except _NOT_PROMETHEUS:
        return None
    if any(name not in totals for name in _REQUIRED):
        return None
    return VllmUsage(running=totals[RUNNING], waiting=totals[WAITING], requests=totals[SUCCESS],
                     output_tokens=totals[GENERATION])


async def read_usage(endpoint: str, *, timeout: float = 5.0) -> VllmUsage | None:
    """Fetch and parse; any network error, non-200 answer or unparsable body is None."""
    if not endpoint:
        return None
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(metrics_url(endpoint))
    except (httpx.HTTPError, OSError):
        return None
    if response.status_code != 200 or len(response.content) > MAX_BYTES:
        return None
    try:
        text = response.content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return parse_usage(text)


def parse_gauges(text: str) -> EngineGauges:
    try:
        totals = _summed(text, (RUNNING, WAITING, *KV_USAGE))
    except _NOT_PROMETHEUS:
        return EngineGauges(error="/metrics is not Prometheus text")
    kv = next((totals[name] for name in KV_USAGE if name in totals), None)
    gauges = EngineGauges(running=totals.get(RUNNING), waiting=totals.get(WAITING), kv_usage=kv)
    if gauges.running is None and gauges.waiting is None and kv is None:
        return EngineGauges(error="/metrics carries none of vLLM's engine gauges")
    return gauges


async def read_gauges(endpoint: str, *, timeout: float = 5.0) -> EngineGauges:
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(metrics_url(endpoint))
    except httpx.HTTPError as error:
        return EngineGauges(error=f"/metrics did not answer ({type(error).__name__})")
    if response.status_code != 200:
        return EngineGauges(error=f"HTTP {response.status_code} from /metrics")
    if len(response.content) > MAX_BYTES:
        return EngineGauges(error="/metrics answered with more than a metrics page")
    return parse_gauges(response.content.decode("utf-8", "replace"))


async def read_version(endpoint: str, *, timeout: float = 5.0) -> str:
    """The server's vLLM version, or "" when it does not say."""
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(f"{server_root(endpoint)}/version")
        if response.status_code == 200:
            return str(response.json().get("version") or "")
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return ""


def version_from_fingerprint(fingerprint: str) -> str:
    match = _FINGERPRINT_VERSION.match(fingerprint or "")
    return match.group(1) if match else ""
