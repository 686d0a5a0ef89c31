"""Who an action runs for: a value type that imports nothing of ours, so everything may use it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    """The person (or MCP identity) on whose behalf an action runs."""

    user_id: str
    team: str
    channel: str
