"""Pending proposals: a model (or the model-less intent rules) suggested a WRITE action that a
person must confirm by clicking. The button carries only the opaque id; the proposal itself
lives here, shared by every replica, and expires on its own."""

from __future__ import annotations

import json
import secrets

from redis.asyncio import Redis

from infra.state.keys import PREFIX

DEFAULT_TTL_SECONDS = 3600


def proposal_key(proposal_id: str) -> str:
    return f"{PREFIX}:proposal:{proposal_id}"


def new_proposal_id() -> str:
    return "p" + secrets.token_hex(8)


class ProposalStore:
    def __init__(self, redis: Redis, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> None:
        self._redis = redis
        self._ttl = ttl_seconds

    async def put(self, proposal_id: str, record: dict) -> None:
        await self._redis.set(proposal_key(proposal_id), json.dumps(record), ex=self._ttl)

    async def get(self, proposal_id: str) -> dict | None:
        raw = await self._redis.get(proposal_key(proposal_id))
        return json.loads(raw) if raw else None

    async def take(self, proposal_id: str) -> bool:
        """Consume the proposal; True for exactly one caller (a double click acts once)."""
        return bool(await self._redis.delete(proposal_key(proposal_id)))
