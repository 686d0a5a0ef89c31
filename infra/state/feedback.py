"""Ratings of the bot's answers (issue 32): each answer that gets 👍/👎 buttons is kept with the
model that made it, the digest of its input and (the start of) its text; each click keeps the
clicker's latest vote. The report counts the latest vote of every clicker of every answer rated
in the window. Keys expire after RETENTION_SECONDS; nothing leaves the workspace's Redis.

Pending proposals live here too: what an answer offered to do, until someone clicks its button."""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Awaitable, Literal, cast

from redis.asyncio import Redis

from infra.state import keys
from infra.state.keys import PREFIX
from infra.state.replies import as_text


RETENTION_SECONDS = 90 * 86_400
TEXT_KEPT = 2_000
INPUT_LINES_KEPT = 400  # an eval case's logs: the first lines an answer was made from (already redacted)
INPUT_CHARS_KEPT = 64_000
CORRECTION_WAIT_SECONDS = 86_400  # a 👎's reply counts as its correction for a day
Vote = Literal["up", "down"]


@dataclass(frozen=True)
class Answer:
    answer_id: str
    team: str
    channel: str
    thread_ts: str
    model: str  # the endpoint's model, or "model-less"
    prompt_digest: str
    text: str
    at: float


@dataclass(frozen=True)
class Corrected:
    """An answer rated 👎, what it was made from, and what the person said a right one would say."""

    answer: Answer
    request: str
    logs: list[str]
    correction: str


@dataclass
class Tally:
    up: int = 0
    down: int = 0

    @property
    def ratio(self) -> float | None:
        """Share of 👍 among the votes; None without votes."""
        total = self.up + self.down
        return round(self.up / total, 3) if total else None

    def as_dict(self) -> dict:
        return {"up": self.up, "down": self.down, "ratio": self.ratio}


@dataclass
class FeedbackReport:
    since: float
    answers: int = 0  # answers with at least one vote
    total: Tally = field(default_factory=Tally)
    models: dict[str, Tally] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"since": self.since, "answers": self.answers, **self.total.as_dict(),
                "models": [{"model": model, **tally.as_dict()} for model, tally in sorted(self.models.items())]}


class FeedbackStore:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def record_answer(self, answer: Answer) -> None:
        key = keys.rated_answer(answer.answer_id)
        await cast(Awaitable[int], self._redis.hset(key, mapping={
            "team": answer.team, "channel": answer.channel, "thread_ts": answer.thread_ts, "model": answer.model,
            "prompt_digest": answer.prompt_digest, "text": answer.text[:TEXT_KEPT], "at": f"{answer.at:.3f}"}))
        await self._redis.expire(key, RETENTION_SECONDS)

    async def record_input(self, answer_id: str, request: str, lines: Iterable[str]) -> None:
        """Keep what the answer was made from, for `tpubot feedback --export-evals` (redacted text only)."""
        kept: list[str] = []
        size = 0
        for line in itertools.islice(lines, INPUT_LINES_KEPT):
            size += len(line) + 1
            if size > INPUT_CHARS_KEPT:
                break
            kept.append(line)
        key = keys.answer_input(answer_id)
        await cast(Awaitable[int], self._redis.hset(key, mapping={"request": request[:TEXT_KEPT], "logs": "\n".join(kept)}))
        await self._redis.expire(key, RETENTION_SECONDS)

    async def await_correction(self, answer: Answer, user: str) -> bool:
        """After `user`'s 👎: their next reply in the answer's thread is kept as its correction.
        False when the answer kept no input (no logs), so no eval case could be made of it."""
        if not await self._redis.exists(keys.answer_input(answer.answer_id)):
            return False
        await self._redis.set(keys.awaiting_correction(answer.team, answer.channel, answer.thread_ts, user),
                              answer.answer_id, ex=CORRECTION_WAIT_SECONDS)
        return True

    async def take_correction(self, team: str, channel: str, thread_ts: str, user: str, text: str) -> str | None:
        """Keep `text` as the correction of the answer `user` rated 👎 in this thread, if they did;
        the rated answer's id, or None."""
        pending = await self._redis.getdel(keys.awaiting_correction(team, channel, thread_ts, user))
        if pending is None:
            return None
        answer_id = as_text(pending)
        await cast(Awaitable[int], self._redis.hset(keys.answer_input(answer_id), "correction", text[:TEXT_KEPT]))
        await self._redis.expire(keys.answer_input(answer_id), RETENTION_SECONDS)
        return answer_id

    async def corrected(self) -> list[Corrected]:
        """Every kept answer rated 👎 with a correction and its input: the makings of eval cases."""
        found = []
        for raw_id in await self._redis.zrange(keys.rated_answers(), 0, -1):
            answer_id = as_text(raw_id)
            given = {as_text(k): as_text(v) for k, v in
                     (await cast(Awaitable[dict], self._redis.hgetall(keys.answer_input(answer_id)))).items()}
            answer = await self.answer(answer_id)
            if answer is None or not given.get("correction") or not given.get("logs"):
                continue
            found.append(Corrected(answer, given.get("request", ""), given["logs"].split("\n"), given["correction"]))
        return found

    async def answer(self, answer_id: str) -> Answer | None:
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.rated_answer(answer_id)))
        if not raw:
            return None
        f = {as_text(k): as_text(v) for k, v in raw.items()}
        return Answer(answer_id, f.get("team", ""), f.get("channel", ""), f.get("thread_ts", ""), f.get("model", ""),
                      f.get("prompt_digest", ""), f.get("text", ""), float(f.get("at", "0") or 0))

    async def vote(self, answer_id: str, clicker: str, vote: Vote, now: float | None = None) -> Vote | None:
        """Keep `clicker`'s vote on the answer; returns their vote before this one (None: first)."""
        now = time.time() if now is None else now
        key = keys.answer_votes(answer_id)
        old = await cast(Awaitable[bytes | None], self._redis.hget(key, clicker))
        await cast(Awaitable[int], self._redis.hset(key, clicker, f"{vote}|{now:.3f}"))
        await self._redis.expire(key, RETENTION_SECONDS)
        await self._redis.zadd(keys.rated_answers(), {answer_id: now})
        previous = as_text(old).partition("|")[0] if old else None
        return cast(Vote, previous) if previous in ("up", "down") else None

    async def report(self, since: float) -> FeedbackReport:
        report = FeedbackReport(since=since)
        await self._redis.zremrangebyscore(keys.rated_answers(), "-inf", time.time() - RETENTION_SECONDS)
        for raw_id in await self._redis.zrangebyscore(keys.rated_answers(), since, "+inf"):
            answer_id = as_text(raw_id)
            votes = await cast(Awaitable[dict], self._redis.hgetall(keys.answer_votes(answer_id)))
            answer = await self.answer(answer_id)
            if not votes or answer is None:
                continue
            report.answers += 1
            tally = report.models.setdefault(answer.model, Tally())
            for value in votes.values():
                vote = as_text(value).partition("|")[0]
                for counted in (tally, report.total):
                    if vote == "up":
                        counted.up += 1
                    elif vote == "down":
                        counted.down += 1
        return report


# Pending proposals: a model (or the model-less intent rules) suggested a WRITE action that a
# person must confirm by clicking. The button carries only the opaque id; the proposal itself
# lives here, shared by every replica, and expires on its own.
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
