"""The processes: `tpubot serve`, `worker`, `socket` and `shell`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Optional

import typer

from bot.settings import SettingError, Settings

log = logging.getLogger("tpubot.process")


def register(app: typer.Typer) -> None:
    app.command("serve", help="Run the web process: /slack/events, /healthz, /readyz.")(serve)
    app.command("worker", help="Run the worker process: lease jobs, timers, resumption.")(worker)
    app.command("socket", help="Run the bot over Socket Mode (no public URL); includes nothing else.")(socket_mode)
    app.command("shell", help="A terminal stand-in for Slack; runs everything in one process.")(shell)


def load_process_settings() -> Settings:
    """The settings of a long-running process (serve, worker, socket, shell, dev, mcp): with a GCP
    project, also the check that there are credentials to call it with, so a process without them
    stops at start with one line (exit 2) instead of failing at its first cloud call. A setting problem
    propagates to bot/cli/errors.py, which says it in one line (exit 2) as well."""
    settings = Settings.load()
    require_credentials(settings)
    return settings


def require_credentials(settings: Settings) -> None:
    if settings.mode.target.anonymous:
        return  # the emulators are called anonymously
    from infra.gcp_credentials import missing_credentials

    problem = missing_credentials(settings.gcp_project)
    if problem:
        raise SettingError(problem)


def port_option(value: int | None, settings: Settings, setting: str = "port") -> int:
    """A `--port` option's value, checked as the setting it overrides is; None means the setting."""
    if value is None:
        return getattr(settings, setting)
    lowest = 0 if setting == "worker_metrics_port" else 1
    if not lowest <= value <= 65535:
        option = "--metrics-port" if setting == "worker_metrics_port" else "--port"
        raise SettingError(f"{option} {value} is not a TCP port; use {lowest}-65535, or leave {option} out to use "
                           f"{setting.upper()}={getattr(settings, setting)}")
    return value


def start_logging(settings: Settings, level: int = logging.INFO) -> None:
    """The one logging setup (bot/logging_setup.py), with this deployment's secrets redacted."""
    from bot.logging_setup import configure_logging

    configure_logging(level, log_format=settings.log_format, secrets=settings.secret_values())


@contextlib.contextmanager
def sigterm_exits_cleanly(*also: signal.Signals) -> Iterator[None]:
    """uvicorn re-raises the SIGTERM it handled once it has shut down; with the default handler
    that kills the process before its `finally` blocks run (the embedded Redis stayed behind).
    This handler turns it (and the signals in `also`) into SystemExit(0), so they do."""
    signums = (signal.SIGTERM, *also)
    previous = {signum: signal.signal(signum, lambda signum, frame: sys.exit(0)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# The no-op signal that wakes the main thread out of a blocking call (below); a user's own SIGUSR2 is
# ignored while it is in use.
NUDGE = signal.SIGUSR2


@contextlib.contextmanager
def signals_wake_the_main_thread() -> Iterator[None]:
    """The kernel hands a process's signal to any of its threads, and Python runs the handler in the
    main thread only once that thread runs Python code again; a main thread blocked in `input()` or a
    read never does, so a SIGHUP or SIGTERM taken by one of the shell's server threads was not acted
    on until the next keypress. Here every signal's number also reaches a pipe
    (`signal.set_wakeup_fd`), and a thread reading it sends the main thread NUDGE, whose EINTR lets
    the blocked call run the pending handlers."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    main = threading.main_thread().ident or 0
    previous_handler = signal.signal(NUDGE, lambda signum, frame: None)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def forward() -> None:
        while data := os.read(read_fd, 64):  # b"" once the write end is closed
            if any(signum != NUDGE for signum in data):
                with contextlib.suppress(OSError):  # the main thread is already gone
                    signal.pthread_kill(main, NUDGE)

    forwarder = threading.Thread(target=forward, name="signal-forwarder", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)
        forwarder.join(timeout=5)
        if not forwarder.is_alive():  # a NUDGE sent after the old handler is back could end the process
            signal.signal(NUDGE, previous_handler)
            os.close(read_fd)


def _require(settings: Settings, *names: str) -> None:
    missing = [name.upper() for name in names if not getattr(settings, name).get_secret_value()]
    if missing:
        # Said as every other start-up problem is (bot/cli/errors.py): one `tpubot:` line, exit 2.
        raise SettingError(f"{', '.join(missing)} must be set (in tpu.env or the environment) for this process")


def _require_cloud(settings: Settings) -> None:
    """With no GCP_PROJECT the bot drives the sandbox project, whose TPU API only the local
    emulator serves: a worker not pointed at one would call Google's API for it."""
    if settings.mode.target.api_endpoint(settings.tpu_api_endpoint) is None:
        raise SettingError("GCP_PROJECT is not set and TPU_API_ENDPOINT names no sandbox, so this worker has no cloud "
                           "to drive: set GCP_PROJECT to your project id, or run `tpubot dev` (serve + worker on "
                           "the local sandboxes)")


def _redis_url(settings: Settings):
    from infra.state.redis_server import ensure_redis

    endpoint = ensure_redis(settings.redis_url)
    if endpoint.embedded:
        log.warning("REDIS_URL is unset: using an embedded Redis at %s (single process only; "
                    "`tpubot dev` shares one between processes)", endpoint.url)
    return endpoint


def wait_for_redis_at_start(settings: Settings, url: str, what: str) -> None:
    """A web process whose Redis does not answer would start and answer every request with a 500:
    it waits REDIS_STARTUP_WAIT for it, as a starting worker does, then stops with one line (exit 2)."""
    import redis.asyncio as redis_async

    from bot.redis_outage import wait_for_redis

    async def wait() -> None:
        client = redis_async.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            await wait_for_redis(client.ping, url, log, what=what,
                                 timeout=settings.redis_startup_wait.total_seconds())
        finally:
            await client.aclose()

    asyncio.run(wait())


def serve(
    port: Optional[int] = typer.Option(None, "--port", help="Port to listen on (default: the PORT setting).",
                                       show_default=False),
    host: str = typer.Option("0.0.0.0", "--host", help="Address to listen on."),
) -> None:
    settings = load_process_settings()
    port = port_option(port, settings)
    _require(settings, "slack_signing_secret", "slack_bot_token")
    from bot.web import run_web_server  # after the checks: a bad setting is answered before a second of imports

    start_logging(settings)
    endpoint = _redis_url(settings)
    try:
        wait_for_redis_at_start(settings, endpoint.url, "web start-up")
        with sigterm_exits_cleanly():
            run_web_server(settings, redis_url=endpoint.url, host=host, port=port)
    finally:
        endpoint.stop()


def worker(
    metrics_port: Optional[int] = typer.Option(None, "--metrics-port", help="Serve this worker's Prometheus /metrics "
                                               "on this port (default: the WORKER_METRICS_PORT setting).",
                                               show_default=False),
) -> None:
    settings = Settings.load()
    settings = settings.model_copy(update={"worker_metrics_port": port_option(metrics_port, settings,
                                                                              "worker_metrics_port")})
    _require_cloud(settings)
    require_credentials(settings)
    from bot.worker import build_worker  # after the checks, as in serve

    start_logging(settings)
    endpoint = _redis_url(settings)
    try:
        build_worker(settings, redis_url=endpoint.url).run()
    finally:
        endpoint.stop()


def socket_mode() -> None:
    settings = load_process_settings()
    _require(settings, "slack_app_token", "slack_bot_token")
    from bot.socket_mode import SocketModeRefused, app_token_problem, run_socket_mode  # after the checks, as in serve

    problem = app_token_problem(settings.slack_app_token.get_secret_value())
    if problem:
        typer.echo(problem, err=True)
        raise typer.Exit(code=2)
    start_logging(settings)
    endpoint = _redis_url(settings)
    wait_for_redis_at_start(settings, endpoint.url, "socket start-up")
    try:
        asyncio.run(run_socket_mode(settings, redis_url=endpoint.url))
    except SocketModeRefused as refused:
        typer.echo(str(refused), err=True)
        raise typer.Exit(code=2) from None
    finally:
        endpoint.stop()


def shell(
    no_model: bool = typer.Option(False, "--no-model", help="no sandbox model: mentions get the model-less answer"),
) -> None:
    settings = load_process_settings()
    from bot.logging_setup import log_to_file  # after the checks, as in serve
    from bot.shell import LOG_VARIABLE, log_worth_keeping, run_shell, shell_log_path

    log_path = shell_log_path()
    # A file the user named is theirs to keep; the shell's own goes at exit unless it holds an error.
    ours = not os.environ.get(LOG_VARIABLE)
    log_to_file(log_path, logging.WARNING, secrets=settings.secret_values())
    try:
        # A closed terminal (SIGHUP) or a kill (SIGTERM) stops the stack, the embedded valkey with it.
        with sigterm_exits_cleanly(signal.SIGHUP), signals_wake_the_main_thread():
            code = run_shell(settings, sys.stdin, sys.stdout, model=not no_model, log_path=str(log_path),
                             log_note="; deleted at exit unless it holds an error" if ours else "")
    finally:
        if ours and not log_worth_keeping(log_path):
            log_path.unlink(missing_ok=True)
    raise typer.Exit(code=code)
