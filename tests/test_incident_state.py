"""The incident record and the storm windows (infra/state/incidents.py, issue 42) on a real
Redis-protocol server: state written out of order keeps the newest; a change keeps what it
replaced; storms are counted per route and severity, and a page is never folded."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from infra.state.incidents import NEVER_FOLD, IncidentStore, StateUpdate


def run(redis_url: str, body) -> None:
    async def main() -> None:
        redis = Redis.from_url(redis_url)
        try:
            await body(IncidentStore(redis))
        finally:
            await redis.aclose()

    asyncio.run(main())


def test_state_applied_out_of_order_keeps_the_newest_and_what_a_change_replaced(redis_url):
    async def body(store: IncidentStore) -> None:
        opened = await store.open("pagerduty", "PGR0VU2", "C1", route="*:C1", severity="high", limit=5,
                                  window_seconds=600, now=1000.0)
        assert opened.opened
        first = await store.apply("pagerduty", "PGR0VU2", [
            StateUpdate("snapshot_at", 100.0, {"status": "firing", "priority": "P3", "acknowledged": ""})],
            remember=("priority",))
        assert first.changed == {"status", "priority"} and first.incident is not None
        newer = await store.apply("pagerduty", "PGR0VU2", [
            StateUpdate("snapshot_at", 300.0, {"status": "firing", "priority": "P1", "acknowledged": "1"}),
            StateUpdate("ack_at", 300.0, {"ack_by": "Tenex Engineer"})], remember=("priority",))
        assert newer.changed == {"priority", "acknowledged", "ack_by"}
        assert newer.incident and newer.incident.fields["priority_was"] == "P3"
        # An older delivery run late writes nothing and changes no version.
        older = await store.apply("pagerduty", "PGR0VU2", [
            StateUpdate("snapshot_at", 200.0, {"status": "firing", "priority": "P2", "acknowledged": ""}),
            StateUpdate("ack_at", 200.0, {"ack_by": "Someone Earlier"})], remember=("priority",))
        assert older.changed == frozenset()
        record = older.incident
        assert record and record.fields["priority"] == "P1" and record.fields["ack_by"] == "Tenex Engineer"
        assert record.version == newer.incident.version == await store.version("pagerduty", "PGR0VU2")
        assert await store.repeated("pagerduty", "PGR0VU2", now=400.0) == 1
        assert await store.version("pagerduty", "PGR0VU2") == record.version + 1
        # No record, nothing written.
        missing = await store.apply("pagerduty", "nope", [StateUpdate("snapshot_at", 1.0, {"status": "firing"})])
        assert missing.incident is None and await store.get("pagerduty", "nope") is None

    run(redis_url, body)


def test_storms_are_counted_per_route_and_severity_and_a_page_is_never_folded(redis_url):
    async def body(store: IncidentStore) -> None:
        async def open_(key: str, route: str, severity: str, limit: int = 2, source: str = "cloud-monitoring"):
            return await store.open(source, key, "C1", route=route, severity=severity, limit=limit,
                                    window_seconds=600, now=1000.0)

        assert (await open_("w1", "*:C1", "warning")).opened
        assert (await open_("w2", "*:C1", "warning")).opened
        folded = await open_("w3", "*:C1", "warning")
        assert not folded.opened and folded.folded == 1
        assert (await open_("w3", "*:C1", "warning")).folded == 1  # the same alert again is counted once
        assert (await open_("am", "*:C1", "warning", source="alertmanager")).folded == 2
        # Another route, and another severity on the same route, have windows of their own.
        assert (await open_("t1", "team=tpu:C2", "warning")).opened
        assert (await open_("c1", "*:C1", "critical")).opened
        # A page opens whatever the window says.
        assert (await open_("p1", "*:C1", "warning", limit=NEVER_FOLD)).opened
        assert await store.folded("*:C1", "warning", folded.window) == (2, {"cloud-monitoring": 1, "alertmanager": 1})
        assert await store.folded("team=tpu:C2", "warning", folded.window) == (0, {})

    run(redis_url, body)


def test_a_resolve_that_comes_before_its_open_is_kept_for_it_and_only_then(redis_url):
    async def body(store: IncidentStore) -> None:
        async def open_(key: str):
            return await store.open("pagerduty", key, "C1", route="*:C1", severity="high", limit=5,
                                    window_seconds=600, now=1000.0)

        # No record yet: kept (the newer of two), and the open takes it into the record.
        assert await store.resolve_early("pagerduty", "P1", 200.0, '{"newer": true}')
        assert await store.resolve_early("pagerduty", "P1", 100.0, '{"older": true}')
        assert (await open_("P1")).opened
        record = await store.get("pagerduty", "P1")
        assert record is not None and IncidentStore.early_resolve(record) == (200.0, '{"newer": true}')
        # Taken once: the same incident opened again after a forget finds nothing waiting.
        await store.forget("pagerduty", "P1")
        assert (await open_("P1")).opened
        again = await store.get("pagerduty", "P1")
        assert again is not None and IncidentStore.early_resolve(again) is None
        # A record exists: the resolve is not kept, its caller applies it to the record.
        assert not await store.resolve_early("pagerduty", "P1", 300.0, "{}")

    run(redis_url, body)


async def test_two_fold_jobs_at_once_post_one_storm_message(redis_url):
    """The storm message's slot is claimed before it is posted: a second job while the first is
    posting waits for the message (IncidentBusy: the worker retries it) and then edits it."""
    from slack_sdk.web.async_client import AsyncWebClient

    from handlers.incident_job import FoldJob, IncidentBusy, report_folded
    from infra.sandbox.slack_api import SlackApiSandbox
    from infra.state import keys
    from waiting import wait_for

    slack = SlackApiSandbox()
    slack.start()
    redis = Redis.from_url(redis_url)
    try:
        store = IncidentStore(redis)
        client = AsyncWebClient(token=slack.token, base_url=slack.base_url)

        async def fold(key: str) -> int:
            opening = await store.open("cloud-monitoring", key, "C0STORM", route="*:C0STORM", severity="warning",
                                       limit=1, window_seconds=600, now=1000.0)
            return opening.window

        window = [await fold(f"s{n}") for n in range(4)][-1]  # one thread, three folded

        def job():
            return report_folded(client, store, FoldJob(window=window, channel="C0STORM", storm_threads=1,
                                                        storm_window=600, route="*:C0STORM", severity="warning"))

        held = slack.hold()  # Slack is slow to answer the first job's post
        first = asyncio.create_task(job())
        slot = keys.incident_storm_message(keys.storm_scope("*:C0STORM", "warning"), window)
        await wait_for(lambda: redis.exists(slot), what="the first job's claim")
        with pytest.raises(IncidentBusy):
            await asyncio.wait_for(job(), timeout=10)  # it neither posts nor waits on Slack
        held.set()
        assert str(await first) == "posted 3"
        await fold("s4")
        assert str(await job()) == "updated 4"  # the second job, retried
        [posted] = slack.calls_to("chat.postMessage")
        [update] = slack.calls_to("chat.update")
        assert "3 more new alerts" in posted.body["text"] and "4 more new alerts" in update.body["text"]
    finally:
        await redis.aclose()
        slack.stop()


def test_only_the_job_that_began_an_opening_takes_it_over_and_only_before_its_thread(redis_url):
    async def body(store: IncidentStore) -> None:
        async def open_(opener: str):
            return await store.open("alertmanager", "G", "C1", route="*:C1", severity="warning", limit=5,
                                    window_seconds=600, now=1000.0, opener=opener)

        assert (await open_("job-1")).opened
        assert (await open_("job-2")).exists  # another delivery: it waits for the thread
        assert (await open_("")).exists
        assert (await open_("job-1")).opened  # the same job run again: its earlier run died mid-open
        await store.set_thread("alertmanager", "G", "1700000000.000100")
        assert (await open_("job-1")).exists  # the thread is there: nothing to take over

    run(redis_url, body)
