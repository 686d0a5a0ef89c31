"""The stdlib HTTP server the sandbox emulators (Slack, TPU, Logging, project APIs) serve on.

Two settings differ from `ThreadingHTTPServer`'s defaults, both for a busy machine running many
stacks: a listen backlog of 128 instead of 5 (a burst of the bot's calls — the TPU emulator
speaks HTTP/1.0, one connection per call — would otherwise see dropped SYNs, retried by the
kernel only after 1 s and 3 s), and a 0.05 s shutdown poll instead of 0.5 s, so that stopping
a stack does not wait half a second per emulator.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

SHUTDOWN_POLL_SECONDS = 0.05


class SandboxHTTPServer(ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


def serve_in_thread(server: SandboxHTTPServer, name: str) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
                              name=name, daemon=True)
    thread.start()
    return thread
