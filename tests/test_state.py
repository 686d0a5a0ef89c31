"""Lease, lock, dedupe and audit invariants against a real Redis-protocol server."""

import asyncio

import pytest
from redis.asyncio import Redis
from waiting import wait_for

from infra.state.audit import AuditLog
from infra.state.dedupe import Dedupe
from infra.state.leases import LeaseState, LeaseStore
import time

from infra.state.locks import ChannelLocks, LockLost, LockNotAcquired


@pytest.fixture
async def redis(redis_url):
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_concurrent_claims_create_exactly_one_lease(redis):
    store = LeaseStore(redis)
    results = await asyncio.gather(*[
        store.claim(team="T1", channel="C1", holder=f"U{i}", zone="us-west4-a", run_seconds=3600) for i in range(50)
    ])
    created = [r for r in results if r.created]
    assert len(created) == 1
    winner = created[0].lease
    assert all(r.lease.lease_id == winner.lease_id and r.lease.holder == winner.holder for r in results)
    assert winner.fence == 1
    assert winner.qr_id == f"tpubot-{winner.lease_id}"


async def test_fence_increases_across_leases_and_old_lease_writes_are_rejected(redis):
    store = LeaseStore(redis)
    first = (await store.claim(team="T1", channel="C1", holder="U1", zone="z", run_seconds=1)).lease
    assert await store.release(first)
    second = (await store.claim(team="T1", channel="C1", holder="U2", zone="z", run_seconds=1)).lease
    assert second.fence == first.fence + 1
    # A job still holding the first lease can neither update nor release the second.
    assert await store.update(first, state=LeaseState.ACTIVE) is None
    assert not await store.release(first)
    current = await store.get("T1", "C1")
    assert current.lease_id == second.lease_id and current.state == LeaseState.PENDING.value


async def test_update_is_fenced_and_records_state_change_time(redis):
    store = LeaseStore(redis)
    lease = (await store.claim(team="T1", channel="C2", holder="U1", zone="z", run_seconds=60)).lease
    updated = await store.update(lease, state=LeaseState.ACTIVE, endpoint="http://1.2.3.4:8000/v1")
    assert updated.state == "ACTIVE" and updated.endpoint.endswith("/v1")
    assert updated.state_since >= lease.state_since
    assert [stored.lease_id for stored in await store.all()] == [lease.lease_id]


async def test_leases_are_per_team_and_channel(redis):
    store = LeaseStore(redis)
    a = await store.claim(team="T1", channel="C1", holder="U1", zone="z", run_seconds=1)
    b = await store.claim(team="T1", channel="C2", holder="U1", zone="z", run_seconds=1)
    c = await store.claim(team="T2", channel="C1", holder="U1", zone="z", run_seconds=1)
    assert a.created and b.created and c.created
    assert len({a.lease.lease_id, b.lease.lease_id, c.lease.lease_id}) == 3


async def test_lock_excludes_releases_only_with_token_and_always_expires(redis):
    locks = ChannelLocks(redis, ttl_ms=5_000)
    token = await locks.acquire("T1", "C1")
    assert token
    assert await locks.acquire("T1", "C1") is None
    assert not await locks.release("T1", "C1", "not-the-token")
    assert 0 < await redis.pttl("tpubot:lock:T1:C1") <= 5_000
    assert await locks.extend("T1", "C1", token, ttl_ms=20_000)
    assert await redis.pttl("tpubot:lock:T1:C1") > 5_000
    assert not await locks.extend("T1", "C1", "wrong")
    assert await locks.release("T1", "C1", token)
    assert await locks.acquire("T1", "C1") is not None


async def test_a_lock_owners_tokens_name_it_and_work_like_plain_ones(redis):
    locks = ChannelLocks(redis, ttl_ms=5_000, owner="a1b2c3")
    token = await locks.acquire("T1", "C3")
    assert token and token.startswith("a1b2c3.") and len(token) > len("a1b2c3.") + 16
    assert await ChannelLocks(redis).acquire("T1", "C3") is None
    assert await locks.extend("T1", "C3", token, ttl_ms=20_000)
    assert not await locks.release("T1", "C3", "a1b2c3.not-the-token")
    assert await locks.release("T1", "C3", token)
    assert await locks.acquire("T1", "C3") and await locks.force_unlock("T1", "C3")
    for bad in ("", "w.1"):
        with pytest.raises(ValueError, match="lock owner"):
            ChannelLocks(redis, owner=bad)


async def test_lock_ttl_frees_a_crashed_holder(redis):
    locks = ChannelLocks(redis, ttl_ms=50)
    assert await locks.acquire("T1", "C9")

    assert await wait_for(lambda: locks.acquire("T1", "C9"), timeout=5, interval=0.01, what="the lock's TTL to free it")


async def test_dedupe_is_first_time_once(redis):
    dedupe = Dedupe(redis)
    results = await asyncio.gather(*[dedupe.first_time("event", "Ev1") for _ in range(20)])
    assert results.count(True) == 1
    assert await dedupe.first_time("event", "Ev2")


async def test_audit_records_newest_first(redis):
    audit = AuditLog(redis)
    await audit.record(actor="U1", action="up", team="T1", channel="C1", outcome="claimed")
    await audit.record(actor="U2", action="down", team="T1", channel="C1", outcome="denied")
    entries = await audit.recent(10)
    assert [(e.actor, e.action, e.outcome) for e in entries] == [("U2", "down", "denied"), ("U1", "up", "claimed")]


async def test_a_release_leaves_a_note_until_it_is_finished(redis):
    store = LeaseStore(redis)
    lease = (await store.claim(team="T1", channel="C9", holder="U1", zone="us-west4-a", run_seconds=60)).lease
    release = await store.release(lease, reason="Torn down", by="U1")
    assert release is not None and await store.get("T1", "C9") is None
    assert await store.release(lease, reason="again") is None  # fenced: one release per lease

    noted = await store.unfinished_release(lease.lease_id)
    assert noted.lease.lease_id == lease.lease_id and noted.lease.holder == "U1"
    assert (noted.reason, noted.by, noted.tell_channel) == ("Torn down", "U1", True)
    assert [r.lease.lease_id for r in await store.unfinished_releases(released_before=noted.at)] == [lease.lease_id]
    assert await store.unfinished_releases(released_before=noted.at - 1) == []

    await store.release_finished(lease.lease_id)
    assert await store.unfinished_release(lease.lease_id) is None
    assert await store.unfinished_releases(released_before=noted.at + 1) == []


async def test_an_expired_release_note_drops_out_of_the_index(redis):
    store = LeaseStore(redis)
    lease = (await store.claim(team="T1", channel="C8", holder="U1", zone="us-west4-a", run_seconds=60)).lease
    release = await store.release(lease, reason="expired", tell_channel=False)
    await redis.delete(f"tpubot:released:{lease.lease_id}")  # what its TTL does after a week
    assert await store.unfinished_releases(released_before=release.at + 1) == []
    assert await redis.zcard("tpubot:released") == 0


# --- work held under a lock (ChannelLocks.hold) -------------------------------------------------


async def test_held_work_keeps_its_lock_past_the_ttl_and_releases_it_after(redis):
    locks = ChannelLocks(redis, ttl_ms=300)
    async with locks.hold("T1", "H1") as lock:
        started = time.monotonic()
        # Three TTLs of work: without the keeper the lock would have expired twice over.
        await wait_for(lambda: time.monotonic() - started > 0.9, timeout=5, what="three TTLs of work")
        assert await locks.holder_token("T1", "H1") == lock.token
        await lock.extend()
    assert await locks.holder_token("T1", "H1") is None
    with pytest.raises(LockNotAcquired):
        async with ChannelLocks(redis).hold("T1", "H1"):
            async with ChannelLocks(redis).hold("T1", "H1"):
                pass


async def test_work_whose_lock_is_taken_over_is_stopped_and_does_nothing_more(redis):
    locks = ChannelLocks(redis, ttl_ms=600)
    side_effects = []
    with pytest.raises(LockLost, match="T1/H2"):
        async with locks.hold("T1", "H2"):
            # A sweep took this holder for dead and another worker took the channel.
            assert await locks.force_unlock("T1", "H2")
            assert await ChannelLocks(redis, ttl_ms=60_000).acquire("T1", "H2")
            await wait_for(lambda: False, timeout=5, what="the work to be stopped")  # raises only on timeout
            side_effects.append("acted without the lock")
    assert side_effects == []
    assert await locks.holder_token("T1", "H2") is not None  # the new holder keeps it
    assert asyncio.current_task().cancelling() == 0  # the lock took back its cancel: the task goes on
    await redis.ping()


async def test_an_extension_refused_stops_the_work_at_once(redis):
    locks = ChannelLocks(redis, ttl_ms=60_000)
    with pytest.raises(LockLost):
        async with locks.hold("T1", "H3") as lock:
            assert await locks.force_unlock("T1", "H3")
            await lock.extend()  # what a job calls before it acts
            pytest.fail("extend() let the work act without the lock")
    assert asyncio.current_task().cancelling() == 0
    await redis.ping()  # no cancel left pending to land on the caller's next await


async def test_a_stall_longer_than_the_ttl_stops_the_work_at_its_next_await(redis):
    locks = ChannelLocks(redis, ttl_ms=200)
    side_effects = []
    with pytest.raises(LockLost):
        async with locks.hold("T1", "H4"):
            time.sleep(0.4)  # the process stalls (the loop is blocked): no extension can run
            await redis.ping()
            await redis.ping()  # two awaits: the lapse and the keeper both had their turn
            side_effects.append("acted after the stall")
    assert side_effects == []
    assert asyncio.current_task().cancelling() == 0


async def test_a_cancel_from_outside_stays_a_cancel(redis):
    locks = ChannelLocks(redis, ttl_ms=60_000)
    entered = asyncio.Event()

    async def work():
        async with locks.hold("T1", "H5"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(work())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await locks.holder_token("T1", "H5") is None


async def test_a_lock_release_rides_out_a_short_redis_blip(redis_url):
    """Work done under a lock does not fail because Redis stalled as it ended: the release is tried
    again (CLIENT PAUSE WRITE holds the release's script past the client's socket timeout)."""
    from infra.state import keys

    client = Redis.from_url(redis_url, socket_timeout=0.2)
    admin = Redis.from_url(redis_url)
    try:
        locks = ChannelLocks(client, ttl_ms=10_000)
        async with locks.hold("T1", "CBLIP"):
            await admin.execute_command("CLIENT", "PAUSE", 500, "WRITE")
        assert await admin.get(keys.lock("T1", "CBLIP")) is None, "released once Redis answered again"
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()
        await admin.aclose()


# --- lease writes fenced by the channel lock (the extend-then-act window) -------------------------


async def test_a_stale_holders_lease_write_is_refused_and_the_live_holders_goes_through(redis):
    """A holder that stalled past its TTL after its last extension (the lapse timer has not had its
    turn yet, so nothing stopped the work) writes nothing once another worker holds the channel."""
    store = LeaseStore(redis)
    stale_locks, live_locks = ChannelLocks(redis, ttl_ms=60_000), ChannelLocks(redis, ttl_ms=60_000)
    lease = (await store.claim(team="T1", channel="FENCE1", holder="U1", zone="z", run_seconds=60)).lease
    before = await redis.hgetall(lease.key)
    side_effects = []
    took_over = asyncio.Event()
    stale_may_write = asyncio.Event()

    async def live_holder():
        await took_over.wait()
        async with live_locks.hold("T1", "FENCE1"):
            ready = await store.update(lease, state=LeaseState.READY, detail="by the live holder")
            side_effects.append(("live", ready.state if ready else None))
            stale_may_write.set()  # the stale one wakes up and would set the lease back
            await wait_for(lambda: len(side_effects) > 1, timeout=5, what="the stale holder's try")

    live = asyncio.create_task(live_holder())
    with pytest.raises(LockLost, match="a write of the lease was refused"):
        async with stale_locks.hold("T1", "FENCE1") as lock:
            await lock.extend()  # the last extension before the act
            assert await stale_locks.force_unlock("T1", "FENCE1")  # as if its TTL ran out during a stall
            took_over.set()
            await stale_may_write.wait()
            try:
                await store.update(lease, state=LeaseState.CREATING, detail="by the stale holder")
            finally:
                side_effects.append(("stale", "tried"))
            side_effects.append(("stale", "went on after a refused write"))
    await live
    assert side_effects == [("live", LeaseState.READY), ("stale", "tried")]
    stored = await store.get("T1", "FENCE1")
    assert (stored.state, stored.detail) == (LeaseState.READY, "by the live holder")
    assert before[b"state"] == b"PENDING"


async def test_a_stale_holders_release_is_refused_and_releases_nothing(redis):
    store = LeaseStore(redis)
    locks = ChannelLocks(redis, ttl_ms=60_000)
    lease = (await store.claim(team="T1", channel="FENCE2", holder="U1", zone="z", run_seconds=60)).lease
    with pytest.raises(LockLost):
        async with locks.hold("T1", "FENCE2"):
            assert await locks.force_unlock("T1", "FENCE2")
            other = await ChannelLocks(redis).acquire("T1", "FENCE2")
            assert other
            await store.release(lease, reason="by the stale holder")
    assert (await store.get("T1", "FENCE2")).lease_id == lease.lease_id
    assert await store.unfinished_release(lease.lease_id) is None
    assert await store.last_release("T1", "FENCE2") is None
    assert await locks.holder_token("T1", "FENCE2") == other  # the new holder's lock is untouched


async def test_lease_writes_carry_only_their_own_channels_lock(redis):
    """Work that holds one channel's lock writes another channel's lease as before (fenced on the lease
    id only), and a holder whose lock is still its own writes and releases its lease."""
    store = LeaseStore(redis)
    locks = ChannelLocks(redis, ttl_ms=60_000)
    mine = (await store.claim(team="T1", channel="FENCE3", holder="U1", zone="z", run_seconds=60)).lease
    other = (await store.claim(team="T1", channel="FENCE4", holder="U1", zone="z", run_seconds=60)).lease
    await ChannelLocks(redis).acquire("T1", "FENCE4")  # someone else's lock on the other channel
    async with locks.hold("T1", "FENCE3"):
        assert (await store.update(other, detail="not under its lock")).detail == "not under its lock"
        assert (await store.update(mine, state=LeaseState.FAILED)).state == LeaseState.FAILED
        assert await store.release(mine, reason="done") is not None
    assert await store.get("T1", "FENCE3") is None
    # Outside any hold (the web process: a confirm click), the write is fenced on the lease id only.
    assert (await store.update(other, state=LeaseState.TEARING_DOWN)).state == LeaseState.TEARING_DOWN
