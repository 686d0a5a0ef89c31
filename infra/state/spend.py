"""The spend ledger and the budgets it is held to, per (team, calendar month UTC), in USD.

A flex-start lease bills at most its run time × rate × chips, so its worst case is known when it
is asked for. Claiming a lease and reserving that worst case against the channel's and the
workspace's budget is ONE Lua script (the lease claim of infra/state/leases.py with the budget
check in front of it): however many `/tpu up` run at once, in however many replicas, the sum of
what was spent and what is reserved never passes a budget. When a lease ends its reservation is
replaced, in one step, by what it actually cost (`settle`), and the receipt is appended to a
stream that outlives the ledger: `rebuild` recomputes a month's ledger from those receipts plus
the leases still running.

A lease is charged to the month it was claimed in: the budget that approved it pays for it.

Keys (infra/state/keys.py holds the names):
- budget limits: hash `workspace` → USD, `<channel>` → USD (admin-set; settings give defaults);
- ledger: hash `ws:spent`, `ws:reserved`, `ch:<C>:spent`, `ch:<C>:reserved`;
- open reservations: hash lease id → `<channel>|<usd>|<claimed at>|<json note>`;
- settled leases: hash lease id → json record (what `/tpu spend` lists);
- receipts: one stream of every settled lease (team, month, lease id, record).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Awaitable, Literal, cast
# cast(Awaitable[...]): redis-py's asyncio client carries the sync client's `Awaitable[X] | X` types

from redis.asyncio import Redis

from infra.state import keys
from infra.state.leases import ClaimResult, Lease, candidate_lease, claim_fields
from infra.state.replies import as_text

LEDGER_TTL_SECONDS = 400 * 86_400  # a year of months stays readable for `/tpu spend 2026-01`
NO_LIMIT = ""
# An unknown worst case (no price for a zone the request may land in) cannot be checked against a budget.
UNKNOWN_COST = "-1"


def month_of(epoch: float) -> str:
    """The UTC calendar month an instant falls in, as `YYYY-MM`."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m")


def month_bounds(month: str) -> tuple[float, float]:
    """Epoch seconds of the month's first instant and of the next month's first instant."""
    start = datetime.strptime(month, "%Y-%m").replace(tzinfo=timezone.utc)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start.timestamp(), end.timestamp()


# KEYS: 1 lease, 2 fence, 3 lease index, 4 ledger, 5 open reservations, 6 budget limits
# ARGV: 1 channel, 2 lease id, 3 worst-case USD (-1 unknown), 4 default workspace limit, 5 default
#       channel limit, 6 ledger TTL, 7 reservation note, 8… the lease's fields (as LeaseStore.claim)
# Returns {1, lease} claimed, {0, lease} held, {2, scope, ch limit, ch spent, ch reserved,
# ws limit, ws spent, ws reserved} refused. Numbers travel as strings: Lua numbers come back as integers.
_CLAIM_WITHIN_BUDGET = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGETALL', KEYS[1])}
end
local channel = ARGV[1]
local ws_limit = redis.call('HGET', KEYS[6], 'workspace') or ARGV[4]
local ch_limit = redis.call('HGET', KEYS[6], 'channel:' .. channel) or ARGV[5]
local ch_spent = redis.call('HGET', KEYS[4], 'ch:' .. channel .. ':spent') or '0'
local ch_reserved = redis.call('HGET', KEYS[4], 'ch:' .. channel .. ':reserved') or '0'
local ws_spent = redis.call('HGET', KEYS[4], 'ws:spent') or '0'
local ws_reserved = redis.call('HGET', KEYS[4], 'ws:reserved') or '0'
local need = tonumber(ARGV[3])
local function over(limit, spent, reserved)
  if limit == '' then return false end
  if need < 0 then return true end
  return tonumber(spent) + tonumber(reserved) + need > tonumber(limit) + 1e-9
end
local scope = nil
if over(ch_limit, ch_spent, ch_reserved) then scope = 'channel'
elseif over(ws_limit, ws_spent, ws_reserved) then scope = 'workspace' end
if scope then
  return {2, scope, ch_limit, ch_spent, ch_reserved, ws_limit, ws_spent, ws_reserved}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
redis.call('HSET', KEYS[1], 'fence', fence)
redis.call('SADD', KEYS[3], KEYS[1])
if need > 0 then
  redis.call('HINCRBYFLOAT', KEYS[4], 'ws:reserved', need)
  redis.call('HINCRBYFLOAT', KEYS[4], 'ch:' .. channel .. ':reserved', need)
end
redis.call('HSET', KEYS[5], ARGV[2], channel .. '|' .. math.max(need, 0) .. '|' .. ARGV[7])  -- ARGV[7]: claimed at|note
redis.call('EXPIRE', KEYS[4], ARGV[6])
redis.call('EXPIRE', KEYS[5], ARGV[6])
return {1, redis.call('HGETALL', KEYS[1])}
"""

# Turn a lease's reservation into what it cost, once. KEYS: 1 ledger, 2 open, 3 settled, 4 receipts
# ARGV: 1 lease id, 2 channel, 3 cost, 4 record json, 5 team, 6 month, 7 TTL, 8 "1" to append the receipt
_SETTLE = """
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
local open = redis.call('HGET', KEYS[2], ARGV[1])
if open then
  local channel, reserved = string.match(open, '^([^|]*)|([^|]*)')
  reserved = tonumber(reserved) or 0
  if reserved > 0 then
    redis.call('HINCRBYFLOAT', KEYS[1], 'ws:reserved', -reserved)
    redis.call('HINCRBYFLOAT', KEYS[1], 'ch:' .. channel .. ':reserved', -reserved)
  end
  redis.call('HDEL', KEYS[2], ARGV[1])
end
local cost = tonumber(ARGV[3])
redis.call('HINCRBYFLOAT', KEYS[1], 'ws:spent', cost)
redis.call('HINCRBYFLOAT', KEYS[1], 'ch:' .. ARGV[2] .. ':spent', cost)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[7]) end
if ARGV[8] == '1' then
  redis.call('XADD', KEYS[4], '*', 'team', ARGV[5], 'month', ARGV[6], 'lease_id', ARGV[1], 'record', ARGV[4])
end
return 1
"""

# A reservation made when its worst case was unknown (a search that could land in an unpriced zone)
# holds 0; once the lease's zone is known, it is raised to what the lease can cost there. Never lowered.
# KEYS: 1 ledger, 2 open. ARGV: 1 lease id, 2 channel, 3 USD, 4 TTL. Returns 1 if raised.
_RAISE_RESERVATION = """
local open = redis.call('HGET', KEYS[2], ARGV[1])
if not open then return 0 end
local channel, reserved, rest = string.match(open, '^([^|]*)|([^|]*)|(.*)$')
local want = tonumber(ARGV[3])
reserved = tonumber(reserved) or 0
if want <= reserved then return 0 end
redis.call('HINCRBYFLOAT', KEYS[1], 'ws:reserved', want - reserved)
redis.call('HINCRBYFLOAT', KEYS[1], 'ch:' .. channel .. ':reserved', want - reserved)
redis.call('HSET', KEYS[2], ARGV[1], channel .. '|' .. ARGV[3] .. '|' .. (rest or ''))
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""

STALE_OPEN_SECONDS = 600  # a reservation this old that no running lease owns is a leftover

# The month's ledger from scratch. KEYS: 1 ledger, 2 open, 3 settled.
# ARGV: 1 TTL, 2 now, 3 stale after, 4 n settled, then n × (id, channel, cost, record json),
#       then the running leases × (id, channel, usd, claimed at|note).
_REBUILD = """
local now, stale, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local totals, settled, kept = {}, {}, {}
local function add(name, value) totals[name] = (totals[name] or 0) + value end
local i = 5
for _ = 1, n do
  redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 3])
  i = i + 4
end
-- Settled leases are facts: those already in the ledger stay (one may have settled after the
-- caller read the receipts), and the totals are summed from all of them.
local rows = redis.call('HGETALL', KEYS[3])
for j = 1, #rows, 2 do
  local record = cjson.decode(rows[j + 1])
  settled[rows[j]] = true
  add('ws:spent', tonumber(record.cost) or 0)
  add('ch:' .. record.channel .. ':spent', tonumber(record.cost) or 0)
end
local old = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
local function keep(id, channel, usd, rest)
  if settled[id] or kept[id] then return end
  kept[id] = true
  redis.call('HSET', KEYS[2], id, channel .. '|' .. usd .. '|' .. rest)
  add('ws:reserved', tonumber(usd))
  add('ch:' .. channel .. ':reserved', tonumber(usd))
end
while i <= #ARGV do
  keep(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  i = i + 4
end
for j = 1, #old, 2 do
  local channel, usd, claimed, rest = string.match(old[j + 1], '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if channel and now - (tonumber(claimed) or 0) < stale then keep(old[j], channel, usd, claimed .. '|' .. rest) end
end
redis.call('DEL', KEYS[1])
for name, value in pairs(totals) do redis.call('HSET', KEYS[1], name, string.format('%.17g', value)) end
for k = 1, 3 do redis.call('EXPIRE', KEYS[k], ARGV[1]) end
return 1
"""


@dataclass(frozen=True)
class SpendRecord:
    """One lease's figures as the ledger keeps them (receipt arithmetic: agent/lease/receipts.py)."""

    lease_id: str
    channel: str
    holder: str = ""
    zone: str = ""
    started_at: float = 0.0  # claimed
    ended_at: float = 0.0
    billed_seconds: float = 0.0
    cost: float = 0.0
    output_tokens: float | None = None  # None: the model's metrics were never read
    requests: float | None = None
    idle_seconds: float = 0.0  # READY with no traffic (agent/lease/idle.py's readings)
    usd_per_chip_hour: float | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "SpendRecord":
        raw = json.loads(as_text(text))
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


LimitSource = Literal["set", "default", "none"]  # admin-set, the settings' default, or no limit
BudgetScope = Literal["channel", "workspace"]


@dataclass(frozen=True)
class Limits:
    """The limits in force for one channel: stored (admin-set) over the settings' defaults."""

    workspace: float | None
    channel: float | None
    workspace_source: LimitSource = "none"
    channel_source: LimitSource = "none"


@dataclass(frozen=True)
class Refusal:
    scope: BudgetScope
    need: float | None  # None: no price, so no worst case
    channel_limit: float | None
    channel_spent: float
    channel_reserved: float
    workspace_limit: float | None
    workspace_spent: float
    workspace_reserved: float

    def headroom(self) -> float:
        """What still fits under both budgets."""
        rooms = []
        if self.channel_limit is not None:
            rooms.append(self.channel_limit - self.channel_spent - self.channel_reserved)
        if self.workspace_limit is not None:
            rooms.append(self.workspace_limit - self.workspace_spent - self.workspace_reserved)
        return max(0.0, min(rooms)) if rooms else float("inf")


@dataclass(frozen=True)
class BudgetedClaim:
    claim: ClaimResult | None  # None: refused
    refusal: Refusal | None = None


@dataclass
class MonthLedger:
    """A month's totals and its open and settled leases (one team)."""

    month: str
    spent: float = 0.0
    reserved: float = 0.0
    channel_spent: dict[str, float] = field(default_factory=dict)
    channel_reserved: dict[str, float] = field(default_factory=dict)
    open: dict[str, "OpenReservation"] = field(default_factory=dict)
    settled: dict[str, SpendRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenReservation:
    """A running lease's worst case, held against the budgets until the lease settles."""

    lease_id: str
    channel: str
    usd: float
    claimed_at: float
    note: dict


def _open_note(claimed_at: float, note: dict | None) -> str:
    return f"{claimed_at!r}|{json.dumps(note or {}, separators=(',', ':'))}"


def _limit(value: str | bytes | None) -> float | None:
    text = as_text(value) if value is not None else ""
    return float(text) if text not in ("", None) else None


class SpendLedger:
    def __init__(self, redis: Redis, *, default_workspace: float | None = None,
                 default_channel: float | None = None) -> None:
        self._redis = redis
        self.default_workspace = default_workspace
        self.default_channel = default_channel
        self._claim = redis.register_script(_CLAIM_WITHIN_BUDGET)
        self._settle = redis.register_script(_SETTLE)
        self._raise_reservation = redis.register_script(_RAISE_RESERVATION)
        self._rebuild = redis.register_script(_REBUILD)

    # --- budgets -----------------------------------------------------------------------------

    async def limits(self, team: str, channel: str) -> Limits:
        stored_ws, stored_ch = await cast(Awaitable[list], self._redis.hmget(keys.budget_limits(team), ["workspace", f"channel:{channel}"]))
        ws, ch = _limit(stored_ws), _limit(stored_ch)
        return Limits(
            workspace=ws if ws is not None else self.default_workspace,
            channel=ch if ch is not None else self.default_channel,
            workspace_source="set" if ws is not None else ("default" if self.default_workspace is not None else "none"),
            channel_source="set" if ch is not None else ("default" if self.default_channel is not None else "none"),
        )

    async def channel_limits(self, team: str) -> dict[str, float]:
        """Every channel with an admin-set limit."""
        raw = await cast(Awaitable[dict], self._redis.hgetall(keys.budget_limits(team)))
        return {as_text(k).removeprefix("channel:"): float(as_text(v)) for k, v in raw.items()
                if as_text(k).startswith("channel:")}

    async def set_limit(self, team: str, usd: float, *, channel: str | None = None) -> None:
        await cast(Awaitable[int], self._redis.hset(keys.budget_limits(team), f"channel:{channel}" if channel else "workspace", repr(usd)))

    async def clear_limit(self, team: str, *, channel: str | None = None) -> bool:
        return bool(await cast(Awaitable[int], self._redis.hdel(keys.budget_limits(team), f"channel:{channel}" if channel else "workspace")))

    # --- claim, settle, reserve --------------------------------------------------------------

    async def claim_within_budget(self, *, team: str, channel: str, holder: str, zone: str, run_seconds: int,
                                  zone_explicit: bool, worst_case_usd: float | None,
                                  note: dict | None = None) -> BudgetedClaim:
        """The lease claim of LeaseStore.claim, refused when its worst case does not fit a budget."""
        candidate = candidate_lease(team=team, channel=channel, holder=holder, zone=zone, run_seconds=run_seconds,
                                    zone_explicit=zone_explicit)
        lease_id, now = candidate.lease_id, candidate.created_at
        month = month_of(now)
        default = lambda value: NO_LIMIT if value is None else repr(value)  # noqa: E731
        need = UNKNOWN_COST if worst_case_usd is None else repr(max(0.0, worst_case_usd))
        reply = await self._claim(
            keys=[keys.lease(team, channel), keys.fence(team, channel), keys.lease_index(),
                  keys.spend_ledger(team, month), keys.spend_open(team, month), keys.budget_limits(team)],
            args=[channel, lease_id, need, default(self.default_workspace), default(self.default_channel),
                  LEDGER_TTL_SECONDS, _open_note(now, note), *claim_fields(candidate)],
        )
        verdict = int(reply[0])
        if verdict == 2:
            scope, *numbers = (as_text(part) for part in reply[1:])
            ch_limit, ch_spent, ch_reserved, ws_limit, ws_spent, ws_reserved = numbers
            return BudgetedClaim(None, Refusal(
                scope="channel" if scope == "channel" else "workspace", need=worst_case_usd, channel_limit=_limit(ch_limit), channel_spent=float(ch_spent),
                channel_reserved=float(ch_reserved), workspace_limit=_limit(ws_limit),
                workspace_spent=float(ws_spent), workspace_reserved=float(ws_reserved)))
        raw = reply[1]
        pairs = dict(zip(raw[::2], raw[1::2]))
        return BudgetedClaim(ClaimResult(created=bool(verdict), lease=Lease.from_redis(pairs)))

    async def settle(self, team: str, month: str, record: SpendRecord, *, append_receipt: bool = True) -> bool:
        """Replace the lease's reservation by its cost; False if it was settled before."""
        done = await self._settle(
            keys=[keys.spend_ledger(team, month), keys.spend_open(team, month), keys.spend_settled(team, month),
                  keys.spend_receipts()],
            args=[record.lease_id, record.channel, repr(record.cost), record.to_json(), team, month,
                  LEDGER_TTL_SECONDS, "1" if append_receipt else "0"],
        )
        return bool(done)

    async def raise_reservation(self, team: str, month: str, lease_id: str, usd: float) -> bool:
        """Raise a running lease's reservation to `usd` (its worst case, once known); never lowers it."""
        done = await self._raise_reservation(
            keys=[keys.spend_ledger(team, month), keys.spend_open(team, month)],
            args=[lease_id, "", repr(max(0.0, usd)), LEDGER_TTL_SECONDS],
        )
        return bool(done)

    # --- reading -----------------------------------------------------------------------------

    async def month(self, team: str, month: str) -> MonthLedger:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(keys.spend_ledger(team, month))
            pipe.hgetall(keys.spend_open(team, month))
            pipe.hgetall(keys.spend_settled(team, month))
            totals, open_, settled = await pipe.execute()
        ledger = MonthLedger(month=month)
        for name, value in ((as_text(k), float(as_text(v))) for k, v in totals.items()):
            if name == "ws:spent":
                ledger.spent = value
            elif name == "ws:reserved":
                ledger.reserved = value
            elif name.startswith("ch:"):
                channel, _, what = name[3:].rpartition(":")
                (ledger.channel_spent if what == "spent" else ledger.channel_reserved)[channel] = value
        for lease_id, value in open_.items():
            channel, usd, claimed_at, note = as_text(value).split("|", 3)
            ledger.open[as_text(lease_id)] = OpenReservation(as_text(lease_id), channel, float(usd), float(claimed_at),
                                                           json.loads(note or "{}"))
        for lease_id, value in settled.items():
            ledger.settled[as_text(lease_id)] = SpendRecord.from_json(value)
        return ledger

    async def receipts(self) -> list[tuple[str, str, SpendRecord]]:
        """Every settled lease ever appended, oldest first: (team, month, record)."""
        found, start = [], "-"
        while True:
            rows = await self._redis.xrange(keys.spend_receipts(), min=start, count=500)
            for _entry_id, fields in rows:
                f = {as_text(k): as_text(v) for k, v in fields.items()}
                found.append((f["team"], f["month"], SpendRecord.from_json(f["record"])))
            if len(rows) < 500:
                return found
            start = "(" + as_text(rows[-1][0])

    async def rebuild_month(self, team: str, month: str, settled: list[SpendRecord],
                            running: list[OpenReservation], *, now: float | None = None) -> MonthLedger:
        """Rewrite a month's ledger from its receipts and its running leases, in one step.

        Settled leases already in the ledger stay (a lease may settle while the caller reads the
        receipts); a reservation made by a claim meanwhile (not in `running`) is kept; one neither
        running nor settled and older than STALE_OPEN_SECONDS is dropped.
        """
        args: list[str] = [str(LEDGER_TTL_SECONDS), repr(now or time.time()), str(STALE_OPEN_SECONDS),
                           str(len(settled))]
        for record in settled:
            args += [record.lease_id, record.channel, repr(record.cost), record.to_json()]
        for held in running:
            args += [held.lease_id, held.channel, repr(max(0.0, held.usd)), _open_note(held.claimed_at, held.note)]
        await self._rebuild(keys=[keys.spend_ledger(team, month), keys.spend_open(team, month),
                                  keys.spend_settled(team, month)], args=args)
        return await self.month(team, month)
