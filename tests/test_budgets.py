"""Spend guardrails (issue 21): `/tpu up` refused by a channel's or the workspace's monthly budget
with the hours that fit, admin-only budget changes, `/tpu spend` over a month of leases and its
chart read back from the PNG Slack received.

The real bolt app takes signed requests in-process (tests/in_process_bot.py); the claims run the
real Lua against the test's Redis; the TPU API and Slack's Web API are the project's emulators.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections import Counter
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_sync
from redis.asyncio import Redis

from handlers.commands import CommandError, parse
from infra.spend_chart import BUSY_COLOR, HEIGHT_PX, IDLE_COLOR, WIDTH_PX
from infra.state import keys
from infra.state.spend import SpendLedger, SpendRecord, month_of

ALICE, BOB, ADMIN = "UALICE", "UBOB", "UADMIN"
TEAM = "T0SANDBOX"
TPUBOT = str(Path(sys.executable).with_name("tpubot"))
ONE_ZONE = "us-west4-a"  # the default price table prices us-west4 ($0.60 per chip-hour, flex-start)


@pytest.fixture
def bot(make_bot):
    return make_bot(poll_interval="0.2s", admins=ADMIN, tpu_zones=ONE_ZONE, budget_channel_monthly="2")


@pytest.fixture
def slack(bot):  # this file's team
    requests = bot.signed_requests(team=TEAM)
    yield requests
    requests.close()


def lease_keys(bot) -> list[str]:
    client = redis_sync.Redis.from_url(bot.redis.url, decode_responses=True)
    try:
        return sorted(client.smembers(keys.lease_index()))
    finally:
        client.close()


def test_up_refused_by_the_channel_budget_offers_the_hours_that_fit(bot, slack):
    # $2 a month for each channel (BUDGET_CHANNEL_MONTHLY); 4 h × $0.60 = $2.40 could overrun it.
    reply = slack.slash("up 4h", user=ALICE, channel="C0ML")
    print(reply.text)
    assert ":money_with_wings:" in reply.text
    assert "could cost up to $2.40 (4 h × $0.60/h)" in reply.text
    assert "this channel's" in reply.text and "budget is $2.00" in reply.text
    assert "go over by $0.40" in reply.text
    assert "`/tpu up 3.3h` would fit." in reply.text
    assert lease_keys(bot) == [] and bot.tpu_sandbox.queued_resources() == []  # nothing changed

    fitting = slack.slash("up 3.3h", user=ALICE, channel="C0ML")
    assert "Requested a v5litepod-1" in fitting.text, fitting.text
    assert len(lease_keys(bot)) == 1
    budget = slack.slash("budget", user=BOB, channel="C0ML").text
    print(budget)
    assert "$2.00 (default from settings)" in budget and "$1.98 more held by running TPUs" in budget


def test_under_a_budget_a_plain_up_searches_only_the_priced_zones(make_bot):
    # The default zone list: only us-west4-a has a price in the default table.
    bot = make_bot(poll_interval="0.2s", admins=ADMIN, budget_channel_monthly="20")
    slack = bot.signed_requests(team=TEAM)
    try:
        reply = slack.slash("up 2h", user=ALICE, channel="C0PZ")
        assert "Requested a v5litepod-1" in reply.text, reply.text
        assert "only zones with a price are searched: us-west4-a" in reply.text
        bot.until(lambda: bot.tpu_sandbox.queued_resources(), timeout=30)
        assert {qr["name"].split("/")[3] for qr in bot.tpu_sandbox.queued_resources()} == {"us-west4-a"}
        budget = slack.slash("budget", user=BOB, channel="C0PZ").text
        assert "$1.20 more held by running TPUs" in budget, budget  # 2 h at us-west4-a's $0.60/chip-hour, 1 chip

        # A zone without a price, named: its worst case cannot be checked, so nothing is requested.
        refused = slack.slash("up us-central1-a 1h", user=BOB, channel="C0PZ2")
        assert "us-central1-a, which has no price in the table" in refused.text, refused.text
    finally:
        slack.close()


def test_without_a_budget_a_plain_up_may_search_every_zone(make_bot):
    bot = make_bot(poll_interval="0.2s", admins=ADMIN)
    slack = bot.signed_requests(team=TEAM)
    try:
        reply = slack.slash("up 2h", user=ALICE, channel="C0AZ")
        assert "the best-known other zones are tried." in reply.text and "price" not in reply.text, reply.text
    finally:
        slack.close()


def test_a_tpu_claimed_without_a_budget_holds_its_worst_case_once_it_runs(make_bot):
    """Without a budget every zone may be searched, some unpriced, so the claim held nothing: /tpu budget
    said $0.00 held while a TPU ran with its whole run to go. Once ACTIVE its zone's rate is known."""
    bot = make_bot(poll_interval="0.2s", admins=ADMIN)
    slack = bot.signed_requests(team=TEAM)
    try:
        assert "Requested" in slack.slash("up 1h", user=ALICE, channel="C0HELD").text
        bot.until(lambda: any(q["state"] == "ACTIVE" for q in bot.tpu_sandbox.queued_resources()), timeout=30)
        budget = bot.until(lambda: (text := slack.slash("budget", user=BOB, channel="C0HELD").text)
                           and "$0.60 more held by running TPUs" in text and text, timeout=15,
                           what="the running TPU's hour at $0.60/h held")
        assert "Workspace: no limit" in budget and "$0.60 more held by running TPUs." in budget
    finally:
        slack.close()


def test_up_refused_by_the_workspace_budget_set_by_an_admin(bot, slack):
    denied = slack.slash("budget set 4", user=ALICE, channel="C0OPS")
    assert ":no_entry:" in denied.text and "admin" in denied.text
    assert "no limit" in slack.slash("budget", user=ALICE, channel="C0OPS").text.split("Workspace:")[1]

    assert "is now $4.00" in slack.slash("budget set 4", user=ADMIN, channel="C0OPS").text
    assert "is now $50.00" in slack.slash("budget set 50 <#C0OPS|ops>", user=ADMIN, channel="C0OPS").text
    assert "Requested" in slack.slash("up 4h", user=ALICE, channel="C0OPS").text  # $2.40 of $50 and of $4
    refused = slack.slash("up us-west4-a 4h", user=BOB, channel="C0NEW")
    print(refused.text)
    # C0NEW's own budget ($2, the default) would refuse 4 h first; 3 h ($1.80) fits it but not the workspace.
    assert "this channel's" in refused.text
    refused = slack.slash("up us-west4-a 3h", user=BOB, channel="C0NEW")
    print(refused.text)
    assert "the workspace's" in refused.text and "budget is $4.00 with $0.00 spent and $2.40 held" in refused.text
    assert "go over by $0.20" in refused.text and "`/tpu up us-west4-a 2.6h` would fit." in refused.text
    assert len(lease_keys(bot)) == 1

    assert "cleared" in slack.slash("budget clear", user=ADMIN, channel="C0OPS").text
    assert "Requested" in slack.slash("up us-west4-a 3h", user=BOB, channel="C0NEW").text


def test_bad_budget_and_spend_input_is_refused_with_the_syntax():
    for text, expected in (("budget set abc", "is not an amount of USD"), ("budget set", "takes an amount"),
                           ("budget frobnicate", "is not a budget command"),
                           ("spend 2026-11 2026-12", "at most one month")):
        with pytest.raises(CommandError, match=expected):
            parse(text)


def test_bad_month_and_plain_channel_name_change_nothing(bot, slack):
    assert "is not a month; write it as YYYY-MM" in slack.slash("spend 2026-13", user=ALICE, channel="C0ML").text
    reply = slack.slash("budget set 5 #ml", user=ADMIN, channel="C0ML").text
    assert "as plain text" in reply and "C0123ABCD" in reply


# --- a month of simulated leases ---------------------------------------------------------------

MONTH = "2026-11"
# (channel, hours, output tokens or None when metrics were never read, idle hours), 30 leases.
SIMULATED = [("C0ML", 4.0, 2_400_000, 0.5)] * 12 + [("C0OPS", 2.0, None, 1.5)] * 10 + [("C0EVAL", 1.0, 90_000, 0.0)] * 8


def simulated_month(redis_url: str) -> None:
    async def write() -> None:
        redis = Redis.from_url(redis_url)
        ledger = SpendLedger(redis)
        try:
            for i, (channel, hours, tokens, idle) in enumerate(SIMULATED):
                start = 1_793_491_200 + i * 80_000  # 2026-11-01T00:00Z onwards, inside November
                assert month_of(start) == MONTH
                await ledger.settle(TEAM, MONTH, SpendRecord(
                    lease_id=f"sim{i:03d}", channel=channel, holder=ALICE, zone=ONE_ZONE, started_at=start,
                    ended_at=start + hours * 3600, billed_seconds=hours * 3600, cost=hours * 0.60,
                    output_tokens=tokens, requests=tokens / 100 if tokens else None, idle_seconds=idle * 3600,
                    usd_per_chip_hour=0.60))
        finally:
            await redis.aclose()

    asyncio.run(write())


@pytest.mark.e2e  # runs `tpubot spend`
def test_spend_for_a_month_of_simulated_leases_and_the_chart_read_back(bot, slack, tmp_path):
    simulated_month(bot.redis.url)
    # The table is a code block, where Slack shows `<#C0ML>` as typed: it names channels as
    # conversations.info does (the ids were shown before).
    for channel, name in (("C0ML", "ml-training-cluster"), ("C0OPS", "ops"), ("C0EVAL", "eval")):
        bot.slack.name_channel(channel, name)
    reply = slack.slash(f"spend {MONTH}", user=BOB, channel="C0ML")
    print(reply.text)
    table = reply.text.split("```")[1].splitlines()
    assert table[0].split() == ["channel", "leases", "TPU", "h", "USD", "$/M", "out", "idle", "h", "budget"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    # C0ML: 12 × 4 h × $0.60 = $28.80 for 28.8 M tokens → $1.000/M; C0OPS never had metrics → "—".
    assert rows["#ml-training-cluster"] == ["#ml-training-cluster", "12", "48.00", "28.80", "1.000", "6.00", "2.00"]
    assert rows["#ops"] == ["#ops", "10", "20.00", "12.00", "—", "15.00", "2.00"]
    assert rows["#eval"] == ["#eval", "8", "8.00", "4.80", "6.667", "0.00", "2.00"]
    assert len({len(line.rstrip()) for line in table}) == 1  # a name longer than the column widens it
    assert rows["all"] == ["all", "30", "76.00", "45.60", "21.00", "—"]
    assert "21.00 h this month" in reply.text

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "BUDGET_"))}
    cli = subprocess.run([TPUBOT, "spend", MONTH, "--json"], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**env, "REDIS_URL": bot.redis.url, "TPUBOT_ENV_FILE": os.devnull})
    assert cli.returncode == 0, cli.stderr
    data = json.loads(cli.stdout)
    (team,) = data["teams"]
    assert team["team"] == TEAM and round(team["usd"], 2) == 45.60
    assert {c["channel"]: c["leases"] for c in team["channels"]} == {"C0EVAL": 8, "C0ML": 12, "C0OPS": 10}

    assert "Drawing the 2026-11 spend chart" in slack.slash(f"spend chart {MONTH}", user=BOB, channel="C0ML").text
    bot.until(lambda: bot.slack.calls_to("files.completeUploadExternal"), timeout=60, what="the chart upload")
    (upload,) = [u for u in bot.slack.uploads.values() if u["filename"] == f"spend-{MONTH}.png"]
    assert upload["shared"]["channel_id"] == "C0ML"
    bars = read_bars(upload["data"])
    print("bars (left→right, busy px, idle px):", bars)
    # Sorted by channel id: C0EVAL $4.80, C0ML $28.80 (1/8 idle), C0OPS $12.00 (3/4 idle).
    assert len(bars) == 3
    totals = [busy + idle for busy, idle in bars]
    assert abs(totals[1] / totals[0] - 28.80 / 4.80) < 0.25
    assert abs(totals[2] / totals[0] - 12.00 / 4.80) < 0.15
    assert bars[0][1] == 0 and abs(bars[1][1] / totals[1] - 0.125) < 0.03 and abs(bars[2][1] / totals[2] - 0.75) < 0.03


def read_bars(png: bytes) -> list[tuple[int, int]]:
    """Decode the PNG and measure each bar: (height in the busy colour, height in the idle colour)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (WIDTH_PX, HEIGHT_PX)
    busy_rgb = tuple(int(BUSY_COLOR[i:i + 2], 16) for i in (1, 3, 5))
    idle_rgb = tuple(int(IDLE_COLOR[i:i + 2], 16) for i in (1, 3, 5))
    pixels = image.load()

    def column(x: int) -> tuple[int, int]:
        column_px = [pixels[x, y] for y in range(HEIGHT_PX)]
        return column_px.count(busy_rgb), column_px.count(idle_rgb)

    # A bar is a run of columns in the bar colours; its height is the run's most common column
    # (a legend swatch above a bar touches a few of its columns only).
    columns = [column(x) for x in range(WIDTH_PX)]
    bars, run = [], []
    for counts in columns + [(0, 0)]:
        if sum(counts) > 20:
            run.append(counts)
        elif run:
            if len(run) > 10:
                bars.append(Counter(run).most_common(1)[0][0])
            run = []
    return bars


# --- App Home, settings, idle time ---------------------------------------------------------------


def test_app_home_shows_this_months_spend_per_channel(bot, slack):
    bot.slack.name_channel("C0ML", "ml")
    assert "Requested" in slack.slash("up 3h", user=ALICE, channel="C0ML").text
    reply = slack.event({"type": "app_home_opened", "user": BOB, "channel": "D0BOB", "tab": "home"})
    assert reply.status == 200
    call = bot.until(lambda: bot.slack.calls_to("views.publish"), what="the Home tab")[0]
    view = call.body["view"]
    view = json.loads(view) if isinstance(view, str) else view
    spend_text = [b["text"]["text"] for b in view["blocks"] if b["type"] == "section" and "text" in b
                  and "TPU spend in" in b["text"]["text"]]
    assert len(spend_text) == 1, view["blocks"]
    print(spend_text[0])
    row = next(line for line in spend_text[0].split("```")[1].splitlines() if line.startswith("#ml "))
    assert row.split()[:2] == ["#ml", "1"] and row.split()[-1] == "2.00"  # one lease; the $2 channel budget
    assert "1 still running" in spend_text[0]


def test_home_view_with_spend_stays_within_slacks_block_limit():
    from agent.actions import ActionResult
    from agent.actions.workspace_actions import LeaseRows
    from handlers.home_view import MAX_HOME_BLOCKS, home_view

    rows = [{"lease_id": f"l{i}", "channel": f"C{i:04d}", "holder": "U1", "state": "ACTIVE", "zone": ONE_ZONE,
             "deadline": 2_000_000_000.0, "cost_so_far": 0.5} for i in range(150)]
    table = "\n".join(f"C{i:04d}            1    1.00      0.60        —    0.00         —" for i in range(150))
    spend = ActionResult.done(f"*TPU spend in 2026-12*:\n```{table}```\nIdle hours …")
    view = home_view(ActionResult.done("150 TPU leases", payload=LeaseRows(rows)), None, now=1_999_990_000.0,
                     spend=spend)
    assert len(view["blocks"]) == MAX_HOME_BLOCKS
    section = view["blocks"][-1]["text"]["text"]
    assert len(section) <= 3000 and "more rows: `/tpu spend` lists them all" in section
    kept = section.split("```")[1].splitlines()
    assert all(len(line.split()) == 7 for line in kept)  # whole rows only, none cut mid-way


@pytest.mark.parametrize("value, expected", [("200", 200.0), ("$49.50", 49.5), ("", None), ("none", None)])
def test_budget_settings_accept_amounts_and_empty(tmp_path, monkeypatch, value, expected):
    from bot.settings import Settings

    monkeypatch.setenv("BUDGET_CHANNEL_MONTHLY", value)
    assert Settings.load(tmp_path / "none.env").budget_channel_monthly == expected


def test_a_bad_budget_setting_names_the_variable_and_the_fix(tmp_path, monkeypatch):
    from pydantic import ValidationError

    from bot.settings import Settings

    monkeypatch.setenv("BUDGET_WORKSPACE_MONTHLY", "lots")
    with pytest.raises(ValidationError) as excinfo:
        Settings.load(tmp_path / "none.env")
    assert "BUDGET_WORKSPACE_MONTHLY='lots' is not an amount of USD; write it like 200" in str(excinfo.value)


def test_idle_time_adds_up_only_between_readings_without_traffic(redis_url):
    from infra.state.usage import UsageStore
    from infra.vllm_metrics import VllmUsage

    async def run() -> float:
        redis = Redis.from_url(redis_url)
        usage = UsageStore(redis)
        try:
            await usage.record("L1", VllmUsage(0, 0, 10, 1000), 100.0)   # first reading
            await usage.record("L1", VllmUsage(0, 0, 10, 1000), 160.0)   # nothing ran: 60 s idle
            await usage.record("L1", VllmUsage(1, 0, 10, 1000), 220.0)   # a request running: in use
            await usage.record("L1", VllmUsage(0, 0, 12, 1400), 280.0)   # counters moved: in use
            await usage.record("L1", None, 340.0)                        # unreadable: unknown, not idle
            await usage.record("L1", VllmUsage(0, 0, 12, 1400), 400.0)   # back: the clock restarts
            await usage.record("L1", VllmUsage(0, 0, 12, 1400), 430.0)   # 30 s idle
            return (await usage.get("L1")).idle_total
        finally:
            await redis.aclose()

    assert asyncio.run(run()) == 90.0


def test_a_long_spend_table_is_split_at_row_boundaries():
    from handlers.spend_view import spend_sections

    rows = "\n".join(f"C{i:05d}            1    1.00      0.60        —    0.00         —" for i in range(200))
    text = f"*TPU spend in 2026-12*:\n```channel header\n{rows}```\nIdle hours …"
    blocks = spend_sections(text)
    tables = [b["text"]["text"] for b in blocks if b["text"]["text"].startswith("```")]
    assert len(tables) > 1 and all(len(t) <= 3000 for t in tables)
    shown = [line for t in tables for line in t.strip("`").splitlines() if line.startswith("C")]
    assert shown == [f"C{i:05d}            1    1.00      0.60        —    0.00         —" for i in range(200)]
    assert all(t.strip("`").splitlines()[0] == "channel header" for t in tables)


def test_a_rebuild_keeps_a_lease_that_settled_after_the_receipts_were_read(redis_url):
    from infra.state.spend import OpenReservation

    async def run():
        redis = Redis.from_url(redis_url)
        ledger = SpendLedger(redis, default_workspace=10.0)
        try:
            await ledger.settle(TEAM, MONTH, SpendRecord(lease_id="early", channel="C1", cost=1.5))
            receipts = [record for _, _, record in await ledger.receipts()]
            await ledger.settle(TEAM, MONTH, SpendRecord(lease_id="late", channel="C2", cost=2.0))  # meanwhile
            rebuilt = await ledger.rebuild_month(TEAM, MONTH, receipts, [
                OpenReservation("running", "C3", 4.0, claimed_at=0.0, note={})])
            return rebuilt
        finally:
            await redis.aclose()

    rebuilt = asyncio.run(run())
    assert set(rebuilt.settled) == {"early", "late"}
    assert rebuilt.spent == 3.5 and rebuilt.channel_spent == {"C1": 1.5, "C2": 2.0}
    assert rebuilt.reserved == 4.0 and set(rebuilt.open) == {"running"}


def test_a_lease_is_charged_to_the_month_it_was_claimed_in_at_the_receipts_rate(redis_url, tmp_path):
    from agent.lease import budget
    from bot.settings import Settings
    from bot.wiring import build_services
    from infra.state.leases import Lease

    nov_30_23h = 1_796_079_600.0  # 2026-11-30T23:00Z: claimed in November, ended in December
    lease = Lease(lease_id="acr0ss", team=TEAM, channel="C0ML", holder=ALICE, zone=ONE_ZONE, qr_id="q", node_id="n",
                  state="READY", created_at=nov_30_23h, active_at=nov_30_23h + 600, deadline=nov_30_23h + 600 + 4 * 3600,
                  run_seconds=4 * 3600)

    async def run():
        settings = Settings.load(tmp_path / "none.env", redis_url=redis_url)
        svc, redis, pool = await build_services(settings, redis_url=redis_url)
        try:
            ended = nov_30_23h + 600 + 2 * 3600  # two hours after ACTIVE, in December
            assert month_of(ended) == "2026-12"
            assert await budget.settle_lease(svc, lease, now=ended)
            assert not await budget.settle_lease(svc, lease, now=ended + 60)  # once, however often it runs
            return await svc.spend.month(TEAM, "2026-11"), await svc.spend.month(TEAM, "2026-12")
        finally:
            await pool.aclose()
            await redis.aclose()

    november, december = asyncio.run(run())
    assert december.settled == {} and december.spent == 0
    record = november.settled["acr0ss"]
    assert record.billed_seconds == 2 * 3600 and abs(record.cost - 2 * 0.60) < 1e-9  # from ACTIVE, $0.60/chip-h
    assert abs(november.channel_spent["C0ML"] - 1.20) < 1e-9


def test_a_searching_lease_under_a_budget_keeps_its_reservation_through_a_rebuild(redis_url, tmp_path):
    """Default zones (only us-west4-a priced) and a budget: a lease still searching for a zone
    reserves its run at the priced zones' rate, and the reconciler's rebuild keeps that, not $0."""
    from agent.lease import budget
    from bot.settings import Settings
    from bot.wiring import build_services
    from infra.state.leases import Lease

    searching = Lease(lease_id="s3arch", team=TEAM, channel="C0SR", holder=ALICE, zone="us-central1-a", qr_id="q",
                      node_id="n", state="CREATING", created_at=1_796_079_600.0, run_seconds=4 * 3600)

    async def run():
        settings = Settings.load(tmp_path / "none.env", redis_url=redis_url, budget_channel_monthly="20")
        svc, redis, pool = await build_services(settings, redis_url=redis_url)
        try:
            return await budget.searchable_zones(svc, TEAM, "C0SR"), await budget.lease_worst_case(svc, searching)
        finally:
            await pool.aclose()
            await redis.aclose()

    searched, reserved = asyncio.run(run())
    assert searched == ["us-west4-a"]
    assert abs(reserved - 4 * 0.60) < 1e-9


@pytest.fixture
def five_cents(make_bot):
    """$0.05 a month for each channel: a 1 h lease ($0.60) is refused, 5 minutes ($0.05) would fit."""
    bot = make_bot(poll_interval="0.2s", admins=ADMIN, tpu_zones=ONE_ZONE, budget_channel_monthly="0.05")
    requests = bot.signed_requests(team=TEAM)
    yield bot, requests
    requests.close()


@pytest.mark.parametrize("written, said", [
    ("0.0000001h", "shorter than the shortest lease, 10m"),  # once read as 0 s: priced $0, requested as 4 h
    ("0.5s", "shorter than the shortest lease, 10m"),
    ("59s", "shorter than the shortest lease, 10m"),
    ("5m", "shorter than the shortest lease, 10m"),
    ("8d", "longer than the longest lease, 7d"),
    ("999999999999h", "longer than the longest lease, 7d"),  # once an OverflowError: a 500
])
def test_a_lease_too_short_or_too_long_is_refused_and_nothing_is_requested(five_cents, written, said):
    bot, slack = five_cents
    assert ":money_with_wings:" in slack.slash("up us-west4-a 1h", user=ALICE, channel="C0TINY").text
    reply = slack.slash(f"up us-west4-a {written}", user=ALICE, channel="C0TINY")
    assert reply.status == 200 and said in reply.text, reply.text
    assert "Requested" not in reply.text
    assert lease_keys(bot) == [] and bot.tpu_sandbox.queued_resources() == []
    assert bot.tpu_sandbox.create_attempts == []


def test_the_queued_resource_asks_for_the_run_time_the_budget_priced(make_bot):
    bot = make_bot(poll_interval="0.2s", tpu_zones=ONE_ZONE, budget_channel_monthly="0.10")
    slack = bot.signed_requests(team=TEAM)
    try:
        reply = slack.slash("up us-west4-a 10m", user=ALICE, channel="C0TEN")  # $0.10 at $0.60/h
        assert "Requested" in reply.text and "for 10m " in reply.text, reply.text
        bot.until(lambda: bot.tpu_sandbox.queued_resources(), timeout=30)
        (qr,) = bot.tpu_sandbox.queued_resources()
        assert qr["request"]["runDuration"] == {"maxRunDuration": "600s"}
    finally:
        slack.close()
