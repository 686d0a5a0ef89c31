"""The alert webhooks on the web process (issue 32): one route per source.

    POST /alerts/alertmanager       Bearer token, basic auth or ?token=   (ALERTMANAGER_WEBHOOK_TOKEN)
    POST /alerts/cloud-monitoring   ?auth_token= or basic auth            (CLOUD_MONITORING_TOKEN)
    POST /alerts/pagerduty          X-PagerDuty-Signature v1 HMAC         (PAGERDUTY_WEBHOOK_SECRET)

A request passes, in order: the body cap (413), the source's authentication over the raw bytes
(401, and nothing is parsed, logged or written), the vendor's payload shape (400 naming the
field), ALERT_ROUTES (200 and nothing queued when no rule matches: a retry would not match
either). Then the delivery is queued as a worker job behind a first-seen marker on its id
(PagerDuty's event id, else a digest of the body), in one atomic step, and only then answered
202: an accepted alert is in Redis. A replayed delivery is answered 200 and queues nothing; a
state store that cannot take it is a 503, which every one of these senders retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.request_gate import BodyTooLarge, read_capped_body
from bot.settings import Settings
from bot.webhook_auth import pagerduty_ok, token_ok
from handlers.incident_job import ALERT_JOB, AlertJob, alert_job_id
from handlers.incident_payloads import AlertEvent, Ignored, PayloadError, Source, parse_alert
from handlers.incident_routes import route_for

log = logging.getLogger(__name__)

PATHS: dict[Source, str] = {"alertmanager": "/alerts/alertmanager", "cloud-monitoring": "/alerts/cloud-monitoring",
                            "pagerduty": "/alerts/pagerduty"}
SECRET_VARS: dict[Source, str] = {"alertmanager": "ALERTMANAGER_WEBHOOK_TOKEN",
                                  "cloud-monitoring": "CLOUD_MONITORING_TOKEN",
                                  "pagerduty": "PAGERDUTY_WEBHOOK_SECRET"}


def _authenticator(settings: Settings, source: Source) -> tuple[str, Callable[[Request, bytes], bool]]:
    """(the secret, a check of one request against it) for `source`."""
    if source == "alertmanager":
        token = settings.alertmanager_webhook_token.get_secret_value()
        return token, lambda request, body: token_ok(request, token, query_names=("token",), bearer=True)
    if source == "cloud-monitoring":
        token = settings.cloud_monitoring_token.get_secret_value()
        return token, lambda request, body: token_ok(request, token, query_names=("auth_token",), bearer=False)
    secret = settings.pagerduty_webhook_secret.get_secret_value()
    return secret, lambda request, body: pagerduty_ok(request, body, secret)


def pages(settings: Settings, event: AlertEvent) -> bool:
    """Whether the alert's severity (PagerDuty: urgency or priority) asks for the on-call."""
    wanted = set(settings.alert_page_severities)
    return bool(event.severity in wanted or event.labels.get("priority", "") in wanted)


def alert_webhook_routes(settings: Settings, state: dict[str, Any]) -> list[Route]:
    """The three routes; `state["services"]` is filled by the web app's lifespan."""
    routes = settings.alert_route_list()

    def endpoint(source: Source) -> Callable[[Request], Any]:
        secret, authentic = _authenticator(settings, source)

        async def receive(request: Request) -> Response:
            response = await _answer(request, source, secret, authentic)
            state["services"].metrics.requests.labels(f"alert-{source}", str(response.status_code)).inc()
            return response

        return receive

    async def _answer(request: Request, source: Source, secret: str,
                      authentic: Callable[[Request, bytes], bool]) -> Response:
        if not secret or not routes:
            missing = SECRET_VARS[source] if not secret else "ALERT_ROUTES"
            return JSONResponse({"error": f"{source} alerts are not enabled here: set {missing}"}, status_code=404)
        try:
            body = await read_capped_body(request, settings.alert_max_body_bytes)
        except BodyTooLarge:
            return JSONResponse({"error": f"request body over {settings.alert_max_body_bytes} bytes"}, status_code=413)
        if not authentic(request, body):
            log.info("refused an alert webhook to %s: bad or missing credentials", PATHS[source])
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        try:
            event = parse_alert(source, body)
        except Ignored as ignored:
            return JSONResponse({"ignored": str(ignored)}, status_code=200)
        except PayloadError as error:
            return JSONResponse({"error": f"malformed {source} payload: {error}"}, status_code=400)
        route = route_for(routes, event)
        if route is None:
            log.warning("an alert from %s matched no ALERT_ROUTES rule; nothing posted", source)
            return JSONResponse({"routed": False, "reason": "no ALERT_ROUTES rule matches this alert"})
        svc = state["services"]
        try:
            outcome = await svc.jobs.enqueue_first_delivery(
                ALERT_JOB, AlertJob(alert=event.model_dump(mode="json"), channel=route.channel,
                                    page=pages(settings, event), storm_threads=settings.alert_storm_threads,
                                    storm_window=settings.alert_storm_window.total_seconds()),
                job_id=alert_job_id(event), markers=[svc.dedupe.marker("alert", f"{source}:{event.delivery}")],
                marker_ttl=svc.dedupe.ttl_seconds)
        except RedisError:
            log.error("state store unavailable; an alert from %s was refused with 503 for its sender to retry", source)
            return JSONResponse({"error": "the state store is unavailable; send it again"}, status_code=503)
        if outcome != 0:
            return JSONResponse({"duplicate": True, "delivery": event.delivery}, status_code=200)
        return JSONResponse({"queued": True, "delivery": event.delivery, "channel": route.channel}, status_code=202)

    return [Route(PATHS[source], endpoint(source), methods=["POST"]) for source in PATHS]
