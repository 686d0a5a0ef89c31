"""`tpubot cost --channel C… --team T…`: the channel lease's cost so far and to its deadline, read
from the bot's Redis and computed by the same action as `/tpu cost`."""

from __future__ import annotations

import os
import asyncio
import json
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis
from typer.testing import CliRunner

from bot.cli import app
from infra.state.leases import LeaseState, LeaseStore

TEAM, CHANNEL = "T0COST", "C0COST"


async def active_lease(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        store = LeaseStore(redis)
        claim = await store.claim(team=TEAM, channel=CHANNEL, holder="UALICE", zone="us-west4-a", run_seconds=4 * 3600)
        now = time.time()
        # One hour in of a four-hour run at flex-start $0.60/h: $0.60 so far, $1.80 to go.
        await store.update(claim.lease, state=LeaseState.READY, active_at=now - 3600, deadline=now + 3 * 3600)
    finally:
        await redis.aclose()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str) -> dict:
    monkeypatch.delenv("PRICES", raising=False)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    return {"COLUMNS": "250", "REDIS_URL": redis_url}


def test_channel_lease_cost_so_far_and_to_deadline(env: dict, redis_url: str) -> None:
    asyncio.run(active_lease(redis_url))
    result = CliRunner().invoke(app, ["cost", "--channel", CHANNEL, "--team", TEAM], env=env)
    assert result.exit_code == 0, result.output
    assert "$0.60 so far, $1.80 more to its deadline, $2.40 in all" in result.output
    assert "No benchmark of this endpoint yet" in result.output
    as_json = CliRunner().invoke(app, ["cost", "--channel", CHANNEL, "--team", TEAM, "--json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)  # the shape docs/json.md gives for --channel
    assert (document["team"], document["channel"]) == (TEAM, CHANNEL) and "$2.40 in all" in document["text"]


def test_channel_without_a_lease_and_bad_combinations(env: dict) -> None:
    empty = CliRunner().invoke(app, ["cost", "--channel", "C0NONE", "--team", TEAM], env=env)
    assert empty.exit_code == 0 and "no TPU in this channel" in empty.output
    alone = CliRunner().invoke(app, ["cost", "--channel", CHANNEL], env=env)
    assert alone.exit_code == 2 and "--channel and --team go together" in alone.output
    both = CliRunner().invoke(app, ["cost", "--channel", CHANNEL, "--team", TEAM, "--hours", "2"], env=env)
    assert both.exit_code == 2 and "not both" in both.output


def test_a_channel_named_rather_than_ided_is_refused(env: dict) -> None:
    # An unreachable REDIS_URL is one line with the fix too: tests/test_startup_errors.py.
    named = CliRunner().invoke(app, ["cost", "--channel", "#tpu", "--team", TEAM], env=env)
    assert named.exit_code == 2 and "--channel #tpu is not a Slack id" in named.output
