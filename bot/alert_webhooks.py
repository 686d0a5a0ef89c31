"""The alert webhooks on the web process (issues 32 and 42): one route per source.

    POST /alerts/alertmanager       Bearer token, basic auth or ?token=   (ALERTMANAGER_WEBHOOK_TOKEN)
    POST /alerts/cloud-monitoring   ?auth_token= or basic auth            (CLOUD_MONITORING_TOKEN)
    POST /alerts/pagerduty          X-PagerDuty-Signature v1 HMAC         (PAGERDUTY_WEBHOOK_SECRET)

A request passes, in order: the source's authentication (401 with a Basic challenge, and nothing
is read, parsed, logged or written; the token sources are checked before any of the body is read,
PagerDuty's signature over the raw bytes of a body read under ALERT_MAX_BODY_BYTES), the vendor's
payload shape (400 naming the field; a source's own test or ping is answered 200 and logged),
ALERT_ROUTES (200 and nothing queued when no rule matches: a retry would not match either).

An Alertmanager group is parsed as it arrives (handlers/alertmanager_payload.py). Alertmanager
retries only a 5xx and drops a 4xx unreported, so a valid group is never refused with a 4xx: a
body past ALERTMANAGER_MAX_GROUP_BYTES (64 MB, some 60,000 alerts: not a real group, and more
than one request should hold) gets a 507, which it retries and reports as a failing notification,
and whose message says to set `max_alerts`. A body that takes longer than ALERT_READ_TIMEOUT to
arrive gets a 503, whatever its source.

Then the delivery is queued as a worker job behind first-seen markers, in one atomic step, and
only then answered 202: an accepted alert is in Redis. The markers tell a retry from a new
delivery by the delivery's own id where the sender has one, else by how soon the same bytes
come back (handlers/alert_delivery.py). A retry is answered 200 and queues nothing.

Every answer comes within the senders' deadlines: PagerDuty waits 5 s for a 2xx and retries
otherwise; Alertmanager gives a notification max(group_interval, 10 s) unless its webhook_config
sets a shorter `timeout`; Cloud Monitoring publishes none. The answer gets QUEUE_BUDGET_SECONDS
from the request's arrival (the body's reading counts), and the queueing at least
QUEUE_FLOOR_SECONDS: when Redis does not answer in time (a failover, a stalled primary) the
answer is a 503, which every one of them retries, and the queueing goes on; if it lands, the
retry finds its markers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.request_gate import BodyTooLarge, read_capped_body
from bot.settings import Settings
from bot.webhook_auth import BASIC_CHALLENGE, pagerduty_ok, token_ok, webhook_id
from handlers.alert_delivery import delivery_markers
from handlers.alert_severity import SeverityOrder
from handlers.alertmanager_payload import AlertmanagerReader, GroupTooLarge
from handlers.incident_job import ALERT_JOB, AlertJob, alert_job_id
from handlers.incident_payloads import AlertEvent, Ignored, PayloadError, Ping, Source, parse_alert
from handlers.incident_routes import route_for
from handlers.late_answers import REQUEST_STARTED, LateAnswers

log = logging.getLogger(__name__)

PATHS: dict[Source, str] = {"alertmanager": "/alerts/alertmanager", "cloud-monitoring": "/alerts/cloud-monitoring",
                            "pagerduty": "/alerts/pagerduty"}
SECRET_VARS: dict[Source, str] = {"alertmanager": "ALERTMANAGER_WEBHOOK_TOKEN",
                                  "cloud-monitoring": "CLOUD_MONITORING_TOKEN",
                                  "pagerduty": "PAGERDUTY_WEBHOOK_SECRET"}
# The answer's budget, counted from the request's arrival: PagerDuty's 5 s less the network's part.
# PagerDuty bodies are at most 256 KB, read, checked and parsed in milliseconds.
QUEUE_BUDGET_SECONDS = 3.0
# A healthy Redis queues in milliseconds: a body that took the whole budget to arrive (a large
# group on a slow link) still gets this long, so it is not refused while nothing is wrong.
QUEUE_FLOOR_SECONDS = 0.5
# Queueings still waiting on Redis after their 503, each holding its parsed delivery and one of
# the job pool's REDIS_POOL_SIZE (32) connections. Past this many, Redis is down rather than slow:
# a new delivery is answered 503 at once, before anything of it is queued (nor a connection waited
# for, which the web's own jobs need too), and its sender's retry brings it back.
LATE_QUEUEINGS_MAX = 16

def unauthorized() -> Response:
    # The challenge is what Cloud Monitoring's basic-auth channel waits for before it sends its credentials.
    return JSONResponse({"error": "unauthorized"}, status_code=401, headers={"www-authenticate": BASIC_CHALLENGE})


async def read_alertmanager(request: Request, order: SeverityOrder, max_bytes: int) -> AlertEvent:
    """The group, parsed as its chunks arrive (in a thread: a group of thousands is CPU work);
    GroupTooLarge past `max_bytes`."""
    reader = AlertmanagerReader(order, max_bytes=max_bytes)
    async for chunk in request.stream():
        if chunk:
            await asyncio.to_thread(reader.feed, chunk)
    return reader.finish()


def alert_webhook_routes(settings: Settings, state: dict[str, Any]) -> list[Route]:
    """The three routes; `state["services"]` is filled by the web app's lifespan."""
    routes = settings.alert_route_list()
    order = SeverityOrder(tuple(settings.alert_page_severities))
    queueing: LateAnswers[int] = LateAnswers(budget_seconds=QUEUE_BUDGET_SECONDS, floor_seconds=QUEUE_FLOOR_SECONDS,
                                             max_pending=LATE_QUEUEINGS_MAX)
    secret_of = {"alertmanager": settings.alertmanager_webhook_token.get_secret_value(),
               "cloud-monitoring": settings.cloud_monitoring_token.get_secret_value(),
               "pagerduty": settings.pagerduty_webhook_secret.get_secret_value()}

    def endpoint(source: Source) -> Callable[[Request], Any]:
        async def receive(request: Request) -> Response:
            arrived = time.time()  # the delivery's time when its source sends none (AlertJob.accepted_at)
            started = REQUEST_STARTED.set(time.perf_counter())  # the queueing budget counts from here
            try:
                response = await _answer(request, source, secret_of[source], arrived)
            finally:
                REQUEST_STARTED.reset(started)
            state["services"].metrics.requests.labels(f"alert-{source}", str(response.status_code)).inc()
            return response

        return receive

    async def _read(request: Request, source: Source, secret: str) -> AlertEvent | Response:
        """The authenticated delivery, or the answer that refuses it."""
        if source != "pagerduty" and not token_ok(
                request, secret, query_names=("token",) if source == "alertmanager" else ("auth_token",),
                bearer=source == "alertmanager"):
            return _refused(source)
        if source == "alertmanager":
            return await read_alertmanager(request, order, settings.alertmanager_max_group_bytes)
        try:
            body = await read_capped_body(request, settings.alert_max_body_bytes)
        except BodyTooLarge:
            return JSONResponse({"error": f"request body over {settings.alert_max_body_bytes} bytes"}, status_code=413)
        if source == "pagerduty" and not pagerduty_ok(request, body, secret):
            return _refused(source)
        return parse_alert(source, body)

    def _refused(source: Source) -> Response:
        log.info("refused an alert webhook to %s: bad or missing credentials", PATHS[source])
        return unauthorized()

    async def _answer(request: Request, source: Source, secret: str, arrived: float) -> Response:
        if not secret or not routes:
            missing = SECRET_VARS[source] if not secret else "ALERT_ROUTES"
            return JSONResponse({"error": f"{source} alerts are not enabled here: set {missing}"}, status_code=404)
        try:
            async with asyncio.timeout(settings.alert_read_timeout.total_seconds()):
                read = await _read(request, source, secret)
        except TimeoutError:
            log.warning("a delivery to %s took over %.0fs to arrive (ALERT_READ_TIMEOUT): answered 503 for its sender "
                        "to retry", PATHS[source], settings.alert_read_timeout.total_seconds())
            return JSONResponse({"error": "the body took too long to arrive; send it again"}, status_code=503)
        except GroupTooLarge as error:
            log.error("refused %s with 507: set max_alerts on the Alertmanager receiver (or raise "
                      "ALERTMANAGER_MAX_GROUP_BYTES); Alertmanager retries it and reports it failing", error)
            return JSONResponse({"error": f"{error} (ALERTMANAGER_MAX_GROUP_BYTES) is not read: set max_alerts on "
                                          "this receiver"}, status_code=507)
        except ClientDisconnect:  # the sender gave up mid-body: nobody to answer, nothing to keep
            log.info("a sender of %s went away before its body was read", PATHS[source])
            return Response(status_code=400)
        except Ping as ping:
            log.info("%s reached %s: answered 200, nothing posted", ping, PATHS[source])
            return JSONResponse({"ok": True, "test": str(ping)}, status_code=200)
        except Ignored as ignored:
            log.info("ignored a delivery to %s: %s", PATHS[source], ignored)
            return JSONResponse({"ignored": str(ignored)}, status_code=200)
        except PayloadError as error:
            return JSONResponse({"error": f"malformed {source} payload: {error}"}, status_code=400)
        if isinstance(read, Response):
            return read
        return await _queue(request, source, read, arrived)

    async def _queue(request: Request, source: Source, event: AlertEvent, arrived: float) -> Response:
        route = route_for(routes, event)
        if route is None:
            log.warning("an alert from %s matched no ALERT_ROUTES rule; nothing posted", source)
            return JSONResponse({"routed": False, "reason": "no ALERT_ROUTES rule matches this alert"})
        if queueing.full:
            log.error("%d alerts answered 503 are still waiting on the state store; an alert from %s was answered 503 "
                      "at once, nothing of it queued, for its sender to retry", queueing.pending, source)
            return JSONResponse({"error": "the state store is not answering; send it again"}, status_code=503)
        svc = state["services"]
        markers, kept = delivery_markers(svc.dedupe, event, webhook_id=webhook_id(request),
                                         group_interval=settings.alertmanager_group_interval)
        reason = order.page_reason(event)
        job = AlertJob(alert=event.model_dump(mode="json"), channel=route.channel, page=bool(reason), page_reason=reason,
                       storm_threads=settings.alert_storm_threads,
                       storm_window=settings.alert_storm_window.total_seconds(), route=route.rule, accepted_at=arrived)
        work = svc.jobs.enqueue_first_delivery(ALERT_JOB, job, job_id=alert_job_id(event, arrived),
                                               markers=markers, marker_ttl=kept)
        try:
            outcome = await queueing.within_budget(work, _late(source), _failed_late(source))
        except RedisError:
            log.error("state store unavailable; an alert from %s was refused with 503 for its sender to retry", source)
            return JSONResponse({"error": "the state store is unavailable; send it again"}, status_code=503)
        if outcome is None:
            log.error("state store did not answer within %.0fs; an alert from %s was refused with 503 for its sender "
                      "to retry (its queueing goes on)", QUEUE_BUDGET_SECONDS, source)
            return JSONResponse({"error": "the state store did not answer in time; send it again"}, status_code=503)
        if outcome != 0:
            return JSONResponse({"duplicate": True, "delivery": event.delivery}, status_code=200)
        return JSONResponse({"queued": True, "delivery": event.delivery, "channel": route.channel}, status_code=202)

    return [Route(PATHS[source], endpoint(source), methods=["POST"]) for source in PATHS]


def _late(source: str) -> Callable[[int], Any]:
    async def queued_late(outcome: int) -> None:
        if outcome == 0:
            log.warning("an alert from %s answered 503 was queued after all: its sender's retry will be answered "
                        "as a duplicate", source)
        else:  # its markers, or its job, were there already: an earlier copy had been queued
            log.warning("an alert from %s answered 503 was a duplicate of one already queued (outcome %d): nothing "
                        "new was queued", source, outcome)

    return queued_late


def _failed_late(source: str) -> Callable[[], Any]:
    async def failed() -> None:
        log.warning("queueing an alert from %s that was answered 503 failed afterwards: it may or may not have landed "
                    "(Redis can still run a command this process gave up on); its sender's retry is queued, or "
                    "answered as a duplicate if it did", source)

    return failed
