"""`tpubot doctor`: preflight checks with pass/fail and the fix; the verdict is cached for `/tpu up`.

Exit status 0 when every check passes, 1 when any fails (2 when the settings themselves are
invalid). With no GCP project configured the checks run against the local emulators of the
sandbox, so the command passes on embedded defaults.
"""

from __future__ import annotations

import asyncio
import sys

import typer
from pydantic import ValidationError

from bot.cli.output import json_option_help, print_json
from bot.settings import Settings
from infra.plurals import counted


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Check settings, credentials, project, network, HF token secret and TPU quota "
                                  "(and Cloud NAT for internal nodes, the XLA cache bucket and TPU_SERVICE_ACCOUNT "
                                  "when set).")(doctor)


def doctor(as_json: bool = typer.Option(False, "--json", help=json_option_help("doctor"))) -> None:
    from infra.preflight import CheckResult, run_preflight

    # With --json the checks are the document on stdout; the running commentary goes to stderr.
    out = sys.stderr if as_json else sys.stdout
    try:
        settings = Settings.load()
    except (ValidationError, ValueError) as exc:
        from bot.cli.errors import setting_lines

        lines = setting_lines(exc)
        if not lines:
            raise
        failed = [CheckResult("settings", False, line,
                              "correct it in tpu.env or the environment (`tpubot config` shows both)")
                  for line in lines]
        if as_json:
            print_json(_document(failed))
        for check in failed:
            _line(out, check)
        raise typer.Exit(code=2) from None
    from bot.wiring import preflight_config_from
    from infra.sandbox.emulators import SandboxEmulators

    endpoints = ("tpu_api_endpoint", "compute_api_endpoint", "quotas_api_endpoint", "secretmanager_api_endpoint",
                 "storage_api_endpoint", "resourcemanager_api_endpoint", "iam_api_endpoint")
    with SandboxEmulators() as emulators:
        if any(settings.mode.target.api_endpoint(getattr(settings, name)) is None for name in endpoints):
            # A sandbox run never asks the real Google APIs (anonymously, they would only fail with
            # misleading fixes): the endpoints that are set are checked as given, the rest locally.
            emulators.start_cloud(project=settings.project)
            local = emulators.unset_in(settings)
            settings = settings.model_copy(update=local)
            out.write("GCP_PROJECT is unset: checking against the local sandbox emulators"
                      + (f" ({', '.join(k.upper() for k in local)} started here).\n" if len(local) < len(endpoints)
                         else ".\n"))
        where = settings.mode.target.label_for(settings.project)
        report = run_preflight(preflight_config_from(settings), extra=[
            CheckResult("settings", True, f"valid ({where}, zone {settings.tpu_zone}, {settings.tpu_accelerator_type})"),
        ])
    if as_json:
        print_json(_document(report.checks))
    else:
        for check in report.checks:
            _line(out, check)
    _cache(settings, report, out)
    failures = len(report.failures)
    warned = sum(1 for check in report.checks if check.ok and check.warning)
    skipped = sum(1 for check in report.checks if check.skipped)
    verdict = f"{counted(failures, 'check')} failed" if failures else "all checks passed"
    out.write(f"\n{verdict}{f', {skipped} not checked' if skipped else ''}"
              f"{f', {warned} with a warning' if warned else ''}\n")
    raise typer.Exit(code=0 if report.ok else 1)


def _document(checks) -> dict:
    return {"ok": all(check.ok for check in checks),
            "checks": [{"name": c.name, "ok": c.ok, "warning": c.warning, "skipped": c.skipped, "detail": c.detail,
                        "fix": c.fix}
                       for c in checks]}


def _line(out, check) -> None:
    verdict = "PASS"
    if check.skipped:
        verdict = "SKIP"
    elif not check.ok:
        verdict = "FAIL"
    elif check.warning:
        verdict = "WARN"
    out.write(f"{verdict}  {check.name:<16} {check.detail}\n")
    if (not check.ok or check.warning) and check.fix:
        out.write(f"      {'fix:':<16} {check.fix}\n")


def _cache(settings: Settings, report, out) -> None:
    """Store the verdict where `/tpu up` reads it; without REDIS_URL there is no bot to tell."""
    if not settings.redis_url:
        out.write("(REDIS_URL is unset: this verdict is not cached for the bot)\n")
        return
    from infra.preflight import PreflightStore
    from bot.wiring import redis_client

    async def save() -> None:
        redis = redis_client(settings.redis_url)
        try:
            await PreflightStore(redis).save(report, settings.preflight_ttl)
        finally:
            await redis.aclose()

    try:
        asyncio.run(save())
    except OSError as error:
        out.write(f"(could not cache the verdict in Redis: {error})\n")
