"""Prometheus metrics, one registry per process (no module-level globals), exposed at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Slack's ack deadline is 3 s; the interesting part of the distribution is well below it.
ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("tpubot_slack_requests_total", "Slack requests by kind and HTTP status",
                                ["kind", "status"], registry=self.registry)
        self.ack_seconds = Histogram("tpubot_ack_seconds", "Time to answer a Slack request",
                                     ["kind"], buckets=ACK_BUCKETS, registry=self.registry)
        self.actions = Counter("tpubot_actions_total", "Actions run, by name and outcome",
                               ["action", "outcome"], registry=self.registry)
        self.jobs = Counter("tpubot_jobs_total", "Worker jobs finished, by function and outcome",
                            ["function", "outcome"], registry=self.registry)
        self.alerts = Counter("tpubot_alerts_total", "On-call alerts posted, by kind", ["kind"], registry=self.registry)
        self.gcp_errors = Counter("tpubot_gcp_errors_total", "Classified GCP errors, by kind", ["kind"],
                                  registry=self.registry)
        self.model_calls = Counter("tpubot_model_calls_total", "Calls to the Gemma endpoint, by outcome",
                                   ["outcome"], registry=self.registry)
        self.model_tokens = Counter("tpubot_model_tokens_total", "Tokens sent to / received from the model",
                                    ["direction"], registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
