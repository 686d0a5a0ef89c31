"""summarize_logs and query_cloud_logs: the log digest as tools.

`summarize_logs` digests logs handed to it as `text`, a local file `path` (only where the process
has `Services.local_files`: `tpubot mcp`), or else what came with the mention (pasted text and
attached files, in one line numbering); `query_cloud_logs` reads Cloud Logging with plain typed parameters and digests
the entries. Both return the digest text with `L<n>` line numbers so an answer can cite them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from google.api_core.exceptions import GoogleAPICallError, TooManyRequests
from pydantic import BaseModel, ConfigDict, Field

from agent.actions.registry import ActionResult, action
from agent.context import Actor, Services
from agent.digest import build_digest, lines_from_entries
from agent.redact import redact_lines
from infra.cloud_logging import query_cloud_logs as read_cloud_logs
from infra.local_files import LocalFileError

log = logging.getLogger(__name__)

Severity = Literal["DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL"]
DEFAULT_DIGEST_TOKENS = 1500  # a tool result must leave room in 16k for the rest of the loop
QUERY_TIMEOUT_SECONDS = 45.0
MAX_CITED = 6


MAX_TEXT_CHARS = 1_000_000  # pasted logs: a megabyte of text; a bigger log belongs in a file (`path`)


class SummarizeLogsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = Field(None, max_length=MAX_TEXT_CHARS,
                             description="the log lines to digest, pasted as text; omit to use what came with "
                                         "the message")
    path: str | None = Field(None, description="a local log file (.gz too) under the working directory; "
                                               "tpubot mcp only")
    contains: str | None = Field(None, description="only lines containing this text (case-insensitive); omit for all")
    max_tokens: int = Field(DEFAULT_DIGEST_TOKENS, ge=200, le=6000, description="size of the digest in tokens")


class QueryCloudLogsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_severity: Severity = Field("WARNING", description="lowest severity to read")
    hours: float = Field(1.0, gt=0, le=168, description="how many hours back to read, up to 168")
    text_contains: str = Field("", description="only entries whose message contains this text; empty for all")
    resource_type: str = Field("", description="Cloud Logging resource type, e.g. tpu_worker; empty for all")
    max_entries: int = Field(1000, ge=1, le=5000, description="read at most this many newest entries")


def cited_lines(digest) -> list[int]:
    """Line numbers worth citing: the first exemplar of the highest-ranked shown templates."""
    ranked = sorted(digest.templates, key=lambda t: (-t.severity, t.first_line))
    lines = [t.exemplars[0].line if t.exemplars else t.first_line for t in ranked]
    return sorted(dict.fromkeys(lines[:MAX_CITED]))


def digest_result(lines: list[str], budget: int, *, source: str) -> ActionResult:
    digest = build_digest(lines, budget_tokens=budget)
    data = {"source": source, "total_lines": digest.total_lines, "templates": len(digest.ranked),
            "cited_lines": cited_lines(digest)}
    return ActionResult(True, digest.render(), data)


@dataclass(frozen=True)
class LogInput:
    lines: list[str]
    line_map: str  # `L1-L50 pasted text; …`, or "" when there is one unnamed source
    where: str  # how a refusal names the input: "the lines that came with this message"


def log_input(svc: Services, args: SummarizeLogsArgs) -> LogInput | str:
    """The lines to digest: `text`, `path`, or what came with the message; a str is the refusal."""
    if args.text is not None and args.path is not None:
        return "Give `text` or `path`, not both: one log per call."
    if args.text is not None:
        if not args.text.strip():
            return "`text` is empty: paste the log lines, or give `path` to a log file."
        return LogInput(redact_lines(args.text.splitlines()), "", "the pasted text")
    if args.path is not None:
        if svc.local_files is None:
            return ("This bot does not read files from its own disk; attach the file to your message "
                    "(or run `tpubot mcp` on your machine to read local files).")
        try:
            name, lines = svc.local_files.read_lines(args.path)
        except LocalFileError as error:
            return str(error)
        if not lines:
            return f"{name} is empty: nothing to digest."
        return LogInput(redact_lines(lines), f"L1-L{len(lines)} file {name}", f"file {name}")
    material = svc.material
    if material is None or not material.has_logs:
        return ("No logs came with this message: paste them, attach a file, give `text` or `path`, "
                "or use query_cloud_logs to read Cloud Logging.")
    return LogInput(material.log_lines(), material.line_map(), "the lines that came with this message")


@action("summarize_logs", "Digest logs — pasted as `text`, a local file `path`, or what was pasted or attached "
        "in this conversation: grouped messages with counts, severities and line numbers (L12) to cite.",
        SummarizeLogsArgs)
async def summarize_logs(svc: Services, actor: Actor, args: SummarizeLogsArgs) -> ActionResult:
    found = await asyncio.to_thread(log_input, svc, args)  # a file read must not stall the loop
    if isinstance(found, str):
        return ActionResult(False, found)
    lines = found.lines
    if args.contains:
        needle = args.contains.lower()
        # Keep the numbering of the original lines: non-matching lines become blank.
        lines = [line if needle in line.lower() else "" for line in lines]
        if not any(lines):
            return ActionResult(False, f"No line contains {args.contains!r} in the {len(found.lines)} lines of "
                                       f"{found.where}.")
    result = digest_result(lines, args.max_tokens, source=found.line_map or found.where)
    if found.line_map:
        result.text = f"Sources: {found.line_map}\n{result.text}"
    return result


@action("query_cloud_logs", "Read recent entries from Cloud Logging (by severity, time window, text) and "
        "digest them with line numbers (L12) to cite.", QueryCloudLogsArgs)
async def query_cloud_logs(svc: Services, actor: Actor, args: QueryCloudLogsArgs) -> ActionResult:
    if svc.cloud_logs is None:
        return ActionResult(False, "Cloud Logging is not configured for this bot (set GCP_PROJECT).")

    def read():
        return read_cloud_logs(
            svc.cloud_logs, min_severity=args.min_severity, since=timedelta(hours=args.hours),
            text_contains=args.text_contains or None, resource_type=args.resource_type or None,
            max_entries=args.max_entries, max_retries=2,
        )

    try:
        result = await asyncio.wait_for(asyncio.to_thread(read), QUERY_TIMEOUT_SECONDS)
    except TooManyRequests:
        return ActionResult(False, "Cloud Logging is rate-limiting reads right now; try again in a minute.")
    except asyncio.TimeoutError:
        return ActionResult(False, f"Cloud Logging did not answer within {QUERY_TIMEOUT_SECONDS:.0f}s.")
    except (GoogleAPICallError, ValueError) as error:
        log.warning("query_cloud_logs failed: %s", type(error).__name__)
        return ActionResult(False, f"Cloud Logging refused the query: {getattr(error, 'message', error)}")
    if not result.entries:
        return ActionResult(True, f"No {args.min_severity}+ entries in the last {args.hours:g}h "
                                  f"(filter: {result.filter}).", {"entries": 0})
    lines = list(lines_from_entries(result.entries))
    out = digest_result(lines, DEFAULT_DIGEST_TOKENS, source="Cloud Logging")
    more = " (newest entries only; the window has more)" if result.truncated else ""
    out.text = f"{len(lines)} Cloud Logging entries, {args.min_severity}+ in the last {args.hours:g}h{more}.\n{out.text}"
    return out
