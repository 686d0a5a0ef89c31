"""The planner reproduces the figures measured for Gemma 4 E2B on a one-chip v5e, v5litepod-1 (issue 7)."""

from __future__ import annotations

import pytest

from infra.capacity import (
    GIB,
    KIB,
    PROFILES,
    V5E_1,
    V6E_1,
    footprint,
    kv_pool_bytes,
    max_concurrent_requests,
    plan,
)


def test_v5e_defaults_reproduce_the_measured_figures() -> None:
    result = plan(V5E_1, context_tokens=16384)
    assert result.hbm_gib == pytest.approx(15.5, abs=0.05)  # what the runtime exposes, not "16 GB"
    assert result.usable_gib == pytest.approx(13.9, abs=0.1)  # × 0.9
    assert result.resident_gib == pytest.approx(8.97, abs=0.005)
    assert result.kv_pool_gib == pytest.approx(5.0, abs=0.05)
    assert result.kv_pool_tokens == pytest.approx(290_000, rel=0.01)
    assert result.max_concurrent_requests == 17


def test_v5e_hbm_label_is_not_decimal_gigabytes() -> None:
    # "16 GB" read as 16e9 bytes would be 14.9 GiB and leave only ~4.4 GiB of KV: the label means the
    # 16 GiB physical HBM, of which the runtime exposes ~15.5 GiB.
    assert 16e9 / GIB == pytest.approx(14.9, abs=0.01)
    assert V5E_1.hbm_bytes > 16e9
    assert V5E_1.hbm_bytes < 16 * GIB


def test_v6e_alongside_has_about_19_8_gib_of_kv() -> None:
    result = plan(V6E_1)
    assert result.kv_pool_gib == pytest.approx(19.8, abs=0.05)
    assert result.kv_pool_tokens == 19.83 * GIB // (18 * KIB)
    assert result.max_concurrent_requests > 4 * plan(V5E_1).max_concurrent_requests - 1
    assert [p.name for p in PROFILES] == ["v5e, 1 chip", "v6e, 1 chip"]
    assert [p.accelerator_type for p in PROFILES] == ["v5litepod-1", "v6e-1"]  # the names shown first


def test_kv_tokens_are_whole_slots_of_18_kib() -> None:
    result = plan(V5E_1)
    assert result.kv_pool_tokens * 18 * KIB <= result.kv_pool_bytes < (result.kv_pool_tokens + 1) * 18 * KIB


def test_concurrency_scales_inversely_with_context() -> None:
    tokens = plan(V5E_1).kv_pool_tokens
    assert max_concurrent_requests(tokens, 8192) == 35  # 16 fit, 64 do not: the KV wall of the bench
    assert max_concurrent_requests(tokens, 128) == tokens // 128
    with pytest.raises(ValueError):
        max_concurrent_requests(tokens, 0)


def test_lower_utilization_and_bigger_model_shrink_the_pool() -> None:
    assert plan(V5E_1, gpu_memory_utilization=0.8).kv_pool_bytes < plan(V5E_1).kv_pool_bytes
    heavier = footprint(resident_gib=12.0, kv_kib_per_token=36)
    result = plan(V5E_1, heavier)
    assert result.kv_pool_gib == pytest.approx(13.95 - 12.0, abs=0.01)
    assert result.kv_pool_tokens == result.kv_pool_bytes // (36 * KIB)


def test_model_that_does_not_fit_has_no_pool() -> None:
    assert kv_pool_bytes(V5E_1.hbm_bytes, 0.5, round(8.97 * GIB)) == 0
    assert plan(V5E_1, gpu_memory_utilization=0.5).max_concurrent_requests == 0
    with pytest.raises(ValueError):
        plan(V5E_1, gpu_memory_utilization=1.5)
