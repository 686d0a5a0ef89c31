"""One reading of a vLLM endpoint's Prometheus `/metrics`: is anyone using the model?

vLLM exposes (reference/gemma4-wire.md) gauges `vllm:num_requests_running` and
`vllm:num_requests_waiting` and counters `vllm:request_success_total` (one series per
finished_reason) and `vllm:generation_tokens_total`. A reading that cannot be fetched or
parsed is `None`: callers must treat "unknown" as "not idle" (a broken scrape never tears a
TPU down).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success_total"
GENERATION = "vllm:generation_tokens_total"
_REQUIRED = (RUNNING, WAITING, SUCCESS, GENERATION)
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


def metrics_url(endpoint: str) -> str:
    """`http://IP:8000/v1` (the lease's endpoint) -> `http://IP:8000/metrics`."""
    base = endpoint.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return f"{base}/metrics"


def parse_usage(text: str) -> VllmUsage | None:
    """Sum every series of the four metrics; None if the text is not vLLM's Prometheus output."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                # The parser strips `_total` from counter family names but keeps it on samples.
                if sample.name in _REQUIRED:
                    totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError, KeyError):
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
