"""One run's own part of an action's context. `Services` is the deployment's, the same for every
caller; what differs per run is passed beside it, explicitly: for whom the action runs, the logs
the run's message brought, and the redactor that knows the run's secret values (a live lease's
model key has no shape a pattern could find: agent/actions/model_endpoint.run_redactor)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from agent.actor import Actor
from agent.digest import DigestBuilder
from agent.redact import Redactor


class LogMaterial(Protocol):
    """The logs a mention brought (agent/llm/material.py's MentionInput), as summarize_logs reads them."""

    @property
    def has_logs(self) -> bool: ...

    def log_lines(self) -> Iterable[str]: ...  # read again from the start on each call

    def log_line_count(self) -> int: ...

    def line_map(self) -> str: ...

    @property
    def mined(self) -> DigestBuilder: ...  # the lines, mined once per run: every digest of them starts here


@dataclass(frozen=True)
class RunContext:
    actor: Actor
    redactor: Redactor
    # The mention's logs, for summarize_logs; None for a run without a message (a slash command,
    # an MCP call) and one whose message brought none.
    material: LogMaterial | None = None
