"""`tpubot eval`: the shipped incidents (and a team's) against three arms, with deterministic scores.

The arms are the mention agent on an endpoint, the bare model with only the logs, and the answer
without a model (agent/evals/arms.py). With no `--endpoint` the agent and bare arms talk to the
sandbox model — a heuristic stand-in, not Gemma, and the table says so — so the command runs on
embedded defaults; the model-less arm's figure is the one to expect anywhere (README, "A gate").
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import typer

from bot.cli.output import Report, json_option_help, print_report

SANDBOX_LABEL = "the sandbox model (a heuristic stand-in, not Gemma)"


def register(app: typer.Typer) -> None:
    app.command("eval", help="Score the agent, the bare model and the model-less answer on the shipped incidents "
                             "(and --cases DIR): facts, cited lines, runbooks, no forbidden proposal, no secret.")(
        run_eval_command)


def run_eval_command(
    endpoint: str = typer.Option("", help="OpenAI-compatible base URL of the model to evaluate (…/v1); "
                                          "empty: the sandbox model"),
    model: str = typer.Option("google/gemma-4-E2B-it", help="model name the endpoint serves"),
    arms: str = typer.Option("agent,bare,modelless", help="arms to run, comma-separated: agent, bare, modelless"),
    cases: list[Path] = typer.Option([], "--cases", help="a folder of your own incident files (*.toml, "
                                                         "docs/eval.md); repeatable"),
    only_cases: bool = typer.Option(False, "--only-cases", help="run only the --cases folders, not the shipped set"),
    variations: int = typer.Option(0, min=0, max=20, help="held-back variants per incident (other timestamps, "
                                                          "noise, a planted secret), from --seed"),
    seed: int = typer.Option(31, help="seed of the variations"),
    as_json: bool = typer.Option(False, "--json", help=json_option_help("eval")),
) -> None:
    from agent.evals.arms import Arm
    from agent.evals.cases import IncidentError, load_incidents, shipped_dir, variations as make_variations

    chosen = _arms(arms, Arm)
    for folder in cases:
        if not folder.is_dir():
            typer.echo(f"--cases {folder}: not a folder; name a folder of incident files (*.toml).", err=True)
            raise typer.Exit(code=2)
    folders = ([] if only_cases else [shipped_dir()]) + list(cases)
    try:
        incidents = load_incidents(folders)
    except IncidentError as error:
        typer.echo(f"{error}", err=True)
        raise typer.Exit(code=2) from None
    if not incidents:
        typer.echo("No incidents to run: the --cases folders hold no *.toml file.", err=True)
        raise typer.Exit(code=2)
    incidents += [variant for incident in list(incidents)
                  for variant in make_variations(incident, seed=seed, count=variations)]
    result = asyncio.run(_run(incidents, chosen, endpoint, model, quiet=as_json))
    if as_json:
        typer.echo(json.dumps({**result.as_dict(), "seed": seed, "variations": variations}, indent=2))
        return
    print_report(summary_report(result, seed=seed, variations=variations))


def _arms(text: str, arm_type) -> list:
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    known = [arm.value for arm in arm_type]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        typer.echo(f"--arms {text!r}: {', '.join(unknown) or 'nothing'} is not an arm; choose from "
                   f"{', '.join(known)}, e.g. --arms agent,modelless", err=True)
        raise typer.Exit(code=2)
    return [arm_type(name) for name in dict.fromkeys(names)]


async def _run(incidents, arms, endpoint: str, model: str, *, quiet: bool):
    from agent.evals.arms import endpoint_problem
    from agent.evals.runner import run_eval
    from bot.settings import Settings
    from bot.wiring import build_services, model_config_from
    from infra.sandbox.vllm import LatencyModel, VllmEmulator
    from infra.state.redis_server import ensure_redis

    settings = Settings.load()
    if endpoint and any(arm.value != "modelless" for arm in arms):
        # Asked once, before anything runs: a dead or wrong endpoint is one line, not one failure per case.
        problem = await endpoint_problem(endpoint, model, model_config_from(settings))
        if problem is not None:
            typer.echo(f"--endpoint {endpoint}: {problem}. Nothing was scored.", err=True)
            raise typer.Exit(code=2)
    # A model error on one case is that case's `error` (its progress line, --json, the errors
    # column); the agent loop's warning with its traceback is for the bot's own logs.
    logging.getLogger("agent.llm.loop").setLevel(logging.ERROR)
    # Its own embedded store, whatever REDIS_URL says: the eval's proposals, dedupe markers and audit
    # lines (team T0EVAL) are scratch, and the deployment's audit record is for what people did.
    redis_endpoint = ensure_redis("")
    sandbox = None if endpoint else VllmEmulator(latency=LatencyModel.instant())
    try:
        base_url = await sandbox.start_async() if sandbox is not None else endpoint.rstrip("/")
        svc, redis, pool = await build_services(settings, redis_url=redis_endpoint.url)
        try:
            def progress(case) -> None:
                if not quiet:
                    error = f" (error: {case.answer.error})" if case.answer.error else ""
                    typer.echo(f"  {case.arm.value:<9} {case.incident.name}: {100 * case.score.value:.0f}{error}",
                               err=True)

            return await run_eval(svc, incidents, arms, endpoint=base_url, model=model,
                                  endpoint_label=SANDBOX_LABEL if sandbox else base_url,
                                  source=None if sandbox else "--endpoint", on_case=progress)
        finally:
            await pool.aclose()
            await redis.aclose()
    finally:
        if sandbox is not None:
            await sandbox.stop_async()
        redis_endpoint.stop()


def summary_report(result, *, seed: int, variations: int) -> Report:
    from agent.evals.scoring import CHECKS

    report = Report(title=f"tpubot eval: {len(result.of(result.arms[0]))} cases, model: {result.endpoint_label}",
                    columns=["arm", "cases", "passed", "score", *CHECKS, "errors"],
                    right_aligned=frozenset(["cases", "passed", "score", *CHECKS, "errors"]))
    for arm in result.arms:
        summary = result.summary(arm)
        name = arm.value + (" (heuristic)" if arm.value != "modelless" and result.endpoint_label == SANDBOX_LABEL else "")
        report.add_row(name, summary["cases"], summary["passed"], f"{summary['score']:.1f}",
                       *(_percent(summary["checks"][check], summary["scored"][check]) for check in CHECKS),
                       summary["errors"])
    for arm in result.arms:
        failed = [case for case in result.of(arm) if case.answer.error]
        if failed:
            report.notes.append(f"{arm.value}: {len(failed)} of {len(result.of(arm))} cases got no answer from the "
                                f"model and score 0 (errors), e.g. {failed[0].incident.name}: {failed[0].answer.error}")
    report.notes.append(f"Runbook search: the expected runbook is in the top 3 for {result.search_hits} of "
                        f"{result.search_cases} cases that expect one.")
    report.notes.append("score: the mean over cases of each case's checks (0 for a case with a forbidden proposal "
                        "or an echoed secret); passed: cases whose every check is 100 — all facts said in the "
                        "answer's own words, the evidence cited, every cited line holding evidence, exactly the "
                        "expected runbooks, nothing unsafe.")
    report.notes.append(f"Checks are % over the cases each applies to (n: how many; safe only where a proposal is "
                        f"forbidden or the logs hold a secret); variations per incident: {variations} (seed {seed}). "
                        f"`--json` has every case and answer; docs/eval.md says how each check is scored.")
    return report


def _percent(value: float | None, scored: int) -> str:
    return "n/a" if value is None else f"{value:.1f} (n {scored})"
