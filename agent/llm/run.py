"""What one agent run produced, and where its live text goes while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agent.llm.proposals import Proposal


class ReplySink(Protocol):
    """The reply being written (a Slack thread message, a test buffer)."""

    async def progress(self, note: str) -> None:
        """A short note on what is happening now ("Calling status…")."""

    async def partial(self, text: str) -> bool:
        """The answer text so far (grows); False means the person stopped the reply."""


class NullSink:
    async def progress(self, note: str) -> None:
        return None

    async def partial(self, text: str) -> bool:
        return True


@dataclass
class AgentRun:
    text: str  # the answer, redacted, as plain markdown (the Slack layer escapes it)
    label: str  # who answered: the model (and which endpoint) or the rules without it
    used_model: bool
    proposals: list[Proposal] = field(default_factory=list)
    steps: int = 0
    tools_run: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # WRITE calls not turned into cards, and why
    repairs: list[str] = field(default_factory=list)  # completion_repair labels seen
    cited: list[int] = field(default_factory=list)
