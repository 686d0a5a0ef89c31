"""`tpubot dev`: the production shape on one machine — a `tpubot serve` and `tpubot worker`
process (the Procfile's commands) on one shared embedded Redis, with the TPU, Logging, Slack
and model stand-ins of bot/local_stack.py for whatever no real endpoint is configured for.

Unlike `tpubot shell` (everything in one process), web and worker here are separate processes
that share nothing but Redis, as in a deployment; their logs go to this terminal.
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


@dataclass
class DevStack:
    settings: Settings
    port: int
    workers: int = 1
    stack: LocalStack | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self) -> "DevStack":
        # Only Redis and the stand-ins in this process; web and worker run as their own processes.
        self.stack = LocalStack(self.settings, run_worker=False, run_web=False,
                                sandbox_model=self.settings.sandbox).start()
        env = dict(os.environ)
        env.update({name.upper(): _env_value(value) for name, value in self.stack.overrides.items()})
        env["PORT"] = str(self.port)
        tpubot = str(Path(sys.executable).with_name("tpubot"))
        commands = {"web": [tpubot, "serve", "--host", "127.0.0.1", "--port", str(self.port)]}
        for n in range(1, self.workers + 1):
            commands[f"worker-{n}" if self.workers > 1 else "worker"] = [tpubot, "worker"]
        for name, command in commands.items():
            self.processes[name] = subprocess.Popen(command, env=env)
        return self

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
        return lines

    def wait(self) -> int:
        """Until SIGINT/SIGTERM (0) or until a process exits on its own (1)."""
        stopping: list[int] = []
        previous = {sig: signal.signal(sig, lambda signum, frame: stopping.append(signum))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stopping:
                exited = {name: proc.returncode for name, proc in self.processes.items() if proc.poll() is not None}
                if exited:
                    print(f"tpubot dev: {', '.join(f'{n} exited ({c})' for n, c in exited.items())}; stopping",
                          file=sys.stderr)
                    return 1
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
