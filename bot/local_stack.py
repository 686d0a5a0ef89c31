"""Everything in one process: embedded Redis, the sandbox emulators, web and worker.

`tpubot shell` runs on this, so a newcomer needs nothing installed and no credentials. The
web and worker are the same code the Procfile runs; only their transport to the outside
world (Slack, GCP) is pointed at local stand-ins.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import socket
import sys
import threading
import traceback
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import uvicorn
from pydantic import SecretStr

from bot.settings import Settings
from bot.web import create_web_app
from bot.worker import build_worker
from infra.sandbox.vllm.served_version import served_version_for
from infra.sandbox.slack_requests import SlackRequests
from infra.state.redis_server import RedisEndpoint, ensure_redis


SANDBOX_POLL_INTERVAL = timedelta(milliseconds=500)
# How long a sandbox node's "vLLM" takes to come up after ACTIVE on a cold boot (a warm one: about half),
# long enough that its boot phases show on the card before READY.
SANDBOX_MODEL_BOOT_SECONDS = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _UvicornThread:
    """The web app on a loopback port it holds from the start: the socket is bound here and handed
    to uvicorn, so no other process can take the port between choosing and serving it."""

    def __init__(self, app: Any) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, name="tpubot-web",
                                       daemon=True)

    def start(self, timeout: float = 15.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


class _WorkerThread:
    def __init__(self, settings: Settings, redis_url: str) -> None:
        self._settings = settings
        self._redis_url = redis_url
        self._ready = threading.Event()
        self.worker = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name="tpubot-worker", daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.worker = build_worker(self._settings, redis_url=self._redis_url, handle_signals=False)
        # Ready once the loop runs, i.e. inside run() after it made main_task: a stop() before
        # that would find nothing to cancel, and the worker would then run on, unstoppable.
        self.loop.call_soon(self._ready.set)
        try:
            self.worker.run()
        except asyncio.CancelledError:
            pass

    def start(self) -> None:
        self.thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the stack's worker did not start within 30 s")

    def stop(self) -> None:
        if self.loop and self.worker:
            self.loop.call_soon_threadsafe(self.worker.handle_sig, signal.SIGTERM)
        self.thread.join(timeout=10)
        if self.thread.is_alive():
            # Left running, it would take the jobs of whoever uses this Redis database next.
            frame = sys._current_frames().get(self.thread.ident or -1)
            where = "".join(traceback.format_stack(frame)[-12:]) if frame is not None else "(no frame)"
            for task in list(asyncio.all_tasks(self.loop)) if self.loop else []:
                where += f"\ntask {task.get_name()} cancelling={task.cancelling()}: " + " -> ".join(_awaiting(task))
            raise RuntimeError(f"the stack's worker did not stop within 10 s; it is at:\n{where}")


def _awaiting(task: asyncio.Task) -> list[str]:
    """The chain of awaits a suspended task is in, innermost last (for a worker that will not stop)."""
    chain, awaited = [], task.get_coro()
    while awaited is not None and len(chain) < 40:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        chain.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}" if frame else type(awaited).__name__)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return chain


def _check_reachable(redis_url: str) -> None:
    """Fail at once (one line, bot/cli/errors.py) rather than start a stack on a Redis that is not there."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


@dataclass
class LocalStack:
    settings: Settings
    run_worker: bool = True
    run_web: bool = True  # False: no Slack-facing web app (`tpubot mcp` needs only the worker; `tpubot dev` runs its own)
    tpu_zones: dict | None = None
    redis: RedisEndpoint | None = None
    tpu_sandbox: Any = None
    slack: Any = None
    web_url: str = ""
    sandbox_model: bool = False  # start a sandbox vLLM (labelled heuristic) unless GEMMA_BASE_URL is set
    model_emulator: Any = None
    logging_emulator: Any = None
    world: Any = None  # infra.sandbox.world.SandboxWorld; None: the default world (tpu_zones if given)
    cloud: Any = None  # the running CloudSandbox (TPU + project APIs)
    node_models: Any = None  # sandbox vLLM per ACTIVE node
    overrides: dict[str, Any] = field(default_factory=dict)  # what start() pointed at the stand-ins
    _web: _UvicornThread | None = field(default=None, repr=False)
    _worker: _WorkerThread | None = field(default=None, repr=False)

    def _start_cloud(self) -> dict[str, Any]:
        """The emulated project, with a labelled sandbox vLLM on every ACTIVE node at http://127.0.1.N:PORT/v1."""
        from infra.sandbox.node_models import NodeModels
        from infra.sandbox.world import CloudSandbox, SandboxWorld

        world = self.world or (SandboxWorld(zones=dict(self.tpu_zones)) if self.tpu_zones else SandboxWorld())
        self.node_models = NodeModels(model=self.settings.model_name, max_model_len=self.settings.vllm_max_model_len,
                                      preferred_port=self.settings.model_port,
                                      served_version=served_version_for(self.settings.vllm_image),
                                      boot_seconds=SANDBOX_MODEL_BOOT_SECONDS * self.settings.sandbox_time_scale)
        self.cloud = CloudSandbox(world, project=self.settings.project, time_scale=self.settings.sandbox_time_scale,
                                  on_node_ready=self.node_models.on_node_ready,
                                  on_node_gone=self.node_models.on_node_gone).start()
        self.node_models.boot_api_key = self.cloud.boot_secret
        self.node_models.publish = self.cloud.tpu.set_guest_attributes
        self.node_models.cache_location = self.cloud.boot_cache
        self.node_models.caches = self.cloud.compile_caches
        self.tpu_sandbox = self.cloud.tpu
        overrides = {key: value for key, value in self.cloud.endpoint_overrides().items() if not getattr(self.settings, key)}
        overrides["model_port"] = self.node_models.port
        return overrides

    def start(self) -> "LocalStack":
        if self.settings.redis_url:
            _check_reachable(self.settings.redis_url)
        self.redis = ensure_redis(self.settings.redis_url)
        overrides: dict[str, Any] = {"redis_url": self.redis.url}
        if self.settings.mode.is_sandbox:
            # The emulated cloud moves in seconds, not minutes: look at it as often.
            overrides["poll_interval"] = min(self.settings.poll_interval, SANDBOX_POLL_INTERVAL)
        if self.settings.mode.is_sandbox and not self.settings.tpu_api_endpoint:
            overrides.update(self._start_cloud())
        if self.settings.mode.is_sandbox and not self.settings.logging_api_endpoint:
            from infra.sandbox.logging_api import LoggingEmulator, generate_entries

            self.logging_emulator = LoggingEmulator(self.settings.project,
                                                    generate_entries(self.settings.project, 500)).start()
            overrides["logging_api_endpoint"] = self.logging_emulator.url
        if self.sandbox_model and not self.settings.gemma_base_url:
            from infra.sandbox.vllm import LatencyModel, VllmEmulator

            self.model_emulator = VllmEmulator(latency=LatencyModel().scaled(0.25),
                                               served_version=served_version_for(self.settings.vllm_image))
            overrides["gemma_base_url"] = self.model_emulator.start()
        if not self.settings.slack_api_url:
            from infra.sandbox.slack_api import SlackApiSandbox

            token = self.settings.slack_bot_token.get_secret_value() or "xoxb-sandbox-" + secrets.token_hex(8)
            self.slack = SlackApiSandbox(token=token)
            overrides["slack_api_url"] = self.slack.start()
            overrides["slack_bot_token"] = SecretStr(token)
        if not self.settings.slack_signing_secret.get_secret_value():
            overrides["slack_signing_secret"] = SecretStr(secrets.token_hex(16))
        self.settings = self.settings.model_copy(update=overrides)
        self.overrides = overrides
        if self.run_web:
            self._web = _UvicornThread(create_web_app(self.settings, redis_url=self.redis.url))
            self._web.start()
            self.web_url = f"http://127.0.0.1:{self._web.port}"
        if self.run_worker:
            self._worker = _WorkerThread(self.settings, self.redis.url)
            self._worker.start()
        return self

    @property
    def signing_secret(self) -> str:
        return self.settings.slack_signing_secret.get_secret_value()

    def signed_requests(self, team: str = "T0SANDBOX") -> SlackRequests:
        """A client that sends this stack signed Slack requests, with response_urls its Slack stand-in records."""
        return SlackRequests(f"{self.web_url}/slack/events", self.signing_secret, team=team,
                             response_url_factory=self.slack.response_url)

    def stop(self) -> None:
        stuck = None
        if self._worker:
            try:
                self._worker.stop()
            except RuntimeError as error:  # stop the rest first, then say so
                stuck = error
        if self._web:
            self._web.stop()
        if self.slack:
            self.slack.stop()
        if self.cloud:
            self.cloud.stop()
        elif self.tpu_sandbox:
            self.tpu_sandbox.stop()
        if self.node_models:
            self.node_models.stop_all()
        if self.model_emulator:
            self.model_emulator.stop()
        if self.logging_emulator:
            self.logging_emulator.stop()
        if self.redis:
            self.redis.stop()
        if stuck is not None:
            raise stuck

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
