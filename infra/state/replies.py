"""Redis replies as text: redis-py hands back bytes unless a client decodes them, and the bot's
clients differ (the web's pool decodes nothing; tests read with plain clients)."""

from __future__ import annotations


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
