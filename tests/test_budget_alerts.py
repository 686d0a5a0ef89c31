"""Budget alerts and the ledger's rebuild with real `tpubot worker` processes (issue 21).

The harness of tests/test_expiry_alerts.py: the web side in the test's process, workers as separate
processes configured through the environment, the TPU API and Slack emulated. Prices are set
high ($3600 or $360 per chip-hour) so seconds-long flex-start runs spend whole dollars.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import redis as redis_sync

from infra.prices import money

import test_expiry_alerts
from test_expiry_alerts import (ADMIN, ALICE, TEAM, TPUBOT, arq_keys, channel_posts, lease_of, qrs_of, wait_until,
                                worker_env)

pytestmark = pytest.mark.e2e  # runs our own processes or a LocalStack (conftest end_to_end_work_is_marked_e2e)

# Fixtures shared with test_expiry_alerts, bound here by name (pytest finds a module's fixtures by name)
harness = test_expiry_alerts.harness


def price(usd_per_chip_hour: float) -> str:
    return json.dumps([{"accelerator": "v5e", "region": "us-west4", "provisioning_model": "flex-start",
                        "usd_per_chip_hour": usd_per_chip_hour, "as_of": "2026-12-01", "source": "test rate"}])


def posts_starting(stack, channel: str, prefix: str) -> list[str]:
    return [c.body["text"] for c in channel_posts(stack, channel) if c.body.get("text", "").startswith(prefix)]


def cron_runs(stack) -> int:
    client = redis_sync.Redis.from_url(stack.redis.url)
    try:
        return len(client.keys("arq:result:cron:budget_alerts:*"))
    finally:
        client.close()


def spend_json(stack, tmp_path, **env) -> dict:
    done = subprocess.run([TPUBOT, "spend", "--json"], env=worker_env(stack, tmp_path, **env), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (team,) = json.loads(done.stdout)["teams"]
    return {row["channel"]: row for row in team["channels"]}


def test_80_and_100_percent_alerts_exactly_once_with_three_workers(harness):
    # $1 a second; each channel may spend $9, the workspace $18; two 9-second runs use all of both.
    budgets = dict(budget_channel_monthly="9", budget_workspace_monthly="18", tpu_zones="us-west4-a")
    stack, slack, workers = harness(workers=3, settings={**budgets, "prices": price(3600)}, prices=price(3600),
                                    idle_check_interval="1s", **budgets)
    channels = ["CBUD1", "CBUD2"]
    for channel in channels:
        reply = slack.slash("up 0.0025h", user=ALICE, channel=channel)  # 9 s, worst case $9.00
        assert "Requested" in reply.text, reply.text
    refused = slack.slash("up 0.0025h", user=ALICE, channel="CBUD3").text
    assert "the workspace's" in refused and "No run fits" in refused, refused
    try:
        wait_until(lambda: all(posts_starting(stack, c, ":octagonal_sign:") for c in channels), timeout=120,
                   what="both channels at 100 %")
        wait_until(lambda: posts_starting(stack, ADMIN, ":octagonal_sign: This workspace"), timeout=60,
                   what="the workspace at 100 %")
        # Quiet: three more rounds of the every-second check after the last alert post nothing new.
        settled_at = cron_runs(stack)
        wait_until(lambda: cron_runs(stack) >= settled_at + 3, timeout=60, what="three more budget checks")
    except AssertionError:
        print(workers.logs())
        raise
    for channel in channels:
        at_80 = posts_starting(stack, channel, f":moneybag: <#{channel}>")
        at_100 = posts_starting(stack, channel, f":octagonal_sign: <#{channel}>")
        print(at_80 + at_100)
        assert len(at_80) == 1 and "past 80%" in at_80[0]
        assert len(at_100) == 1 and "$9.00 of $9.00 (100%)" in at_100[0]
        # The admins hear of each channel's thresholds once too.
        assert len(posts_starting(stack, ADMIN, f":moneybag: <#{channel}>")) == 1
        assert len(posts_starting(stack, ADMIN, f":octagonal_sign: <#{channel}>")) == 1
        assert len(posts_starting(stack, channel, ":moneybag: This workspace")) <= 1
    workspace_80 = posts_starting(stack, ADMIN, ":moneybag: This workspace")
    workspace_100 = posts_starting(stack, ADMIN, ":octagonal_sign: This workspace")
    print(workspace_80 + workspace_100)
    assert len(workspace_80) == 1 and len(workspace_100) == 1
    assert "$18.00 of $18.00 (100%)" in workspace_100[0]


def test_a_run_is_billed_from_the_clouds_active_not_from_when_the_watcher_saw_it(harness):
    """The cloud ends a flex-start run maxRunDuration after its real ACTIVE (terminationTime); the
    watcher sees ACTIVE up to a poll later (2 s here). The lease's ACTIVE time, the start of its bill,
    is the cloud's: terminationTime - maxRunDuration."""
    from datetime import datetime

    stack, slack, _ = harness(workers=1, poll_interval="2s")
    assert "Requested" in slack.slash("up 1h", user=ALICE, channel="CBILL").text
    lease = wait_until(lambda: lease_of(stack, "CBILL").get("active_at") and lease_of(stack, "CBILL"), timeout=60,
                       what="ACTIVE")
    wait_until(lambda: arq_keys(stack, f"arq:job:timer:{lease['lease_id']}:*:expiry"), what="the timers, set after")
    lease = lease_of(stack, "CBILL")
    run = qrs_of(stack, "CBILL")[0]["resource"]["runDuration"]
    termination = datetime.fromisoformat(run["terminationTime"].replace("Z", "+00:00")).timestamp()
    assert float(run["maxRunDuration"].rstrip("s")) == 3600
    assert abs(float(lease["active_at"]) - (termination - 3600)) < 0.001, (lease["active_at"], termination)
    assert abs(float(lease["deadline"]) - termination) < 0.001


def test_ledger_rebuilt_from_receipts_and_running_leases_after_the_state_is_wiped(harness, tmp_path):
    # $360 an hour ($0.10 a second): two 9-second runs end ($0.90 each), a 2-hour one keeps $720 reserved.
    budgets = dict(budget_workspace_monthly="722", tpu_zones="us-west4-a")
    stack, slack, workers = harness(workers=1, settings={**budgets, "prices": price(360)}, prices=price(360),
                                    **budgets)
    for channel, hours in (("CREB1", "0.0025h"), ("CREB2", "0.0025h"), ("CREB3", "2h")):
        assert "Requested" in slack.slash(f"up {hours}", user=ALICE, channel=channel).text
    wait_until(lambda: (lambda rows: rows.get("CREB1", {}).get("running") == 0 and
                        rows.get("CREB2", {}).get("running") == 0 and rows.get("CREB3", {}).get("running") == 1)(
        spend_json(stack, tmp_path, prices=price(360))), timeout=120, interval=1.0, what="two runs settled, one running")
    before = spend_json(stack, tmp_path, prices=price(360))
    # What the two runs were billed (about $1.80: see the bounds below), as the refusal words it.
    spent = f"{money(before['CREB1']['usd'] + before['CREB2']['usd'])} spent and $720.00 held"
    refused_before = slack.slash("up 0.0025h", user=ALICE, channel="CREB4").text
    assert spent in refused_before, refused_before
    workers.stop()

    client = redis_sync.Redis.from_url(stack.redis.url)
    kept = {b"tpubot:receipts", b"tpubot:audit"}
    wiped = [key for key in client.keys("*") if key not in kept]
    client.delete(*wiped)  # every lease, reservation, total, timer and job: only the two streams remain
    assert client.keys("tpubot:spend:*") == [] and client.keys("tpubot:lease:*") == []
    client.close()

    done = subprocess.run([TPUBOT, "reconcile"], env=worker_env(stack, tmp_path, prices=price(360)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    print(done.stdout)
    assert "restored" in done.stdout and f"ledgers: {TEAM}/" in done.stdout
    after = spend_json(stack, tmp_path, prices=price(360))
    print(json.dumps(after, indent=1))
    assert set(after) == set(before) == {"CREB1", "CREB2", "CREB3"}
    for channel in ("CREB1", "CREB2"):
        # Rebuilt exactly as it was. Each run is billed from the cloud's ACTIVE to its end, capped at its
        # 9 s ($0.90); an expiry a few ms before the deadline bills a few ms less.
        assert after[channel]["usd"] == before[channel]["usd"] and 0.85 < after[channel]["usd"] <= 0.90 + 1e-9
        assert after[channel]["leases"] == 1 and after[channel]["running"] == 0
    assert after["CREB3"]["running"] == 1 and after["CREB3"]["reserved_usd"] == before["CREB3"]["reserved_usd"] == 720
    refused_after = slack.slash("up 0.0025h", user=ALICE, channel="CREB4").text
    assert spent in refused_after, refused_after
