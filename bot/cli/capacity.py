"""`tpubot capacity`, `tpubot cost` and `tpubot bench`: sizing, paying for and measuring the
Gemma endpoint. The numbers come from infra/capacity.py, infra/prices.py and infra/bench.py."""

from __future__ import annotations

import re

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import ValidationError
from rich.console import Console

from bot.settings import SettingError, Settings, check_accelerator, chip_count
from infra import capacity, prices
from infra.durations import FLEX_START_LONGEST
from infra.bench import EndpointNotAnswering, SweepConfig, run_sweep_with_progress
from bot.cli.output import Report, json_option_help, print_json, print_report
from infra.bench_report import best_cells, failure_lines, load_cells, results_table, write_json, write_plots


def register(app: typer.Typer) -> None:
    app.command("capacity", help="KV-cache pool and max concurrent requests: v5litepod-1 (v5e) vs v6e-1.")(show_capacity)
    app.command("cost", help="Price table, a lease's cost so far / to deadline, and $ per million output tokens.")(show_cost)
    app.command("bench", help="Concurrency × context sweep with vllm bench serve's metric definitions.")(bench)


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"{option} takes comma-separated integers, like 1,4,16,64") from None
    if not values or min(values) <= 0:
        raise typer.BadParameter(f"{option} takes positive integers, like 1,4,16,64")
    return values


# --- capacity -------------------------------------------------------------------------------------


def show_capacity(
    context: str = typer.Option("1024,8192,16384", help="context lengths (tokens) to size for, comma-separated"),
    # Defaults are shown as a person writes them (8.97, not 8.96999999973923), in the help text.
    utilization: float = typer.Option(
        capacity.DEFAULT_GPU_MEMORY_UTILIZATION, show_default=False,
        help=f"vLLM --gpu-memory-utilization, above 0 and at most 1 (default {capacity.DEFAULT_GPU_MEMORY_UTILIZATION:g})"),
    resident_gib: float = typer.Option(
        capacity.GEMMA4_E2B_RESIDENT_BYTES / capacity.GIB, show_default=False,
        help=f"HBM vLLM keeps besides the KV cache, GiB (default {capacity.GEMMA4_E2B_RESIDENT_BYTES / capacity.GIB:.2f}, "
             "measured)"),
    kv_kib_per_token: float = typer.Option(
        capacity.GEMMA4_E2B_KV_BYTES_PER_TOKEN / capacity.KIB, show_default=False,
        help=f"KV cache per token, KiB (default {capacity.GEMMA4_E2B_KV_BYTES_PER_TOKEN / capacity.KIB:g})"),
    as_json: bool = typer.Option(False, "--json", help=json_option_help("capacity")),
) -> None:
    contexts = _ints(context, "--context")
    if not 0 < utilization <= 1:
        raise typer.BadParameter(f"--utilization is a fraction of HBM, above 0 and at most 1 (like 0.9); got {utilization:g}")
    model = capacity.footprint(resident_gib=resident_gib, kv_kib_per_token=kv_kib_per_token)
    plans = [[capacity.plan(profile, model, gpu_memory_utilization=utilization, context_tokens=ctx) for ctx in contexts]
             for profile in capacity.PROFILES]
    if as_json:
        print_json(capacity_json(model, utilization, contexts, plans))
        return
    report = Report(
        title=f"KV capacity for {model.name} (vLLM, utilization {utilization:g})",
        columns=["accelerator", "HBM (spec)", "exposed GiB", "cap GiB", "resident GiB", "KV GiB", "KV tokens",
                 *(f"max req @ {ctx:,}" for ctx in contexts)],
        notes=["GiB = 2^30 bytes. 'exposed' is the HBM the runtime gives vLLM; 'cap' is exposed × utilization."],
    )
    report.right_aligned = frozenset(report.columns[2:])
    for rows in plans:
        first = rows[0]
        profile = first.profile
        report.add_row(f"{profile.accelerator_type} ({profile.name})", profile.hbm_label, f"{first.hbm_gib:.2f}",
                       f"{first.usable_gib:.2f}", f"{first.resident_gib:.2f}", f"{first.kv_pool_gib:.2f}",
                       f"{first.kv_pool_tokens:,}", *(f"{r.max_concurrent_requests:,}" for r in rows))
        report.notes.append(f"{profile.accelerator_type}: {profile.hbm_source}")
    print_report(report)


def capacity_json(model, utilization: float, contexts: tuple[int, ...], plans) -> dict:
    return {
        "model": model.name,
        "gpu_memory_utilization": utilization,
        "resident_bytes": model.resident_bytes,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "accelerators": [{
            "name": rows[0].profile.name,
            "accelerator_type": rows[0].profile.accelerator_type,
            "hbm_label": rows[0].profile.hbm_label,
            "hbm_source": rows[0].profile.hbm_source,
            "exposed_bytes": rows[0].profile.hbm_bytes,
            "usable_bytes": rows[0].usable_bytes,
            "kv_pool_bytes": rows[0].kv_pool_bytes,
            "kv_pool_tokens": rows[0].kv_pool_tokens,
            "max_concurrent_requests": {str(ctx): r.max_concurrent_requests for ctx, r in zip(contexts, rows)},
        } for rows in plans],
    }


# --- cost -----------------------------------------------------------------------------------------


def _parse_started(text: str) -> datetime:
    try:
        started = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter("--started takes an ISO time, like 2026-11-29T09:00:00Z") from None
    return started if started.tzinfo else started.replace(tzinfo=timezone.utc)


def show_cost(
    accelerator: Optional[str] = typer.Option(None, help="accelerator type (default: TPU_ACCELERATOR_TYPE)"),
    region: Optional[str] = typer.Option(None, help="region or zone (default: TPU_ZONE's region)"),
    provisioning: str = typer.Option("flex-start", help="on-demand, flex-start or spot"),
    hours: Optional[float] = typer.Option(None, help="lease length in hours, above 0 and at most 168 for flex-start "
                                                     "(default: MAX_RUN_DURATION)", show_default=False),
    started: Optional[str] = typer.Option(None, help="when the lease started (ISO time); enables cost so far"),
    bench_file: Optional[Path] = typer.Option(None, "--bench", help="a `tpubot bench --json` file for $/M tokens"),
    channel: Optional[str] = typer.Option(None, help="a Slack channel id, like C012ABCDEF: that channel's lease, read from REDIS_URL"),
    team: Optional[str] = typer.Option(None, help="the Slack team id of --channel, like T012ABCDEF"),
    as_json: bool = typer.Option(False, "--json", help=json_option_help("cost")),
) -> None:
    # Without --started/--hours, --channel/--team read the channel's lease from the bot's Redis.
    settings = Settings.load()  # a bad setting: one line from bot/cli/errors.py
    if channel or team:
        if started or hours is not None:
            raise typer.BadParameter("give either --channel/--team (a live lease) or --started/--hours, not both")
        if not (channel and team):
            raise typer.BadParameter("--channel and --team go together (a lease is keyed by team and channel)")
        _check_slack_id(channel, "--channel", ("C", "G"), "C012ABCDEF")
        _check_slack_id(team, "--team", ("T", "E"), "T012ABCDEF")
        _show_channel_cost(settings, team=team, channel=channel, as_json=as_json)
        return
    if provisioning not in prices.PROVISIONING_MODELS:
        raise typer.BadParameter(f"--provisioning must be one of {', '.join(prices.PROVISIONING_MODELS)}")
    _check_hours(hours, provisioning)
    try:
        accelerator = check_accelerator(accelerator, "--accelerator") if accelerator else settings.tpu_accelerator_type
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    region = prices.region_of(region or settings.tpu_zone)
    chips = chip_count(accelerator)
    selected_key = (prices.generation_of(accelerator), region, provisioning)
    try:
        price = settings.prices.get(accelerator, region, provisioning)
    except prices.PriceNotFound as exc:
        price = None
        missing = str(exc)
    length = timedelta(hours=hours) if hours is not None else settings.max_run_duration
    lease = _lease_cost(price, chips, length, started) if price else None
    per_million = _per_million(price, chips, bench_file) if price and bench_file is not None else None
    if as_json:
        print_json({
            "prices": [entry.model_dump(mode="json") for entry in settings.prices.entries],
            "selected": {"accelerator": accelerator, "region": region, "provisioning_model": provisioning,
                         "chips": chips, "usd_per_chip_hour": price.usd_per_chip_hour if price else None},
            "lease": lease,
            "per_million_output_tokens": per_million,
            **({"error": missing} if price is None else {}),
        })
        raise typer.Exit(code=0 if price else 1)

    # The rate's name comes first: on a narrow terminal each row is a block titled by its first column.
    report = Report(title="TPU prices (USD per chip-hour; PRICES in tpu.env overrides)",
                    columns=["rate", "$/chip-h", "as of", "source", "used"],
                    right_aligned=frozenset({"$/chip-h"}))
    sources = list(dict.fromkeys(entry.source for entry in settings.prices.entries))
    for entry in settings.prices.entries:
        report.add_row("/".join(entry.key), f"{entry.usd_per_chip_hour:.4g}", entry.as_of.isoformat(),
                       f"[{sources.index(entry.source) + 1}]", "*" if entry.key == selected_key else "")
    report.notes = ["rate: accelerator/region/provisioning model; used: * marks the rate used below"] + \
        [f"[{i}] {source}" for i, source in enumerate(sources, 1)]
    print_report(report)
    if price is None:
        typer.echo(missing, err=True)
        raise typer.Exit(code=1)
    assert lease is not None, "costed whenever there is a price"
    rate = f"{prices.hourly(price.usd_per_chip_hour, 'chip-hour')} × {chips} chip{'s' if chips > 1 else ''}"
    if started:
        typer.echo(f"lease {lease['started'][:16].replace('T', ' ')} → {lease['deadline'][:16].replace('T', ' ')} UTC "
                   f"at {rate}: so far {prices.money(lease['so_far_usd'])}, to deadline "
                   f"{prices.money(lease['to_deadline_usd'])}, total {prices.money(lease['total_usd'])}")
    else:
        typer.echo(f"a {lease['hours']:g} h lease at {rate}: {prices.money(lease['total_usd'])}")
    for row in per_million or []:
        if row.get("usd") is None:
            typer.echo(f"{row['label']}: not in {bench_file}")
            continue
        typer.echo(f"{row['label']} (context {row['context']}, concurrency {row['concurrency']}, "
                   f"{row['output_throughput']:.1f} output tok/s): {prices.money(row['usd'])} per million output tokens")
    measured = [row for row in per_million or [] if row.get("usd") is not None]
    if len(measured) == 2:
        typer.echo(f"spread: {measured[1]['output_throughput'] / measured[0]['output_throughput']:.1f}×")


def _check_hours(hours: Optional[float], provisioning: str) -> None:
    if hours is None:
        return
    if not hours > 0:
        raise typer.BadParameter(f"--hours must be above 0 (a lease length, like 4); got {hours:g}")
    limit = FLEX_START_LONGEST.total_seconds() / 3600
    if provisioning == "flex-start" and hours > limit:
        raise typer.BadParameter(f"--hours {hours:g} exceeds flex-start's limit of {limit:g} h (7 days); "
                                 f"use at most {limit:g}")


def _lease_cost(price, chips: int, length: timedelta, started: Optional[str]) -> dict:
    if not started:
        total = prices.cost_for(price, length, chips=chips)
        return {"hours": length.total_seconds() / 3600, "total_usd": round(total, 6)}
    start = _parse_started(started)
    now = datetime.now(timezone.utc)
    deadline = start + length
    so_far = prices.cost_so_far(price, start, min(now, deadline), chips=chips)
    remaining = prices.cost_to_deadline(price, now, deadline, chips=chips) if now < deadline else 0.0
    return {"hours": length.total_seconds() / 3600, "started": start.isoformat(), "deadline": deadline.isoformat(),
            "so_far_usd": round(so_far, 6), "to_deadline_usd": round(remaining, 6),
            "total_usd": round(so_far + remaining, 6)}


def _per_million(price, chips: int, bench_file: Path) -> list[dict]:
    try:
        single, best = best_cells(load_cells(bench_file))
    except (OSError, ValueError) as exc:
        typer.echo(f"cannot read {bench_file}: {exc}", err=True)
        raise typer.Exit(code=1) from None
    rows: list[dict[str, Any]] = []
    for label, cell in (("concurrency 1", single), ("best measured batch", best)):
        if cell is None:
            rows.append({"label": label, "usd": None})
            continue
        rows.append({"label": label, "context": cell["context"], "concurrency": cell["concurrency"],
                     "output_throughput": cell["output_throughput"],
                     "usd": prices.usd_per_million_output_tokens(price, cell["output_throughput"], chips=chips)})
    return rows


def _check_slack_id(value: str, option: str, prefixes: tuple[str, ...], example: str) -> None:
    """A channel or team named as Slack ids them: a name (`#tpu`) would read as a channel without a lease."""
    if not re.fullmatch(r"[A-Z][A-Z0-9]{2,}", value) or not value.startswith(prefixes):
        raise typer.BadParameter(f"{option} {value} is not a Slack id; give the id, like {option} {example} "
                                 "(a channel's details in Slack show it)")


def _show_channel_cost(settings: Settings, *, team: str, channel: str, as_json: bool = False) -> None:
    """What `/tpu cost` says in that channel: the same action, so one source for the math."""
    import asyncio

    from redis.exceptions import RedisError

    from bot.redis_outage import RedisUnreachable

    if not settings.redis_url:
        raise SettingError("REDIS_URL is not set, and a channel's lease lives in the bot's Redis: set REDIS_URL to "
                           "the deployment's (like REDIS_URL=redis://redis.internal:6379/0) for --channel")
    try:
        text = asyncio.run(asyncio.wait_for(_channel_cost_text(settings, team, channel), timeout=15))
    except (RedisError, OSError, asyncio.TimeoutError) as exc:
        # One line with the fix (bot/cli/errors.py), as every command that cannot reach Redis says it.
        raise RedisUnreachable(settings.redis_url, exc) from None
    if as_json:
        print_json({"team": team, "channel": channel, "text": text.replace("*", "")})
        return
    typer.echo(f"channel {channel} (team {team}):")
    typer.echo(text.replace("*", ""))


async def _channel_cost_text(settings: Settings, team: str, channel: str) -> str:
    from agent.actions import get_action
    from agent.actions.cost_actions import CostArgs
    from agent.actions.run_context import RunContext
    from agent.context import Actor
    from bot.wiring import build_services

    svc, redis, pool = await build_services(settings, redis_url=settings.redis_url)
    try:
        # The operator already holds the Redis credentials: no Slack access rule applies here.
        estimate_cost = get_action("estimate_cost")
        assert estimate_cost is not None, "agent.actions registers estimate_cost"
        result = await estimate_cost.run(svc, RunContext(Actor("tpubot-cli", team, channel), svc.redactor), CostArgs())
        return result.text
    finally:
        await pool.aclose()
        await redis.aclose()


# --- bench ----------------------------------------------------------------------------------------


def bench(
    base_url: str = typer.Option(..., help="OpenAI-compatible endpoint, e.g. http://IP:8000/v1"),
    model: Optional[str] = typer.Option(None, help="served model name (default: MODEL_NAME)"),
    concurrency: str = typer.Option("1,4,16,64", help="concurrency levels, comma-separated"),
    context: str = typer.Option("128,1024,8192,15000", help="prompt lengths in tokens, comma-separated"),
    output_len: int = typer.Option(128, help="output tokens per request (ignore_eos), at least 1"),
    requests_per_cell: Optional[int] = typer.Option(None, help="requests per cell (default 2 × concurrency, ≥4)"),
    as_json: bool = typer.Option(False, "--json", help=json_option_help("bench")),
    save: Optional[Path] = typer.Option(None, "--save", help="also write the JSON to this file (for `tpubot cost --bench`)"),
    plot: Optional[Path] = typer.Option(None, help="write charts as PNG"),
    calibrate: bool = typer.Option(True, help="probe the server's token count to hit the context lengths"),
    timeout: float = typer.Option(600, help="seconds allowed per request"),
) -> None:
    if output_len < 1:
        raise typer.BadParameter(f"--output-len must be at least 1; got {output_len}")
    if requests_per_cell is not None and requests_per_cell < 1:
        raise typer.BadParameter(f"--requests-per-cell must be at least 1; got {requests_per_cell}")
    if not timeout > 0:
        raise typer.BadParameter(f"--timeout must be above 0 seconds; got {timeout:g}")
    if model is None:
        try:
            model = Settings.load().model_name
        except ValidationError:
            model = Settings.model_fields["model_name"].default
    config = SweepConfig(
        base_url=base_url, model=model, concurrencies=_ints(concurrency, "--concurrency"),
        contexts=_ints(context, "--context"), output_len=output_len, requests_per_cell=requests_per_cell,
        calibrate=calibrate, request_timeout_s=timeout,
    )
    try:
        # The progress bar goes to stderr, so `--json` and a piped table stay clean.
        result = run_sweep_with_progress(config, console=Console(stderr=True))
    except EndpointNotAnswering as error:
        typer.echo(f"bench stopped: {error}", err=True)
        raise typer.Exit(code=1) from None
    if as_json:
        print_json(result.as_dict())
    else:
        print_report(results_report(result))
        for line in failure_lines(result):
            typer.echo(f"failed {line}")
    if save is not None:
        typer.echo(f"JSON: {write_json(result, save)}", err=as_json)
    if plot is not None:
        typer.echo(f"chart: {write_plots(result, plot)}", err=as_json)
    if all(cell.metrics["completed"] == 0 for cell in result.cells):
        raise typer.Exit(code=1)


def results_report(result) -> Report:
    table = results_table(result)
    return Report(title=table.title, columns=table.columns, rows=list(table.rows), notes=[table.caption],
                  right_aligned=frozenset(table.columns), key_columns=2)  # context, concurrency
