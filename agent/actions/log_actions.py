"""summarize_logs and query_cloud_logs: the log digest as tools.

`summarize_logs` digests logs handed to it as `text`, a local file `path` (only where the process
has `Services.local_files`: `tpubot mcp`), or else what came with the mention (pasted text and
attached files, in one line numbering); `query_cloud_logs` reads Cloud Logging with plain typed parameters and digests
the entries. Both return the digest text with `L<n>` line numbers so an answer can cite them.

`query_cloud_logs` reads only the channel's own TPU (its lease's node, as the `tpu_worker`
resource, in its zone): a project's logs hold other channels' work and vLLM's start-up args.
An admin may widen it to the whole project with `scope="project"`; each widening is audited.
Every parameter reaches the filter as a quoted literal, ANDed after the scope, so no text can
undo the scope.

A file or a Cloud Logging read goes through a `LineSpool` (its lines on disk) that lives for the
call: the input is read once, in bounded memory, and the digest reads the spool (blocking work,
so in a thread).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from google.api_core.exceptions import GoogleAPICallError, TooManyRequests
from pydantic import BaseModel, ConfigDict, Field

from agent import access
from agent.access import ActionKind
from agent.actions.run_context import RunContext
from agent.actions.registry import ActionResult, action
from agent.actions.run_context import LogMaterial
from agent.context import Actor, AgentDeps, ChannelDeps
from agent.redact import Redactor
from agent.digest import DigestBuilder, LineSpool, lines_from_chunks, lines_from_entries
from agent.digest.runbook_links import digest_with_runbooks
from infra.cloud_logging import TPU_WORKER_RESOURCE, CloudLoggingAbsent, CloudLogsQuery, cloud_logs_query
from infra.local_files import LocalFileError
from infra.runbooks.index import RunbookIndex
from infra.runbooks.library import RunbookLibrary

log = logging.getLogger(__name__)

Severity = Literal["DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL"]
Scope = Literal["channel", "project"]
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
    resource_type: str = Field("", description="Cloud Logging resource type, e.g. gce_instance; only with "
                                                "scope project (the channel's own logs are its TPU's)")
    max_entries: int = Field(1000, ge=1, le=5000, description="read at most this many newest entries")
    scope: Scope = Field("channel", description="channel: this channel's own TPU (default); project: the whole "
                                                "project's logs (admins only, audited)")


@dataclass(frozen=True)
class LogDigest:  # a digest's payload: the line numbers worth citing (the mention's answer cites them)
    cited_lines: tuple[int, ...]


def lines_worth_citing(digest) -> list[int]:
    """Line numbers worth citing: the first exemplar of the highest-ranked shown templates."""
    ranked = sorted(digest.templates, key=lambda t: (-t.severity, t.first_line))
    lines = [t.exemplars[0].line if t.exemplars else t.first_line for t in ranked]
    return sorted(dict.fromkeys(lines[:MAX_CITED]))


def digest_result(logs: Iterable[str] | DigestBuilder, budget: int, *, source: str,
                  runbooks: RunbookIndex | None = None) -> ActionResult:
    """The digest (of lines, or of lines already mined), and after it the runbook sections its lines
    match (runbook_links)."""
    digest, links, links_text = digest_with_runbooks(logs, budget, runbooks)
    cited = lines_worth_citing(digest)
    data = {"source": source, "total_lines": digest.total_lines, "templates": len(digest.ranked),
            "cited_lines": cited, "runbooks": [link.cite for link in links]}
    text = digest.render()
    if links:
        text += "\n\nRunbooks whose symptoms match these lines:\n" + links_text
    return ActionResult.done(text, data, LogDigest(tuple(cited)))


@dataclass(frozen=True)
class LogInput:
    lines: Iterable[str]  # re-iterable: a tuple, a spool, or the mention's material
    count: int
    line_map: str  # `L1-L50 pasted text; …`, or "" when there is one unnamed source
    where: str  # how a refusal names the input: "the lines that came with this message"
    material: LogMaterial | None = None  # the run's: its lines are mined once, whatever digests them


def log_input(svc: AgentDeps, run: RunContext, args: SummarizeLogsArgs, spool: LineSpool) -> LogInput | str:
    """The lines to digest: `text`, `path` (read onto `spool`), or what came with the message; a
    str is the refusal."""
    if args.text is not None and args.path is not None:
        return "Give `text` or `path`, not both: one log per call."
    if args.text is not None:
        if not args.text.strip():
            return "`text` is empty: paste the log lines, or give `path` to a log file."
        lines = tuple(run.redactor.lines(args.text.splitlines()))
        return LogInput(lines, len(lines), "", "the pasted text")
    if args.path is not None:
        try:
            with svc.local_files.open_log(args.path) as file:
                spool.extend(run.redactor.stream(lines_from_chunks(file.chunks)))
        except LocalFileError as error:
            return str(error)
        if not spool:
            return f"{file.name} is empty: nothing to digest."
        return LogInput(spool, len(spool), f"L1-L{len(spool)} file {file.name}", f"file {file.name}")
    material = run.material
    if material is None or not material.has_logs:
        return ("No logs came with this message: paste them, attach a file, give `text` or `path`, "
                "or use query_cloud_logs to read Cloud Logging.")
    return LogInput(_MaterialLines(material), material.log_line_count(), material.line_map(),
                    "the lines that came with this message", material)


@dataclass(frozen=True)
class _MaterialLines:
    """The mention's lines, read from the start again on every iteration (a filter scan, the digest)."""

    material: LogMaterial

    def __iter__(self) -> Iterator[str]:
        return iter(self.material.log_lines())


@action("summarize_logs", "Digest logs — pasted as `text`, a local file `path`, or what was pasted or attached "
        "in this conversation: grouped messages with counts, severities and line numbers (L12) to cite.",
        SummarizeLogsArgs)
async def summarize_logs(svc: AgentDeps, run: RunContext, args: SummarizeLogsArgs) -> ActionResult:
    # A `path` is read onto this spool; made here so that it is closed however the call ends
    # (a cancelled call included: the reading thread then stops at its next line).
    with LineSpool() as spool:
        found = await asyncio.to_thread(log_input, svc, run, args, spool)  # reading must not stall the loop
        if isinstance(found, str):
            return ActionResult.refused(found)
        return await asyncio.to_thread(summarize_found, found, args, svc.runbooks)


def summarize_found(found: LogInput, args: SummarizeLogsArgs, runbooks: RunbookLibrary) -> ActionResult:
    logs: Iterable[str] | DigestBuilder = found.lines
    if args.contains:
        needle = args.contains.lower()
        if not any(needle in line.lower() for line in found.lines):
            return ActionResult.refused(f"No line contains {args.contains!r} in the {found.count} lines of "
                                        f"{found.where}.")
        # Keep the numbering of the original lines: non-matching lines become blank.
        logs = (line if needle in line.lower() else "" for line in found.lines)
    elif found.material is not None:
        logs = found.material.mined
    result = digest_result(logs, args.max_tokens, source=found.line_map or found.where, runbooks=runbooks.index())
    if found.line_map:
        result.text = f"Sources: {found.line_map}\n{result.text}"
    return result


@dataclass(frozen=True)
class LogScope:
    """Which logs a query may read: the filter clauses that come first, and how to name them."""

    resource_type: str | None
    labels: dict[str, str]
    describe: str  # "this channel's TPU tpubot-… in us-west4-a", "the whole project"


PROJECT_SCOPE_WHAT = "query_cloud_logs scope=project"


async def log_scope(svc: ChannelDeps, actor: Actor, args: QueryCloudLogsArgs) -> LogScope | str:
    """The channel's own TPU, or the project for an admin who asked; a str is the refusal."""
    if args.scope == "project":
        decision = await access.check(svc.access, svc.directory, actor, ActionKind.ADMIN, PROJECT_SCOPE_WHAT)
        if not decision.allowed:
            return (f"{decision.message} Without `scope`, query_cloud_logs reads this channel's own TPU.")
        await svc.audit.record(actor=actor.user_id, action=PROJECT_SCOPE_WHAT, team=actor.team,
                               channel=actor.channel, outcome="widened",
                               detail=f"resource_type={args.resource_type or '(all)'} hours={args.hours:g}")
        return LogScope(args.resource_type or None, {}, "the whole project")
    if args.resource_type and args.resource_type != TPU_WORKER_RESOURCE:
        return (f"This channel's logs are its own TPU's (resource type {TPU_WORKER_RESOURCE}); "
                f"`resource_type={args.resource_type}` needs `scope=project`, which only admins may use.")
    lease = await svc.leases.get(actor.team, actor.channel)
    if lease is None or not lease.node_id:
        return ("This channel holds no TPU, so it has no Cloud Logging logs of its own to read. `/tpu up` "
                "gets one; logs from elsewhere can be pasted or attached (an admin can read the whole "
                "project with `scope=project`).")
    labels = {"node_id": lease.node_id, **({"zone": lease.zone} if lease.zone else {})}
    where = f" in {lease.zone}" if lease.zone else ""
    return LogScope(TPU_WORKER_RESOURCE, labels, f"this channel's TPU {lease.node_id}{where}")


@action("query_cloud_logs", "Read recent entries from Cloud Logging for this channel's own TPU (by severity, "
        "time window, text) and digest them with line numbers (L12) to cite.", QueryCloudLogsArgs,
        wired=lambda svc: svc.cloud_logs.wired)
async def query_cloud_logs(svc: AgentDeps, run: RunContext, args: QueryCloudLogsArgs) -> ActionResult:
    scope = await log_scope(svc, run.actor, args)
    if isinstance(scope, str):
        return ActionResult.refused(scope)

    spool = LineSpool()  # closed when the call ends, also on a timeout: the reading thread then stops
    try:
        query = await read_cloud_logs(svc, run.redactor, args, scope, spool, None, what="query_cloud_logs",
                                      retry_hint="; try again in a minute")
        if isinstance(query, str):
            return ActionResult.refused(query)
        if not spool:
            return ActionResult.done(f"No {args.min_severity}+ entries from {scope.describe} in the last "
                                     f"{args.hours:g}h (filter: {query.filter}).", {"entries": 0})
        # Entries arrive newest first; the digest reads them oldest first.
        index = await asyncio.to_thread(svc.runbooks.index)
        out = await asyncio.to_thread(digest_result, reversed(spool), DEFAULT_DIGEST_TOKENS, source="Cloud Logging",
                                      runbooks=index)
    finally:
        spool.close()
    more = " (newest entries only; the window has more)" if query.truncated else ""
    out.text = (f"{len(spool)} Cloud Logging entries, {args.min_severity}+ in the last {args.hours:g}h{more}, "
                f"from {scope.describe}.\n{out.text}")
    return out


async def read_cloud_logs(svc: AgentDeps, redactor: Redactor, args: QueryCloudLogsArgs, scope: LogScope,
                          spool: LineSpool, window: tuple[datetime, datetime] | None, *, what: str,
                          retry_hint: str = "") -> CloudLogsQuery | str:
    """spool_cloud_logs in a thread, within QUERY_TIMEOUT_SECONDS; a str says why nothing was read."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(spool_cloud_logs, svc, redactor, args, scope, spool, window),
                                      QUERY_TIMEOUT_SECONDS)
    except CloudLoggingAbsent as error:
        return str(error)
    except TooManyRequests:
        return f"Cloud Logging is rate-limiting reads right now{retry_hint}."
    except asyncio.TimeoutError:
        return f"Cloud Logging did not answer within {QUERY_TIMEOUT_SECONDS:.0f}s."
    except (GoogleAPICallError, ValueError) as error:
        log.warning("%s failed: %s", what, type(error).__name__)
        return f"Cloud Logging refused the query: {getattr(error, 'message', error)}"


def spool_cloud_logs(svc: AgentDeps, redactor: Redactor, args: QueryCloudLogsArgs, scope: LogScope, spool: LineSpool,
                     window: tuple[datetime, datetime] | None = None) -> CloudLogsQuery:
    """Read the entries onto `spool` as they arrive, one line each, newest first (a worker thread).
    `window` ([start, end)) replaces the last `args.hours` (an alert's own window)."""
    query = cloud_logs_query(
        svc.cloud_logs, min_severity=args.min_severity, since=timedelta(hours=args.hours),
        start=window[0] if window else None, end=window[1] if window else None,
        text_contains=args.text_contains or None, resource_type=scope.resource_type,
        resource_labels=scope.labels, max_entries=args.max_entries, max_retries=2,
    )
    # The run's redactor: a lease key in vLLM's start-up args is replaced as the line is read.
    spool.extend(redactor(line) for line in lines_from_entries(query.newest_first()))
    return query


@dataclass(frozen=True)
class AlertLogs:
    """What an alert's investigation read from Cloud Logging: the lines oldest first (redacted), or why none."""

    lines: tuple[str, ...]
    describe: str  # "… from the alert's resource tpu_worker node_id=… (filter: …)"
    problem: str = ""


async def read_alert_logs(svc: AgentDeps, run: RunContext, *, resource_type: str, resource_labels: dict[str, str],
                          window: tuple[datetime, datetime], min_severity: Severity = "WARNING") -> AlertLogs:
    """query_cloud_logs for an alert: its window, and the resource it names (a TPU node, a VM) —
    the routes an operator configured decided that this channel sees that resource's logs — or,
    when it names none, the channel's own TPU, exactly as the action scopes it."""
    if resource_type:
        shown = " ".join(f"{k}={v}" for k, v in sorted(resource_labels.items()))
        scope: LogScope | str = LogScope(resource_type, dict(resource_labels),
                                         f"the alert's resource {resource_type} {shown}".strip())
    else:
        scope = await log_scope(svc, run.actor, QueryCloudLogsArgs())
    if isinstance(scope, str):
        return AlertLogs((), "", scope)
    args = QueryCloudLogsArgs(min_severity=min_severity)
    with LineSpool() as spool:
        query = await read_cloud_logs(svc, run.redactor, args, scope, spool, window, what="reading an alert's logs")
        if isinstance(query, str):
            return AlertLogs((), "", query)
        lines = tuple(reversed(spool))  # read newest first; at most max_entries lines
    more = " (newest entries only; the window has more)" if query.truncated else ""
    return AlertLogs(lines, f"{len(lines)} {min_severity}+ Cloud Logging entries{more} from {scope.describe}")
