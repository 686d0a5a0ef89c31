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
from typing import TYPE_CHECKING, Any

import uvicorn
from arq.worker import Worker
from pydantic import SecretStr

from bot.settings import Settings
from bot.web import create_web_app
from bot.worker import build_worker
from infra.sandbox.vllm.served_version import served_version_for
from infra.sandbox.slack_requests import SlackRequests
from infra.state.redis_server import RedisEndpoint, ensure_redis

if TYPE_CHECKING:
    from infra.sandbox.emulators import SandboxEmulators
    from infra.sandbox.logging_api import LoggingEmulator
    from infra.sandbox.node_models import NodeModels
    from infra.sandbox.slack_api import SlackApiSandbox
    from infra.sandbox.tpu_api import TpuSandbox
    from infra.sandbox.vllm import VllmEmulator
    from infra.sandbox.world import CloudSandbox


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
        self.worker: Worker | None = None
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
    chain: list[str] = []
    awaited: Any = task.get_coro()
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
    web_url: str = ""
    sandbox_model: bool = False  # start a sandbox vLLM (labelled heuristic) unless GEMMA_BASE_URL is set
    world: Any = None  # infra.sandbox.world.SandboxWorld; None: the default world (tpu_zones if given)
    emulators: SandboxEmulators | None = None  # the stand-ins start() ran for what the settings leave unset
    overrides: dict[str, Any] = field(default_factory=dict)  # what start() pointed at the stand-ins
    _web: _UvicornThread | None = field(default=None, repr=False)
    _worker: _WorkerThread | None = field(default=None, repr=False)

    # The running stand-ins, None where a real endpoint is configured (or before start()).
    @property
    def cloud(self) -> CloudSandbox | None:
        return self.emulators.cloud if self.emulators else None

    @property
    def tpu_sandbox(self) -> TpuSandbox | None:
        return self.cloud.tpu if self.cloud else None

    @property
    def node_models(self) -> NodeModels | None:  # a sandbox vLLM per ACTIVE node
        return self.emulators.node_models if self.emulators else None

    @property
    def logging_emulator(self) -> LoggingEmulator | None:
        return self.emulators.logging if self.emulators else None

    @property
    def model_emulator(self) -> VllmEmulator | None:
        return self.emulators.model if self.emulators else None

    @property
    def slack(self) -> SlackApiSandbox | None:
        return self.emulators.slack if self.emulators else None

    def _start_emulators(self, emulators: SandboxEmulators) -> None:
        """A stand-in for each outside service the settings name no endpoint for; on the sandbox
        the emulated project too, with a labelled sandbox vLLM on every ACTIVE node at
        http://127.0.1.N:PORT/v1."""
        from infra.sandbox.node_models import NodeModels
        from infra.sandbox.world import SandboxWorld

        settings = self.settings
        target = settings.mode.target
        if target.api_endpoint(settings.tpu_api_endpoint) is None:
            world = self.world or (SandboxWorld(zones=dict(self.tpu_zones)) if self.tpu_zones else SandboxWorld())
            if settings.xla_cache_bucket and settings.xla_cache_bucket not in world.buckets:
                # The sandbox project has the bucket the settings name, in the TPU's region.
                world.buckets = {**world.buckets, settings.xla_cache_bucket: settings.region_of(settings.tpu_zone).upper()}
            node_models = NodeModels(model=settings.model_name, max_model_len=settings.vllm_max_model_len,
                                     preferred_port=settings.model_port,
                                     served_version=served_version_for(settings.vllm_image),
                                     time_scale=settings.sandbox_time_scale)
            emulators.start_cloud(world, project=settings.project, time_scale=settings.sandbox_time_scale,
                                  node_models=node_models)
        if target.api_endpoint(settings.logging_api_endpoint) is None:
            emulators.start_logging(settings.project)
        if self.sandbox_model and not settings.gemma_base_url:
            emulators.start_model(served_version=served_version_for(settings.vllm_image))
        if not settings.slack_api_url:
            emulators.start_slack(settings.slack_bot_token.get_secret_value() or "xoxb-sandbox-" + secrets.token_hex(8))

    def start(self) -> "LocalStack":
        from infra.sandbox.emulators import SandboxEmulators

        if self.settings.redis_url:
            _check_reachable(self.settings.redis_url)
        self.redis = ensure_redis(self.settings.redis_url)
        overrides: dict[str, Any] = {"redis_url": self.redis.url}
        cap = self.settings.mode.target.poll_interval_cap
        if cap is not None:
            overrides["poll_interval"] = min(self.settings.poll_interval, cap)
        self.emulators = SandboxEmulators()
        try:
            self._start_emulators(self.emulators)
        except BaseException:  # the ones that did start would outlive the stack
            self.emulators.stop()
            raise
        overrides.update(self.emulators.unset_in(self.settings))
        if self.node_models is not None:
            overrides["model_port"] = self.node_models.port  # where every sandbox node serves its model
        if self.slack is not None:
            overrides["slack_bot_token"] = SecretStr(self.slack.token)
        if not self.settings.slack_signing_secret.get_secret_value():
            overrides["slack_signing_secret"] = SecretStr(secrets.token_hex(16))
        self.settings = self.settings.model_copy(update=overrides)
        self.overrides = overrides
        if self.run_web:
            self._web = _UvicornThread(create_web_app(self.settings, redis_url=self.redis.url))
            self._web.start()
            self.web_url = f"http://127.0.0.1:{self._web.port}"
        if self.run_worker:
            self.start_worker()
        return self

    def start_worker(self) -> None:
        """Start the worker (start() does, unless run_worker is False: a test that queues work first)."""
        assert self.redis is not None and self._worker is None, "once, after start()"
        self._worker = _WorkerThread(self.settings, self.redis.url)
        self._worker.start()

    @property
    def signing_secret(self) -> str:
        return self.settings.slack_signing_secret.get_secret_value()

    def signed_requests(self, team: str = "T0SANDBOX") -> SlackRequests:
        """A client that sends this stack signed Slack requests, with response_urls its Slack stand-in records."""
        if self.slack is None:
            raise RuntimeError("this stack runs no Slack stand-in (SLACK_API_URL is set) to record response_urls")
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
        if self.emulators:
            self.emulators.stop()
        if self.redis:
            self.redis.stop()
        if stuck is not None:
            raise stuck

    def __enter__(self) -> "LocalStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
