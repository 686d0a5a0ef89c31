"""Price table defaults, overrides from tpu.env, and the cost arithmetic (issue 7 figures)."""

from __future__ import annotations

import json
import os
import math
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.settings import Settings
from infra.prices import (
    PriceEntry,
    PriceNotFound,
    PriceTable,
    cost_so_far,
    cost_to_deadline,
    default_price_table,
    output_throughput_for,
    usd_per_million_output_tokens,
)

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc)


def test_defaults_for_v5e_in_us_west4_are_dated_and_sourced() -> None:
    table = default_price_table()
    assert table.get("v5litepod-1", "us-west4-a", "on-demand").usd_per_chip_hour == 1.20
    assert table.get("v5e", "us-west4", "flex-start").usd_per_chip_hour == 0.60
    assert table.get("v5e", "us-west4", "spot").usd_per_chip_hour == pytest.approx(0.58, abs=0.005)
    for entry in table.entries:
        assert isinstance(entry.as_of, date)
        # a source users can check: a public URL, never a file of this project's notes
        assert "https://cloud.google.com/tpu/pricing" in entry.source and ".md" not in entry.source
    assert "53%" in table.get("v5e", "us-west4", "flex-start").source
    # Google's "up to 53% off" bound is consistent with the catalogue rate.
    assert 0.60 >= 1.20 * (1 - 0.53)


def test_unknown_price_names_the_fix() -> None:
    with pytest.raises(PriceNotFound, match="PRICES"):
        default_price_table().get("v6e-1", "us-east5", "flex-start")


def test_cost_so_far_and_to_deadline() -> None:
    flex = default_price_table().get("v5e", "us-west4", "flex-start")
    deadline = T0 + timedelta(hours=4)
    now = T0 + timedelta(hours=1, minutes=30)
    assert cost_so_far(flex, T0, now) == pytest.approx(0.90)
    assert cost_to_deadline(flex, now, deadline) == pytest.approx(1.50)
    assert cost_so_far(flex, T0, now) + cost_to_deadline(flex, now, deadline) == pytest.approx(2.40)
    assert cost_so_far(flex, T0, T0 - timedelta(minutes=5)) == 0.0  # not started yet
    assert cost_to_deadline(flex, deadline + timedelta(hours=1), deadline) == 0.0  # already expired
    assert cost_so_far(1.20, T0, now, chips=4) == pytest.approx(7.20)


def test_dollars_per_million_output_tokens_reproduce_the_measured_spread() -> None:
    """At $0.60/h the measurements were $1.31/M at concurrency 1 and $0.089/M at the best batch,
    a 14.8x spread. The figures are rounded, so derive the throughput interval each one allows,
    check the intervals admit a 14.8x ratio, and that the math maps them back."""
    rate = 0.60

    def interval(figure: float, half_ulp: float) -> tuple[float, float]:
        # a higher $/M means a lower throughput
        return output_throughput_for(rate, figure + half_ulp), output_throughput_for(rate, figure - half_ulp)

    c1_lo, c1_hi = interval(1.31, 0.005)
    best_lo, best_hi = interval(0.089, 0.0005)
    assert 126 < c1_lo < c1_hi < 128  # ~127 tok/s: one stream at TPOT ≈ 7.9 ms
    assert 1860 < best_lo < best_hi < 1885
    assert best_lo / c1_hi <= 14.8 <= best_hi / c1_lo

    # A pair inside both intervals whose ratio rounds to 14.8 reproduces all three figures.
    c1 = 127.3
    best = 1880.0
    assert round(usd_per_million_output_tokens(rate, c1), 2) == 1.31
    assert round(usd_per_million_output_tokens(rate, best), 3) == 0.089
    spread = usd_per_million_output_tokens(rate, c1) / usd_per_million_output_tokens(rate, best)
    assert round(spread, 1) == 14.8
    # Rounded figures alone give 14.7x: the 14.8 comes from unrounded throughputs.
    assert round(1.31 / 0.089, 1) == 14.7

    # Exact form: $/M = rate / 3600 / tok_per_s * 1e6
    assert usd_per_million_output_tokens(rate, 1000.0) == pytest.approx(0.60 / 3.6)
    assert usd_per_million_output_tokens(rate, 1000.0, chips=2) == pytest.approx(2 * 0.60 / 3.6)
    assert math.isclose(output_throughput_for(rate, usd_per_million_output_tokens(rate, 433.0)), 433.0)
    with pytest.raises(ValueError):
        usd_per_million_output_tokens(rate, 0)


def test_tpu_env_overrides_merge_over_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRICES", raising=False)
    env = tmp_path / "tpu.env"
    env.write_text(
        "TPU_ZONE=us-west4-a\n"
        "PRICES='["
        '{"accelerator":"v5litepod-1","region":"us-west4-a","provisioning_model":"spot",'
        '"usd_per_chip_hour":0.52,"as_of":"2026-12-01","source":"billing export"},'
        '{"accelerator":"v6e","region":"us-east5","provisioning_model":"flex-start",'
        '"usd_per_chip_hour":1.35,"as_of":"2026-12-01","source":"quote"}'
        "]'\n",
        encoding="utf-8",
    )
    prices = Settings.load(env).prices
    spot = prices.get("v5e", "us-west4", "spot")
    assert spot.usd_per_chip_hour == 0.52 and spot.source == "billing export" and spot.as_of == date(2026, 12, 1)
    assert prices.get("v6e-1", "us-east5-b", "flex-start").usd_per_chip_hour == 1.35
    # untouched defaults survive the merge
    assert prices.get("v5e", "us-west4", "flex-start").usd_per_chip_hour == 0.60
    assert len(prices.entries) == 4


def test_defaults_without_override_and_bad_override_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRICES", raising=False)
    assert Settings.load(tmp_path / "missing.env").prices == default_price_table()
    monkeypatch.setenv("PRICES", '[{"accelerator":"v5e","region":"us-west4","provisioning_model":"reserved",'
                       '"usd_per_chip_hour":0.8,"as_of":"2026-12-01","source":"x"}]')
    with pytest.raises(ValidationError, match="provisioning_model"):
        Settings.load(tmp_path / "missing.env")
    monkeypatch.setenv("PRICES", '[{"accelerator":"v5e","region":"us-west4","provisioning_model":"spot",'
                       '"usd_per_chip_hour":0.5}]')  # undated, unsourced
    with pytest.raises(ValidationError, match="as_of"):
        Settings.load(tmp_path / "missing.env")


@pytest.mark.parametrize("shape", ["list", "entries", "one entry"])
def test_every_accepted_prices_shape_is_used(shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"accelerator": "v5e", "region": "us-west4", "provisioning_model": "flex-start",
             "usd_per_chip_hour": 9.9, "as_of": "2026-12-01", "source": "our billing export"}
    value = {"list": [entry], "entries": {"entries": [entry]}, "one entry": entry}[shape]
    monkeypatch.setenv("PRICES", json.dumps(value))
    assert Settings.load(tmp_path / "missing.env").prices.get("v5e", "us-west4", "flex-start").usd_per_chip_hour == 9.9


@pytest.mark.parametrize("value", ['{"foo": 1}', '{"v5e/us-west4/flex-start": {"usd_per_chip_hour": 9.9}}',
                                   '"0.6"', '{"entries": 3}', "[[1]]", '{"entries": [], "extra": 1}'])
def test_a_prices_value_of_another_shape_is_refused_not_ignored(value: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRICES", value)
    with pytest.raises(ValidationError, match="PRICES .*write it as a JSON list of entries"):
        Settings.load(tmp_path / "missing.env")


def test_merge_replaces_by_key() -> None:
    entry = PriceEntry(accelerator="v5e", region="us-west4", provisioning_model="on-demand",
                       usd_per_chip_hour=1.10, as_of=date(2026, 12, 1), source="test")
    merged = default_price_table().merged([entry])
    assert merged.get("v5e", "us-west4", "on-demand") == entry
    assert len(merged.entries) == len(default_price_table().entries)
    assert isinstance(merged, PriceTable)


def test_cli_cost_reports_lease_cost_and_dollars_per_million(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpubot cost` with a bench JSON whose throughputs are the ones the measured $/M imply."""
    import json

    from typer.testing import CliRunner

    from bot.cli import app

    monkeypatch.delenv("PRICES", raising=False)
    monkeypatch.setenv("TPUBOT_ENV_FILE", os.devnull)  # no tpu.env: a named file that is missing is an error
    bench = tmp_path / "bench.json"
    cells = [
        {"context": 128, "concurrency": 1, "completed": 4, "output_throughput": 127.3},
        {"context": 8192, "concurrency": 1, "completed": 4, "output_throughput": 110.0},
        {"context": 128, "concurrency": 64, "completed": 128, "output_throughput": 1880.0},
        {"context": 8192, "concurrency": 64, "completed": 0, "output_throughput": 0.0},
    ]
    bench.write_text(json.dumps({"cells": cells}))
    started = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    result = CliRunner().invoke(
        app, ["cost", "--provisioning", "flex-start", "--hours", "4", "--started", started, "--bench", str(bench)],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "so far $0.60" in out and "to deadline $1.80" in out and "total $2.40" in out
    assert "$1.31 per million" in out and "$0.089 per million" in out and "spread: 14.8×" in out
    assert "concurrency 1 (context 128" in out and "best measured batch (context 128, concurrency 64" in out

    on_demand = CliRunner().invoke(app, ["cost", "--provisioning", "on-demand", "--hours", "2"], env={"COLUMNS": "250"})
    assert on_demand.exit_code == 0 and "$2.40" in on_demand.output
    missing = CliRunner().invoke(app, ["cost", "--region", "europe-west4-a"], env={"COLUMNS": "250"})
    assert missing.exit_code == 1 and "no price for v5e/europe-west4/flex-start" in missing.output


def test_one_way_to_write_money():
    """Issue 44: the same rate read $0.6/h, $0.60/h and $0.6/chip-hour in three places."""
    from infra.prices import hourly, money

    assert [money(v) for v in (0, 0.6, 1234.5, 0.0886, 0.0007, -0.5)] == \
        ["$0.00", "$0.60", "$1,234.50", "$0.089", "$0.0007", "-$0.50"]
    assert (hourly(0.6), hourly(0.6, "chip-hour"), hourly(0.5779)) == ("$0.60/h", "$0.60/chip-hour", "$0.5779/h")


@pytest.mark.parametrize("usd, written", [
    (-0.0, "$0.00"),  # not "$-0.00"
    (-1e-9, "$0.00"),  # a subtraction's rounding error below zero
    (0.0999, "$0.10"), (0.0995, "$0.10"), (0.0994, "$0.099"),  # ten cents in cents, never "$0.100"
    (0.00071, "$0.00071"), (0.0001, "$0.0001"),  # first digits, written out
    (5e-05, "$0.00005"), (1e-9, "<$0.000001"),  # never "$5e-05"
    (0.123456789, "$0.12"), (-0.004, "-$0.004"),
    (999_999_999_999.99, "$999,999,999,999.99"), (1e30, "$1.00e+30"), (-1e13, "-$1.00e+13"),  # no float digits
    (float("nan"), "an unknown amount"), (float("inf"), "an unknown amount"), (float("-inf"), "an unknown amount"),
])
def test_money_at_its_edges_reads_as_what_it_is(usd, written):
    from infra.prices import money

    assert money(usd) == written


def test_a_rate_at_its_edges_reads_as_what_it_is():
    from infra.prices import hourly

    assert [hourly(v) for v in (-0.0, 0.123456789, float("nan"), float("inf"), 1e20, -0.5)] == \
        ["$0.00/h", "$0.1235/h", "an unknown rate", "an unknown rate", "$1.00e+20/h", "-$0.50/h"]


@pytest.mark.parametrize("price", ["Infinity", "1e400", "NaN"])
def test_a_price_that_is_not_a_finite_number_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, price):
    # Python's json reads all three; as a rate, each made every cost "$inf" or "$nan".
    monkeypatch.setenv("PRICES", '[{"accelerator":"v5e","region":"us-west4","provisioning_model":"spot",'
                       f'"usd_per_chip_hour":{price},"as_of":"2026-12-01","source":"x"}}]')
    with pytest.raises(ValidationError, match="usd_per_chip_hour"):
        Settings.load(tmp_path / "missing.env")


@pytest.mark.parametrize("budget", ["inf", "1e400", "nan", "-1"])
def test_a_budget_that_is_not_a_finite_amount_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget):
    monkeypatch.setenv("BUDGET_WORKSPACE_MONTHLY", budget)
    with pytest.raises(ValidationError, match="BUDGET_WORKSPACE_MONTHLY must be 0 or more USD; write it like 200"):
        Settings.load(tmp_path / "missing.env")
