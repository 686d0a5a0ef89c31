"""A lease's fields are typed end to end: the state is a LeaseState, an update names real fields with
values of their type, and what is stored but unknown is read past (and said once), never lost."""

import logging
from typing import get_type_hints

import pytest
from redis.asyncio import Redis

from infra.state import keys
from infra.state.leases import FIXED_FIELDS, Lease, LeaseChanges, LeaseState, LeaseStore


@pytest.fixture
async def redis(redis_url):
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def claimed(redis, channel: str) -> tuple[LeaseStore, Lease]:
    store = LeaseStore(redis)
    return store, (await store.claim(team="TF", channel=channel, holder="U1", zone="us-west4-a", run_seconds=60)).lease


def test_every_lease_field_but_the_fixed_ones_is_a_typed_change():
    lease_types = get_type_hints(Lease)
    assert get_type_hints(LeaseChanges) == {name: kind for name, kind in lease_types.items() if name not in FIXED_FIELDS}
    assert FIXED_FIELDS < set(lease_types)


async def test_a_read_lease_holds_the_enum_and_redis_holds_its_name(redis):
    store, lease = await claimed(redis, "CF1")
    assert lease.state is LeaseState.PENDING
    updated = await store.update(lease, state=LeaseState.READY)
    assert updated.state is LeaseState.READY and updated.state.holds_tpu
    assert await redis.hget(lease.key, "state") == b"READY"
    assert (await store.get("TF", "CF1")).state is LeaseState.READY


@pytest.mark.parametrize("changes, named", [
    ({"endpiont": "http://1.2.3.4:8000/v1"}, "'endpiont' is not a lease field"),
    ({"lease_id": "someone-else"}, "'lease_id' is fixed at the claim"),
    ({"fence": 7}, "'fence' is fixed at the claim"),
    ({"state": "READY"}, "'state' takes LeaseState, not str"),
    ({"run_seconds": "60"}, "'run_seconds' takes int, not str"),
    ({"watch_seq": True}, "'watch_seq' takes int, not bool"),
    ({"deadline": None}, "'deadline' takes float, not NoneType"),
    ({"card_ts": 1700000000.1}, "'card_ts' takes str, not float"),
])
async def test_an_update_with_a_wrong_field_or_type_is_refused_and_writes_nothing(redis, changes, named):
    store, lease = await claimed(redis, "CF2")
    before = await redis.hgetall(lease.key)
    with pytest.raises(TypeError, match=named):
        # The good change beside the bad one is not written either: the update is refused whole.
        await store.update(lease, detail="half a write", **changes)
    assert await redis.hgetall(lease.key) == before


async def test_a_float_field_takes_a_whole_number(redis):
    store, lease = await claimed(redis, "CF3")
    updated = await store.update(lease, deadline=1_800_000_000)
    assert updated.deadline == 1_800_000_000.0


async def test_stored_fields_this_version_does_not_know_are_read_past_kept_and_said_once(redis, caplog):
    store, lease = await claimed(redis, "CF4")
    await redis.hset(lease.key, mapping={"legacy_flag": "1", "future_field": "x"})
    with caplog.at_level(logging.WARNING, logger="infra.state.leases"):
        first = await store.get("TF", "CF4")
        await store.update(first, detail="still writes")
        again = await store.get("TF", "CF4")
        assert [lease.lease_id for lease in await store.all() if lease.channel == "CF4"] == [lease.lease_id]
    assert first.lease_id == again.lease_id == lease.lease_id and again.detail == "still writes"
    said = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(said) == 1 and "future_field, legacy_flag" in said[0] and lease.lease_id in said[0]
    assert await redis.hmget(lease.key, "legacy_flag", "future_field") == [b"1", b"x"]


async def test_a_release_note_s_own_fields_are_not_unknown(redis, caplog):
    store, lease = await claimed(redis, "CF5")
    assert await store.release(lease, reason="test", by="U1")
    with caplog.at_level(logging.WARNING, logger="infra.state.leases"):
        note = await store.unfinished_release(lease.lease_id)
    assert note.lease.lease_id == lease.lease_id and note.reason == "test" and note.lease.state is LeaseState.PENDING
    assert not [r for r in caplog.records if "does not know" in r.getMessage()]


async def test_a_stored_state_this_version_does_not_know_is_named(redis):
    store, lease = await claimed(redis, "CF6")
    await redis.hset(keys.lease("TF", "CF6"), "state", "HIBERNATING")
    with pytest.raises(ValueError, match=f"lease {lease.lease_id} is stored in state 'HIBERNATING'"):
        await store.get("TF", "CF6")


async def test_one_lease_in_a_state_this_version_does_not_know_hides_no_other_lease(redis, caplog):
    """After a roll-back, a lease a newer version wrote must not stop the reconciler for every lease."""
    store, unknown = await claimed(redis, "CF7")
    _, known = await claimed(redis, "CF8")
    await redis.hset(keys.lease("TF", "CF7"), "state", "HIBERNATING")
    with caplog.at_level(logging.WARNING):
        listed = await store.all()
    assert [lease.lease_id for lease in listed] == [known.lease_id]
    assert any(unknown.lease_id in r.getMessage() and "HIBERNATING" in r.getMessage() for r in caplog.records)
