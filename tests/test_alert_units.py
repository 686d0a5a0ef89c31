"""The pure parts of issue 4: metrics parsing, the usage/idle fold (real Redis), mentions,
cost arithmetic from the price table, settings for lead times."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from agent.lease import oncall, receipts
from agent.context import Alerting
from agent.policy import AlertPolicy
from bot.alert_jobs import cron_schedule
from bot.settings import Settings
from handlers.alerts import receipt_text
from infra.prices import PriceTable
from infra.sandbox.vllm import VllmEmulator
from infra.state.alerts import AlertMarks, BenchResults, OnCallStore
from infra.state.leases import Lease
from infra.state.usage import UsageStore
from infra.vllm_metrics import VllmUsage, metrics_url, parse_usage, read_usage


def test_parse_usage_sums_series_and_rejects_what_is_not_vllm():
    text = VllmEmulator().prometheus_text().replace(
        'vllm:request_success_total{engine="0",model_name="google/gemma-4-E2B-it",finished_reason="stop"} 0.0',
        'vllm:request_success_total{engine="0",model_name="google/gemma-4-E2B-it",finished_reason="stop"} 5.0')
    text = text.replace('finished_reason="length"} 0.0', 'finished_reason="length"} 2.0')
    usage = parse_usage(text)
    assert usage == VllmUsage(running=0.0, waiting=0.0, requests=7.0, output_tokens=0.0)
    assert parse_usage("<html>not prometheus\x00{{") is None
    assert parse_usage("# TYPE up gauge\nup 1\n") is None  # Prometheus, but not vLLM
    assert metrics_url("http://10.0.0.2:8000/v1") == "http://10.0.0.2:8000/metrics"


@pytest.mark.parametrize("mode", ["unreachable", "garbage", "not_found"])
def test_unreadable_metrics_read_as_none(mode):
    with VllmEmulator() as emulator:
        assert asyncio.run(read_usage(emulator.base_url, timeout=2)) is not None
        emulator.metrics_mode = mode
        assert asyncio.run(read_usage(emulator.base_url, timeout=2)) is None


def test_usage_fold_idle_clock_and_restart(redis_url):
    async def run():
        redis = Redis.from_url(redis_url)
        store = UsageStore(redis)
        t = 1000.0
        s = await store.record("L1", VllmUsage(0, 0, 3, 100), t)
        assert s.idle_seconds(t + 10) == 10  # first reading starts the clock
        s = await store.record("L1", VllmUsage(0, 0, 3, 100), t + 60)
        assert s.idle_seconds(t + 60) == 60  # nothing moved: still idle since t
        s = await store.record("L1", VllmUsage(1, 0, 3, 100), t + 70)
        assert s.idle_seconds(t + 70) == 0  # a running request is use
        s = await store.record("L1", None, t + 80)
        assert s.idle_seconds(t + 200) is None  # unknown is never idle
        s = await store.record("L1", VllmUsage(0, 0, 1, 10), t + 90)  # vLLM restarted: counters fell
        assert (s.requests, s.output_tokens) == (4, 110)
        assert s.idle_seconds(t + 95) == 5
        await redis.aclose()

    asyncio.run(run())


def test_mentions_are_normalized_or_refused():
    assert oncall.normalize_mentions(["<!subteam^S0SRE|@sre>", "<@U123|ann>", "<@U123>"]) == [
        "<!subteam^S0SRE>", "<@U123>"]
    for bad in ("@sre", "<!channel>", "<#C1|general>", "<@u123>", "<https://x.example|x>"):
        with pytest.raises(oncall.MentionError):
            oncall.normalize_mention(bad)
    with pytest.raises(oncall.MentionError, match="at most"):
        oncall.normalize_mentions([f"<@U{i:03d}>" for i in range(11)])


def _alerting(redis) -> Alerting:
    return Alerting(policy=AlertPolicy(), marks=AlertMarks(redis), oncall=OnCallStore(redis),
                    usage=UsageStore(redis), bench=BenchResults(redis), prices=PriceTable())


def test_receipt_from_the_price_table(redis_url):
    async def run():
        redis = Redis.from_url(redis_url)
        alerting = _alerting(redis)
        now = time.time()
        lease = Lease(lease_id="abc", team="T", channel="C", holder="U1", zone="us-west4-a", qr_id="q", node_id="n",
                      state="ACTIVE", active_at=now - 7200, deadline=now + 3600, run_seconds=10800)
        await alerting.usage.record("abc", VllmUsage(0, 0, 1000, 2_000_000), now - 10)
        await alerting.marks.acknowledge("abc", "deadline", "U2")
        receipt = await receipts.build_receipt(alerting, "v5litepod-1", lease, reason="Torn down", by="U1", now=now)
        assert receipt.usd_per_chip_hour == 0.60 and receipt.cost == pytest.approx(1.20)
        assert receipt.usd_per_million_output_tokens == pytest.approx(0.60)
        text = receipt_text(receipt)
        assert "2h (2.00 h) × $0.60/chip-hour × 1 chip = *$1.20*" in text
        assert "Served 1,000 requests and 2,000,000 output tokens: $0.60 per million" in text
        assert "<@U2> acknowledged the deadline warning" in text and "Torn down by <@U1>" in text
        # Billing stops at the deadline; no price for a region that is not in the table.
        late = await receipts.build_receipt(alerting, "v5litepod-1", lease, reason="Expired", now=now + 7200)
        assert late.billed_seconds == pytest.approx(10800)
        elsewhere = Lease(**{**lease.__dict__, "zone": "asia-east1-c"})
        assert receipts.cost_so_far(alerting, "v5litepod-1", elsewhere) is None
        # Its receipt (issue 29 item 9: the default zones outside us-west4) is billed at an estimate said to be one.
        estimated = await receipts.build_receipt(alerting, "v5litepod-1", elsewhere, reason="Torn down", now=now)
        assert estimated.cost == pytest.approx(1.20)
        assert "estimated at us-west4's rate: no asia-east1 price in the table" in receipt_text(estimated)
        assert "no price in the table for this TPU" not in receipt_text(estimated)
        await redis.aclose()

    asyncio.run(run())


def test_alert_settings_parse_and_refuse(tmp_path, monkeypatch):
    monkeypatch.setenv("ALERT_LEAD_TIMES", "5m, 30m")
    settings = Settings.load(tmp_path / "none.env")
    assert [d.total_seconds() for d in settings.alert_lead_times] == [1800, 300]
    monkeypatch.setenv("ALERT_LEAD_TIMES", "0s")
    with pytest.raises(ValueError, match="ALERT_LEAD_TIMES must be positive"):
        Settings.load(tmp_path / "none.env")
    monkeypatch.delenv("ALERT_LEAD_TIMES")
    monkeypatch.setenv("IDLE_TEARDOWN_MINUTES", "-1")
    with pytest.raises(ValueError):
        Settings.load(tmp_path / "none.env")
    assert cron_schedule(Settings.model_fields["reconcile_interval"].default) == {
        "minute": {0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55}, "second": {0}}
