"""Structured JSON logs with a request id on every line and secrets redacted.

Every process calls `configure_logging()` once. A request id (Slack request, or worker job id)
is carried in a context variable, so lines from the same request can be joined.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time

from agent.redact import redact

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RedactingJsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = redact(record.getMessage())
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": message,
            "request_id": request_id.get(),
        }
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: int = logging.INFO, *, json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(RedactingJsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Bolt logs the full body and signature of every request that fails verification at INFO.
    logging.getLogger("slack_bolt").setLevel(max(level, logging.WARNING))
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime


def log_to_file(path, level: int = logging.INFO) -> None:
    """`tpubot shell`: the same JSON lines, into a file instead of the terminal the conversation is on
    (warnings too), so no log line lands between a question and its answer."""
    configure_logging(level)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(RedactingJsonFormatter())
    logging.getLogger().handlers[:] = [handler]
    logging.captureWarnings(True)
