"""/healthz, /readyz and Prometheus /metrics on web (in process: tests/in_process_bot.py) and worker;
JSON logs without secrets."""

from __future__ import annotations

import json
import logging

import httpx

from bot.local_stack import free_port
from bot.logging_setup import configure_logging, request_id

CHANNEL = "C0OPS"


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample in exposition text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_health_readiness_and_metrics_count_what_happened(make_bot):
    bot = make_bot(worker_metrics_port=free_port())
    web_app = bot.http()
    assert web_app.get("/healthz").text == "ok"
    assert web_app.get("/readyz").json() == {"ready": True}
    bot.tpu_sandbox.inject_failures(1, http_status=503, path_contains="queuedResources")

    slack = bot.signed_requests()
    slack.slash("up", user="UALICE", channel=CHANNEL)
    slack.slash("status", user="UALICE", channel=CHANNEL)
    slack.slash("launch", user="UALICE", channel=CHANNEL)

    web = web_app.get("/metrics")
    assert web.headers["content-type"].startswith("text/plain")
    assert sample(web.text, "tpubot_ack_seconds_count", kind="command") == 3
    assert sample(web.text, "tpubot_slack_requests_total", kind="command", status="200") == 3
    assert sample(web.text, "tpubot_actions_total", action="provision", outcome="ok") == 1
    assert sample(web.text, "tpubot_actions_total", action="status", outcome="ok") == 1

    worker_url = f"http://127.0.0.1:{bot.settings.worker_metrics_port}/metrics"

    def worker_metrics() -> str:
        try:
            return httpx.get(worker_url).text
        except httpx.ConnectError:  # the worker starts at the bot's first wait
            return ""

    bot.until(lambda: sample(worker_metrics(), "tpubot_jobs_total", function="provision_lease", outcome="ok") >= 1)
    worker = httpx.get(worker_url).text
    assert sample(worker, "tpubot_gcp_errors_total", kind="unavailable") >= 1
    slack.close()
    web_app.close()


def test_json_logs_carry_the_request_id_and_never_a_secret(capsys):
    configure_logging(logging.INFO, log_format="json")
    try:
        token = request_id.set("req-123")
        logging.getLogger("tpubot.test").warning(
            "posting with %s and Authorization: Bearer %s", "xoxb-1234567890-abcdefghijkl", "ya29.secret-token-value")
        request_id.reset(token)
    finally:
        logging.getLogger().handlers.clear()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    entry = json.loads(line)
    assert entry["request_id"] == "req-123" and entry["level"] == "warning" and entry["logger"] == "tpubot.test"
    assert "xoxb-1234567890" not in line and "ya29.secret" not in line
    assert "REDACTED" in entry["message"]
