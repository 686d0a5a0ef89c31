"""What `model_health` reads from a vLLM server besides the model itself: its version and engine gauges.

- `GET /version` answers `{"version": "0.x.y"}` (vLLM's API server; outside `/v1`, so no API key).
  When it is missing, the version is read from a response's `system_fingerprint`
  (`vllm-<version>-…`, reference/gemma4-wire.md).
- `/metrics` (Prometheus): `vllm:num_requests_running`, `vllm:num_requests_waiting` and the KV
  cache gauge, `vllm:kv_cache_usage_perc` (a fraction, 1 = full; `vllm:gpu_cache_usage_perc` in
  older releases). Unlike infra/vllm_metrics.py's idle reading, each gauge may be absent on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infra.vllm_metrics import MAX_BYTES, RUNNING, WAITING, metrics_url

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_FINGERPRINT_VERSION = re.compile(r"^vllm-(\d+\.\d+[^-\s]*)")


@dataclass(frozen=True)
class EngineGauges:
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # fraction of the KV cache in use, 0..1
    error: str = ""


def server_root(endpoint: str) -> str:
    """`http://IP:8000/v1` -> `http://IP:8000`."""
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def parse_gauges(text: str) -> EngineGauges:
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (RUNNING, WAITING, *KV_USAGE):
                    totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError, KeyError):
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
