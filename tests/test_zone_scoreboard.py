"""The zone scoreboard on a real Redis: recording, skips with TTLs, ordering, the same-error rule."""

from __future__ import annotations

import os
import pytest
from redis.asyncio import Redis

from infra.scoreboard import ZoneScoreboard, error_signature
from infra.tpu_errors import TpuErrorKind, classify_status

ZONES = ["europe-west4-a", "us-central1-a", "us-west4-a", "us-south1-a"]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def board(redis_url):
    redis = Redis.from_url(redis_url)
    clock = Clock()
    yield ZoneScoreboard(redis, "v5litepod-1", clock=clock), clock
    await redis.aclose()


def flex_start_error(zone: str):
    return classify_status(3, f'FLEX_START provisioning model is not supported for accelerator type "v5litepod-1" '
                              f'in location "{zone}"', zone=zone)


async def test_cold_order_is_default_first_then_configured_order(board):
    scoreboard, _ = board
    order = await scoreboard.order(ZONES, default_zone="us-west4-a")
    assert order.order == ["us-west4-a", "europe-west4-a", "us-central1-a", "us-south1-a"]


async def test_success_ranks_first_and_flex_start_rejection_skips_for_days(board):
    scoreboard, clock = board
    skip = await scoreboard.record_error("europe-west4-a", flex_start_error("europe-west4-a"))
    assert skip is not None and skip.until - clock.now == TpuErrorKind.FLEX_START_UNSUPPORTED.suggested_skip.total_seconds()
    await scoreboard.record_accepted("us-south1-a")
    await scoreboard.record_active("us-south1-a", 95.0)
    order = await scoreboard.order(ZONES, default_zone="europe-west4-a")
    assert order.order[0] == "us-south1-a"
    assert "europe-west4-a" not in order.order and [z for z, _ in order.skipped] == ["europe-west4-a"]
    rows = {row.zone: row for row in await scoreboard.rows(ZONES)}
    assert rows["us-south1-a"].median_seconds_to_active == 95.0 and rows["us-south1-a"].last_outcome == "active"
    # Two days later the zone is still skipped; four days later it is back, behind zones never tried.
    clock.now += 2 * 86400
    assert "europe-west4-a" not in (await scoreboard.order(ZONES, "europe-west4-a")).order
    clock.now += 2 * 86400
    order = await scoreboard.order(ZONES, default_zone="europe-west4-a")
    assert order.order[0] == "us-south1-a" and order.order[-1] == "europe-west4-a" and not order.skipped


async def test_skip_expires_with_its_redis_ttl(board, redis_url):
    scoreboard, _ = board
    no_capacity = classify_status(8, 'There is no more capacity in the zone "us-central1-a"; you can try in another '
                                     "zone", zone="us-central1-a")
    assert no_capacity.kind is TpuErrorKind.NO_CAPACITY
    await scoreboard.record_error("us-central1-a", no_capacity)
    redis = Redis.from_url(redis_url)
    try:
        keys = [k async for k in redis.scan_iter("tpubot:zones:*skip-zone:us-central1-a")]
        assert len(keys) == 1
        ttl = await redis.pttl(keys[0])
        assert 0 < ttl <= TpuErrorKind.NO_CAPACITY.suggested_skip.total_seconds() * 1000
        await redis.delete(keys[0])  # what the TTL does after ten minutes
    finally:
        await redis.aclose()
    order = await scoreboard.order(ZONES, "us-central1-a")
    # Back in play, but after the zones never tried: it only ever failed.
    assert order.order[-1] == "us-central1-a"


async def test_quota_error_skips_the_whole_region(board):
    scoreboard, _ = board
    quota = classify_status(8, "Quota 'TPUV5sPreemptibleLitepodPerProjectPerRegionForTPUAPI' exhausted. Limit 0 in "
                               "region us-central1.", zone="us-central1-a")
    assert quota.kind is TpuErrorKind.QUOTA_EXCEEDED
    await scoreboard.record_error("us-central1-a", quota)
    zones = ZONES + ["us-central1-b"]
    order = await scoreboard.order(zones, "us-central1-b")
    assert {z for z, _ in order.skipped} == {"us-central1-a", "us-central1-b"}


async def test_zones_not_offering_the_type_are_left_out(board):
    scoreboard, _ = board
    await scoreboard.set_offers("us-south1-a", False)
    await scoreboard.set_offers("us-west4-a", True)
    order = await scoreboard.order(ZONES, "us-west4-a")
    assert order.not_offered == ["us-south1-a"] and "us-south1-a" not in order.order


async def test_same_unclassified_error_is_counted_across_zones(board):
    scoreboard, _ = board
    text = 'Cloud TPU received a bad request. Unexpected field in project "p" for zone {zone} [EID: 0x{eid}]'
    seen = []
    for zone, eid in zip(ZONES[:3], ("1a2b3c4d5e6f7a8b", "99aa00bb11cc22dd", "0123456789abcdef")):
        seen = await scoreboard.same_error_zones(zone, text.format(zone=zone, eid=eid))
    assert seen == sorted(ZONES[:3])
    other = await scoreboard.same_error_zones("us-south1-a", "something else entirely")
    assert other == ["us-south1-a"]


def test_error_signature_ignores_zone_ids_and_numbers():
    a = error_signature('no more capacity in the zone "us-west4-a" [EID: 0xdeadbeef01234567] after 30s')
    b = error_signature('no more capacity in the zone "europe-west4-b" [EID: 0x0000000000000001] after 7s')
    assert a == b
    assert a != error_signature("permission denied")


def test_tpubot_zones_prints_the_table_in_search_order(redis_url, tmp_path, monkeypatch):
    import asyncio

    from typer.testing import CliRunner

    from bot.cli import app

    async def record() -> None:
        redis = Redis.from_url(redis_url)
        try:
            scoreboard = ZoneScoreboard(redis, "v5litepod-1")
            await scoreboard.record_error("europe-west4-a", flex_start_error("europe-west4-a"))
            await scoreboard.record_accepted("us-south1-a")
            await scoreboard.record_active("us-south1-a", 125.0)
        finally:
            await redis.aclose()

    asyncio.run(record())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("TPU_ZONES", ",".join(ZONES))
    monkeypatch.setenv("TPU_ZONE", "europe-west4-a")
    monkeypatch.setenv("COLUMNS", "160")
    result = CliRunner().invoke(app, ["zones"])
    assert result.exit_code == 0, result.output
    # piped: plain aligned text, no box drawing, rows in search order
    assert "│" not in result.output and "…" not in result.output
    lines = [line for line in result.output.splitlines() if any(zone in line for zone in ZONES)]
    assert "us-south1-a" in lines[0] and "active" in lines[0] and "2m5s" in lines[0]
    skipped = next(line for line in lines if "europe-west4-a" in line)
    assert "flex_start_unsupported" in skipped and "UTC" in skipped
    assert "tries us-south1-a first" in result.output


async def test_a_zone_that_only_accepted_never_outranks_an_untried_one(board):
    """Issue 29 item 3: a QR torn down while waiting for capacity says the zone had none."""
    scoreboard, clock = board
    await scoreboard.record_accepted("us-south1-a")  # the QR waited, then the lease was torn down
    clock.now += 11
    order = await scoreboard.order(ZONES, default_zone="us-west4-a")
    assert order.order[0] == "us-west4-a"
    assert order.order[-1] == "us-south1-a"
    rows = {row.zone: row for row in await scoreboard.rows(ZONES)}
    assert rows["us-south1-a"].successes == 0 and rows["us-south1-a"].last_outcome == "accepted"
    # Once that zone reaches ACTIVE it is the first choice again.
    await scoreboard.record_active("us-south1-a", 40.0)
    assert (await scoreboard.order(ZONES, default_zone="us-west4-a")).order[0] == "us-south1-a"
