"""`tpubot dev`: the production shape on one machine — a `tpubot serve` and `tpubot worker`
process (the Procfile's commands) on one shared embedded Redis, with the TPU, Logging, Slack
and model stand-ins of bot/local_stack.py for whatever no real endpoint is configured for.

Unlike `tpubot shell` (everything in one process), web and worker here are separate processes
that share nothing but Redis, as in a deployment; their logs go to this terminal. A child that
dies is started again after a backoff, as a process manager would; one that keeps dying as it
starts is given up on, and `tpubot dev` stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from agent.redact import redact
from bot.local_stack import LocalStack
from bot.settings import Settings


def _env_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, timedelta):
        return f"{value.total_seconds()}s"
    return str(value)


# A child that exits this soon after its start counts as dying at start; so many in a row: given up.
QUICK_DEATH = timedelta(seconds=10)
QUICK_DEATHS_TO_GIVE_UP = 5
BACKOFF_FIRST, BACKOFF_LONGEST = timedelta(seconds=0.5), timedelta(seconds=30)


@dataclass
class Child:
    """One supervised process: its command, the running process and its record of quick deaths."""

    name: str
    command: list[str]
    env: dict[str, str]
    process: subprocess.Popen | None = None
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None  # set while it waits out its backoff

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env)
        self.started, self.restart_at = time.monotonic(), None


@dataclass
class Supervisor:
    """Restarts a child that exits (backoff doubling from BACKOFF_FIRST to BACKOFF_LONGEST, reset
    by a child that lived past QUICK_DEATH), one stderr line each time, until one has died at start
    QUICK_DEATHS_TO_GIVE_UP times in a row: then that is said and `check` returns its exit code."""

    children: dict[str, Child]
    say: Any = field(default=lambda line: print(line, file=sys.stderr, flush=True))

    def start(self) -> None:
        for child in self.children.values():
            child.start()

    def check(self) -> int | None:
        """One supervision step: None while everything runs (or waits to be restarted)."""
        now = time.monotonic()
        for child in self.children.values():
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.start()
                    assert child.process is not None, "start() made it"
                    self.say(f"tpubot dev: {child.name} restarted (pid {child.process.pid})")
                continue
            code = child.process.poll() if child.process else None
            if code is None:
                continue
            lived = now - child.started
            child.quick_deaths = child.quick_deaths + 1 if lived < QUICK_DEATH.total_seconds() else 1
            if child.quick_deaths >= QUICK_DEATHS_TO_GIVE_UP:
                self.say(f"tpubot dev: {child.name} exited ({code}) within {QUICK_DEATH.total_seconds():g}s of "
                         f"starting {child.quick_deaths} times in a row; giving up and stopping (its log above "
                         f"says why)")
                return 1
            backoff = min(BACKOFF_LONGEST.total_seconds(),
                          BACKOFF_FIRST.total_seconds() * 2 ** (child.quick_deaths - 1))
            child.restart_at = now + backoff
            self.say(f"tpubot dev: {child.name} exited ({code}) after {lived:.0f}s; restarting it in {backoff:g}s")
        return None

    def processes(self) -> dict[str, subprocess.Popen]:
        return {name: child.process for name, child in self.children.items() if child.process is not None}


@dataclass
class DevStack:
    settings: Settings
    port: int
    workers: int = 1
    stack: LocalStack | None = None
    supervisor: Supervisor | None = None

    @property
    def processes(self) -> dict[str, subprocess.Popen]:
        return self.supervisor.processes() if self.supervisor else {}

    def start(self) -> "DevStack":
        # Only Redis and the stand-ins in this process; web and worker run as their own processes.
        self.stack = LocalStack(self.settings, run_worker=False, run_web=False,
                                sandbox_model=self.settings.mode.target.sandbox_model).start()
        if self.stack.slack is not None:
            self._show_bot_posts(self.stack.slack)
        env = dict(os.environ)
        env.update({name.upper(): _env_value(value) for name, value in self.stack.overrides.items()})
        env["PORT"] = str(self.port)
        tpubot = str(Path(sys.executable).with_name("tpubot"))
        commands = {"web": [tpubot, "serve", "--host", "127.0.0.1", "--port", str(self.port)]}
        for n in range(1, self.workers + 1):
            commands[f"worker-{n}" if self.workers > 1 else "worker"] = [tpubot, "worker"]
        self.supervisor = Supervisor({name: Child(name, command, env) for name, command in commands.items()})
        self.supervisor.start()
        return self

    def _show_bot_posts(self, slack: Any) -> None:
        """What the bot posts to the Slack stand-in, printed as the shell prints it: with the sandbox
        Slack there is no Slack to look at, only this terminal."""
        from bot.shell import BotPosts, rows_of

        posts = BotPosts({})

        def show(method: str, result: dict) -> None:
            post = posts.read(slack, method, result)
            if post is not None and post.lines:
                print("\n".join(rows_of(post.prefix, post.lines)), flush=True)

        slack.on_event(show)

    def summary(self) -> list[str]:
        assert self.stack is not None
        settings, stack = self.stack.settings, self.stack

        def where(sandboxed: bool, url: str) -> str:
            if sandboxed:
                return f"sandbox     {url}"
            return f"configured  {url}" if url else "the real service's default endpoint"

        lines = ["tpubot dev — serve + worker as separate processes on one Redis (Ctrl-C stops everything)"]
        for name, proc in self.processes.items():
            command = "tpubot serve" if name == "web" else "tpubot worker"
            extra = f"  http://127.0.0.1:{self.port}/slack/events  /healthz /readyz /metrics" if name == "web" else ""
            lines.append(f"  {name:<10} {command:<14} pid {proc.pid}{extra}")
        redis = f"embedded valkey {stack.redis.url}, shared" if stack.redis and stack.redis.embedded else \
            f"REDIS_URL {redact(stack.redis.url) if stack.redis else ''}"
        lines.append(f"  {'redis':<10} {redis}")
        lines.append(f"  {'TPU API':<10} {where(stack.cloud is not None, settings.tpu_api_endpoint)}")
        lines.append(f"  {'Logging':<10} {where(stack.logging_emulator is not None, settings.logging_api_endpoint)}")
        lines.append(f"  {'Slack API':<10} {where(stack.slack is not None, settings.slack_api_url)}")
        model = where(stack.model_emulator is not None, settings.gemma_base_url)
        lines.append(f"  {'model':<10} {model if settings.gemma_base_url else 'each lease' + chr(39) + 's TPU endpoint'}")
        if "slack_signing_secret" in stack.overrides:
            lines.append("  Slack requests are verified with a signing secret generated for this run; "
                         "set SLACK_SIGNING_SECRET to sign your own.")
        if stack.slack is not None:
            lines.append("  What the bot posts to the Slack stand-in is printed here, as `tpubot shell` prints it "
                         "([#channel] tpubot posted: …).")
        return lines

    def wait(self) -> int:
        """Until SIGINT/SIGTERM (0), restarting a child that exits, or until one is given up on (its code)."""
        assert self.supervisor is not None
        stopping: list[int] = []
        previous = {sig: signal.signal(sig, lambda signum, frame: stopping.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stopping:
                given_up = self.supervisor.check()
                if given_up is not None:
                    return given_up
                time.sleep(0.2)
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.stack is not None:
            self.stack.stop()
