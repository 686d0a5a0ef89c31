"""`tpubot capacity`, `tpubot cost` and `tpubot bench`: sizing, paying for and measuring the
Gemma endpoint. The numbers come from infra/capacity.py, infra/prices.py and infra/bench.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from bot.settings import Settings, chip_count
from infra import capacity, prices
from infra.bench import SweepConfig, run_sweep_with_progress
from infra.bench_report import best_cells, failure_lines, load_cells, results_table, write_json, write_plots


def register(app: typer.Typer) -> None:
    app.command("capacity", help="KV-cache pool and max concurrent requests: v5e-1 vs v6e-1.")(show_capacity)
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


def _settings(console: Console) -> Settings:
    return Settings.load()  # a bad setting: one line from bot/cli/errors.py


# --- capacity -------------------------------------------------------------------------------------


def show_capacity(
    context: str = typer.Option("1024,8192,16384", help="context lengths (tokens) to size for, comma-separated"),
    utilization: float = typer.Option(capacity.DEFAULT_GPU_MEMORY_UTILIZATION, help="vLLM --gpu-memory-utilization"),
    resident_gib: float = typer.Option(
        capacity.GEMMA4_E2B_RESIDENT_BYTES / capacity.GIB, help="HBM vLLM keeps besides the KV cache (GiB)"),
    kv_kib_per_token: float = typer.Option(
        capacity.GEMMA4_E2B_KV_BYTES_PER_TOKEN / capacity.KIB, help="KV cache per token (KiB)"),
) -> None:
    console = Console()
    contexts = _ints(context, "--context")
    model = capacity.footprint(resident_gib=resident_gib, kv_kib_per_token=kv_kib_per_token)
    table = Table(title=f"KV capacity for {model.name} (vLLM, utilization {utilization:g})",
                  caption="GiB = 2^30 bytes. 'exposed' is the HBM the runtime gives vLLM.")
    for name in ("accelerator", "HBM (spec)", "exposed GiB", "cap GiB", "resident GiB", "KV GiB", "KV tokens"):
        table.add_column(name, justify="right")
    for ctx in contexts:
        table.add_column(f"max req @ {ctx:,}", justify="right")
    plans = []
    for profile in capacity.PROFILES:
        rows = [capacity.plan(profile, model, gpu_memory_utilization=utilization, context_tokens=ctx) for ctx in contexts]
        first = rows[0]
        plans.append(first)
        table.add_row(
            f"{profile.name} ({profile.accelerator_type})", profile.hbm_label, f"{first.hbm_gib:.2f}",
            f"{first.usable_gib:.2f}", f"{first.resident_gib:.2f}", f"{first.kv_pool_gib:.2f}",
            f"{first.kv_pool_tokens:,}", *(str(r.max_concurrent_requests) for r in rows),
        )
    console.print(table)
    for plan in plans:
        console.print(f"[dim]{plan.profile.name}: {plan.profile.hbm_source}[/dim]")


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
    hours: Optional[float] = typer.Option(None, help="lease length in hours (default: MAX_RUN_DURATION)"),
    started: Optional[str] = typer.Option(None, help="when the lease started (ISO time); enables cost so far"),
    bench_file: Optional[Path] = typer.Option(None, "--bench", help="a `tpubot bench --json` file for $/M tokens"),
    channel: Optional[str] = typer.Option(None, help="a Slack channel id (C…): that channel's lease, read from REDIS_URL"),
    team: Optional[str] = typer.Option(None, help="the Slack team id (T…) of --channel"),
) -> None:
    # Without --started/--hours, --channel/--team read the channel's lease from the bot's Redis.
    console = Console()
    settings = _settings(console)
    if channel or team:
        if started or hours is not None:
            raise typer.BadParameter("give either --channel/--team (a live lease) or --started/--hours, not both")
        if not (channel and team):
            raise typer.BadParameter("--channel and --team go together (a lease is keyed by team and channel)")
        _show_channel_cost(console, settings, team=team, channel=channel)
        return
    accelerator = accelerator or settings.tpu_accelerator_type
    region = prices.region_of(region or settings.tpu_zone)
    chips = chip_count(accelerator)
    if provisioning not in prices.PROVISIONING_MODELS:
        raise typer.BadParameter(f"--provisioning must be one of {', '.join(prices.PROVISIONING_MODELS)}")

    table = Table(title="TPU prices (USD per chip-hour; PRICES in tpu.env overrides)")
    for name in ("accelerator", "region", "model", "$/chip-h", "as of", "source"):
        table.add_column(name, overflow="fold")
    selected_key = (prices.generation_of(accelerator), region, provisioning)
    for entry in settings.prices.entries:
        mark = "[bold]" if entry.key == selected_key else ""
        table.add_row(f"{mark}{entry.accelerator}", entry.region, entry.provisioning_model,
                      f"{mark}{entry.usd_per_chip_hour:.4g}", entry.as_of.isoformat(), entry.source)
    console.print(table)

    try:
        price = settings.prices.get(accelerator, region, provisioning)
    except prices.PriceNotFound as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=1)
    length = timedelta(hours=hours) if hours is not None else settings.max_run_duration
    rate = f"${price.usd_per_chip_hour:.4g}/chip-h × {chips} chip{'s' if chips > 1 else ''}"
    if started:
        start = _parse_started(started)
        now = datetime.now(timezone.utc)
        deadline = start + length
        so_far = prices.cost_so_far(price, start, min(now, deadline), chips=chips)
        remaining = prices.cost_to_deadline(price, now, deadline, chips=chips) if now < deadline else 0.0
        console.print(f"lease {start:%Y-%m-%d %H:%M} → {deadline:%Y-%m-%d %H:%M} UTC at {rate}: "
                      f"so far [bold]${so_far:.2f}[/bold], to deadline [bold]${remaining:.2f}[/bold], "
                      f"total ${so_far + remaining:.2f}")
    else:
        total = prices.cost_for(price, length, chips=chips)
        console.print(f"a {length.total_seconds() / 3600:g} h lease at {rate}: [bold]${total:.2f}[/bold]")

    if bench_file is not None:
        try:
            single, best = best_cells(load_cells(bench_file))
        except (OSError, ValueError) as exc:
            console.print(f"[red]cannot read {bench_file}: {exc}[/red]")
            raise typer.Exit(code=1)
        for label, cell in (("concurrency 1", single), ("best measured batch", best)):
            if cell is None:
                console.print(f"{label}: not in {bench_file}")
                continue
            per_m = prices.usd_per_million_output_tokens(price, cell["output_throughput"], chips=chips)
            console.print(f"{label} (context {cell['context']}, concurrency {cell['concurrency']}, "
                          f"{cell['output_throughput']:.1f} output tok/s): [bold]${_money(per_m)}[/bold] per million output tokens")
        if single and best:
            console.print(f"spread: {best['output_throughput'] / single['output_throughput']:.1f}×")


def _show_channel_cost(console: Console, settings: Settings, *, team: str, channel: str) -> None:
    """What `/tpu cost` says in that channel: the same action, so one source for the math."""
    import asyncio

    from redis.exceptions import RedisError

    if not settings.redis_url:
        console.print("[red]REDIS_URL is not set: the channel's lease lives in the bot's Redis; set REDIS_URL to it.[/red]")
        raise typer.Exit(code=2)
    try:
        text = asyncio.run(asyncio.wait_for(_channel_cost_text(settings, team, channel), timeout=15))
    except (RedisError, OSError, asyncio.TimeoutError) as exc:
        console.print(f"[red]cannot read the lease from Redis at REDIS_URL: {type(exc).__name__}: {exc}[/red]")
        raise typer.Exit(code=1)
    console.print(f"channel {channel} (team {team}):", markup=False)
    console.print(text.replace("*", ""), markup=False, highlight=False)


async def _channel_cost_text(settings: Settings, team: str, channel: str) -> str:
    from agent.actions import get_action
    from agent.actions.cost_actions import CostArgs
    from agent.context import Actor
    from bot.wiring import build_services

    services, redis, pool = await build_services(settings, redis_url=settings.redis_url, with_tpu=False)
    try:
        # The operator already holds the Redis credentials: no Slack access rule applies here.
        result = await get_action("estimate_cost").run(services, Actor("tpubot-cli", team, channel), CostArgs())
        return result.text
    finally:
        await pool.aclose()
        await redis.aclose()


def _money(usd: float) -> str:
    # cents for dollars, a tenth of a cent below ten cents (the batch figure is ~$0.09/M)
    return f"{usd:.2f}" if usd >= 0.1 else f"{usd:.3f}"


# --- bench ----------------------------------------------------------------------------------------


def bench(
    base_url: str = typer.Option(..., help="OpenAI-compatible endpoint, e.g. http://IP:8000/v1"),
    model: Optional[str] = typer.Option(None, help="served model name (default: MODEL_NAME)"),
    concurrency: str = typer.Option("1,4,16,64", help="concurrency levels, comma-separated"),
    context: str = typer.Option("128,1024,8192,15000", help="prompt lengths in tokens, comma-separated"),
    output_len: int = typer.Option(128, min=1, help="output tokens per request (ignore_eos)"),
    requests_per_cell: Optional[int] = typer.Option(None, min=1, help="requests per cell (default 2 × concurrency, ≥4)"),
    json_file: Optional[Path] = typer.Option(None, "--json", help="write results as JSON"),
    plot: Optional[Path] = typer.Option(None, help="write charts as PNG"),
    calibrate: bool = typer.Option(True, help="probe the server's token count to hit the context lengths"),
    timeout: float = typer.Option(600.0, help="seconds allowed per request"),
) -> None:
    console = Console()
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
    result = run_sweep_with_progress(config, console=console)
    console.print(results_table(result))
    for line in failure_lines(result):
        console.print(f"[red]failed[/red] {line}")
    if json_file is not None:
        console.print(f"JSON: {write_json(result, json_file)}")
    if plot is not None:
        console.print(f"chart: {write_plots(result, plot)}")
    if all(cell.metrics["completed"] == 0 for cell in result.cells):
        raise typer.Exit(code=1)
