"""The `web` process: Slack's HTTP endpoint plus health, readiness and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import secrets
import time
from collections.abc import AsyncIterator

from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.alert_webhooks import alert_webhook_routes
from bot.bolt_form_adapter import ParsedFormDispatch, form_bolt_misreads
from bot.logging_setup import request_id
from bot.request_gate import BodyTooLarge, Refusal, encoding_refusal, read_capped_body, response_url_allowed, signature_refusal
from bot.settings import Settings
from bot.wiring import WEB_REDIS_TIMEOUT_SECONDS, build_services, slack_client_from, slack_http_session
from handlers.payload_guard import interaction_body, malformed_command, malformed_event, malformed_reason, response_urls
from handlers.late_answers import REQUEST_STARTED, finish_acked_work
from handlers.slack_app import SingleFlightAuthorize, build_bolt_app

log = logging.getLogger(__name__)
# How long start-up waits for auth.test before serving anyway (a request then retries it).
AUTH_WARM_TIMEOUT = 5.0
# A readiness probe answers within its own deadline, whatever the state store's command timeout.
READY_PING_TIMEOUT = 1.0


def settle_heap() -> None:
    """Keep the garbage collector's full passes off the ack path.

    After start-up the process holds ~150k long-lived objects (bolt, the google and openai
    clients, pydantic models), and every full collection walked all of them: a 50-100 ms pause
    in the middle of a burst of acks (measured under benchmarks/ack_latency.py). Frozen, they
    are never scanned again; full passes over what requests leave behind take 2-4 ms.
    """
    gc.collect()
    gc.freeze()


def _request_kind(content_type: str, body: bytes) -> str:
    if "json" in content_type:
        return "event"
    return "interaction" if body.startswith(b"payload=") else "command"


def _replayed(request: Request, body: bytes) -> Request:
    """`request` with its body to be read again: the gate read the stream (under its cap), and
    bolt's adapter reads the body from the request it is handed."""
    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request(request.scope, receive)


def create_web_app(settings: Settings, *, redis_url: str, own_process: bool = False) -> Starlette:
    """`own_process`: the app is all this process runs (`tpubot serve`), so its heap may be frozen."""
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        session = slack_http_session()
        client = slack_client_from(settings, session=session)
        svc, redis, pool = await build_services(settings, redis_url=redis_url, slack_client=client,
                                                     redis_timeout=WEB_REDIS_TIMEOUT_SECONDS)
        # bolt's own client has no shared session: bolt deep-copies each request, client included,
        # for its lazy listeners, and an aiohttp session cannot be copied. Listeners make few
        # Slack calls of their own; the services' client (notifier, directory) keeps the session.
        bolt_client = slack_client_from(settings)
        authorize = SingleFlightAuthorize(bolt_client)
        bolt = build_bolt_app(svc, client=bolt_client, authorize=authorize,
                              signing_secret=settings.slack_signing_secret.get_secret_value())
        # auth.test now, not in the first request before its ack (Slack allows 3 s for it).
        await authorize.warm(timeout=AUTH_WARM_TIMEOUT)
        state.update(handler=AsyncSlackRequestHandler(bolt), redis=redis, services=svc,
                     parsed_forms=ParsedFormDispatch(bolt, settings.slack_signing_secret.get_secret_value()))
        if own_process:
            settle_heap()
        started_before = asyncio.all_tasks()
        try:
            yield
        finally:
            await finish_acked_work(started_before)  # it finishes and is answered before its pool closes
            await pool.aclose()
            await redis.aclose()
            await session.close()

    secret = settings.slack_signing_secret.get_secret_value()
    hosts = settings.response_url_hosts()

    async def slack_events(request: Request) -> Response:
        started = time.perf_counter()
        try:
            body = await read_capped_body(request, settings.slack_max_body_bytes)
        except BodyTooLarge:
            return _counted("unknown", started, JSONResponse(
                {"error": f"request body over {settings.slack_max_body_bytes} bytes"}, status_code=413))
        kind = _request_kind(request.headers.get("content-type", ""), body)
        # Signature first, over the raw bytes: nothing unsigned is parsed, logged or handed to bolt.
        refusal = signature_refusal(request.scope["headers"], body, secret) or encoding_refusal(body)
        if refusal is None:
            bad_url = next((url for url in response_urls(body) if not response_url_allowed(url, hosts)), None)
            if bad_url is not None:
                refusal = Refusal(400, "malformed request: response_url is not a Slack host")
        if refusal is not None:
            return _counted(kind, started, JSONResponse({"error": refusal.error}, status_code=refusal.status))
        token = request_id.set(request.headers.get("x-slack-request-timestamp", "") + "-" + secrets.token_hex(4))
        started_token = REQUEST_STARTED.set(started)
        response: Response
        try:
            interaction = interaction_body(body)
            if interaction is not None:
                reason = malformed_reason(interaction)
            elif kind == "event" or body.lstrip().startswith(b"{"):
                reason = malformed_event(body)
            else:
                reason = malformed_command(body)
            misread = interaction is None and form_bolt_misreads(body) is not None
            if reason:
                # One line, naming the field, never the body: only Slack can sign, so this is a
                # leaked secret or a bug upstream, and someone should see it without a flood.
                log.warning("refused a signed Slack request (%s): malformed %s", kind, reason)
                response = JSONResponse({"error": f"malformed {reason}"}, status_code=400)
            elif misread:
                response = await state["parsed_forms"].dispatch(body, request.headers)
            else:
                # bolt's documented path: its adapter parses the raw body and checks the signature again.
                response = await state["handler"].handle(_replayed(request, body))
        except Exception:
            # bolt builds its context (user, channel…) before running listeners and raises on
            # structurally impossible payloads: answer like bolt would, never with a 500.
            log.warning("rejected a Slack request bolt could not parse (%s)", kind)
            response = JSONResponse({"error": "malformed request"}, status_code=400)
        finally:
            REQUEST_STARTED.reset(started_token)
            request_id.reset(token)
        return _counted(kind, started, response)

    def _counted(kind: str, started: float, response: Response) -> Response:
        """Count the answer (refused or not) in the ack metrics and return it."""
        metrics = state["services"].metrics
        metrics.ack_seconds.labels(kind).observe(time.perf_counter() - started)
        metrics.requests.labels(kind, str(response.status_code)).inc()
        return response

    async def prometheus(request: Request) -> Response:
        metrics = state["services"].metrics
        return Response(metrics.render(), media_type=metrics.content_type)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        try:
            await asyncio.wait_for(state["redis"].ping(), READY_PING_TIMEOUT)
        except Exception as error:  # readiness reports any failure; it must never raise
            return JSONResponse({"ready": False, "redis": type(error).__name__}, status_code=503)
        return JSONResponse({"ready": True})

    return Starlette(
        routes=[
            Route("/slack/events", slack_events, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", prometheus),
            *alert_webhook_routes(settings, state),
        ],
        lifespan=lifespan,
    )


def run_web_server(settings: Settings, *, redis_url: str, host: str, port: int) -> None:
    """`tpubot serve`: the app on uvicorn, logging through the process's one setup."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                log.info("listening on http://%s:%d (/slack/events, /healthz, /readyz, /metrics)", host, port)

    config = uvicorn.Config(create_web_app(settings, redis_url=redis_url, own_process=True), host=host, port=port,
                            log_config=None, log_level="warning", access_log=False, lifespan="on")
    Server(config).run()
