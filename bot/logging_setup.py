"""One logging setup for every process: JSON lines off a terminal, readable text on one, and
secrets redacted either way.

Every process (`serve`, `worker`, `socket`, `mcp`, `dev`) calls `configure_logging()` once, right
after its settings load. A request id (Slack request, or worker job id) and a lease id are
carried in context variables, so the lines of one request or job can be joined.

Redaction is agent/redact.py's, the same rules as Slack replies and model prompts, plus the
literal values of the deployment's own secrets (a signing secret has no recognisable shape).
Base64 data URIs (the images sent to the model) are cut to their media type and length before
that: an image is not text, and a log line is no place for a megabyte of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import IO

from agent.redact import Redactor

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
lease_id: contextvars.ContextVar[str] = contextvars.ContextVar("lease_id", default="-")

_DATA_URI = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,[A-Za-z0-9+/=]{16,}")


def elide_data_uris(text: str) -> str:
    """`data:image/png;base64,…[123,456 chars]` for every base64 data URI in `text`."""
    return _DATA_URI.sub(lambda m: f"data:{m.group(1)};base64,…[{len(m.group(0)):,} chars]", text)


@contextlib.contextmanager
def job_context(job: str, lease: str = "-") -> Iterator[None]:
    """Lines logged inside carry `job` as their request id and `lease` as their lease id."""
    job_token, lease_token = request_id.set(job), lease_id.set(lease or "-")
    try:
        yield
    finally:
        _reset(request_id, job_token)
        _reset(lease_id, lease_token)


def _reset(var: contextvars.ContextVar[str], token: contextvars.Token[str]) -> None:
    """Undo a set, unless this exit runs in another context than the set did: a job's coroutine
    left pending when its loop stopped is closed later by the garbage collector, in whatever
    context is current then. The set never happened in that context, so there is nothing to undo."""
    try:
        var.reset(token)
    except ValueError:
        pass


class RedactingJsonFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._redact = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self._redact(elide_data_uris(record.getMessage())),
            "request_id": request_id.get(),
            "lease_id": lease_id.get(),
        }
        if record.exc_info:
            entry["exc"] = self._redact(elide_data_uris(self.formatException(record.exc_info)))
        return json.dumps(entry, ensure_ascii=False)


class RedactingTextFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%H:%M:%S")
        self._redact = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(elide_data_uris(super().format(record)))


def wants_json(log_format: str, stream: IO[str]) -> bool:
    """`auto`: JSON unless the stream is a terminal (a person reading)."""
    if log_format == "auto":
        isatty = getattr(stream, "isatty", None)
        return not (isatty and isatty())
    return log_format == "json"


def configure_logging(level: int = logging.INFO, *, log_format: str = "json", secrets: Iterable[str] = (),
                      stream: IO[str] | None = None) -> None:
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    redactor = Redactor(secrets)
    handler.setFormatter(RedactingJsonFormatter(redactor) if wants_json(log_format, stream)
                         else RedactingTextFormatter(redactor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Bolt logs the full body and signature of every request that fails verification at INFO.
    logging.getLogger("slack_bolt").setLevel(max(level, logging.WARNING))
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # httpx logs every request's URL at INFO, and a URL can carry a token (RUNBOOKS_URLS' ?token=…).
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    # The openai client logs every request's options (the whole prompt, images too) at DEBUG.
    logging.getLogger("openai").setLevel(max(level, logging.INFO))
    # Library loggers with handlers of their own would print around the redaction.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "arq", "arq.worker"):
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True


def log_to_file(path, level: int = logging.INFO, *, secrets: Iterable[str] = ()) -> None:
    """`tpubot shell`: the same JSON lines, into a file instead of the terminal the conversation is on
    (warnings too), so no log line lands between a question and its answer."""
    configure_logging(level, secrets=secrets)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(RedactingJsonFormatter(Redactor(secrets)))
    logging.getLogger().handlers[:] = [handler]
    logging.captureWarnings(True)
