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

from bot.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Check settings, credentials, project, network, HF token secret and TPU quota.")(doctor)


def doctor() -> None:
    from infra.preflight import CheckResult, run_preflight

    out = sys.stdout
    try:
        settings = Settings.load()
    except (ValidationError, ValueError) as exc:
        from bot.cli.errors import setting_lines

        lines = setting_lines(exc)
        if not lines:
            raise
        for line in lines:
            _line(out, CheckResult("settings", False, line,
                                   "correct it in tpu.env or the environment (`tpubot config` shows both)"))
        raise typer.Exit(code=2)
    cloud = None
    if settings.sandbox and not settings.tpu_api_endpoint:
        from infra.sandbox.world import CloudSandbox, SandboxWorld

        cloud = CloudSandbox(SandboxWorld(), project=settings.project).start()
        settings = settings.model_copy(update={k: v for k, v in cloud.endpoint_overrides().items()
                                               if not getattr(settings, k)})
        out.write("GCP_PROJECT is unset: checking against the local sandbox emulators.\n")
    try:
        from bot.wiring import preflight_config_from

        where = "sandbox" if settings.sandbox else f"project {settings.project}"
        report = run_preflight(preflight_config_from(settings), extra=[
            CheckResult("settings", True, f"valid ({where}, zone {settings.tpu_zone}, {settings.tpu_accelerator_type})"),
        ])
    finally:
        if cloud is not None:
            cloud.stop()
    for check in report.checks:
        _line(out, check)
    _cache(settings, report, out)
    failed = len(report.failures)
    out.write(f"\n{'all checks passed' if not failed else f'{failed} check(s) failed'}\n")
    raise typer.Exit(code=0 if report.ok else 1)


def _line(out, check) -> None:
    out.write(f"{'PASS' if check.ok else 'FAIL'}  {check.name:<16} {check.detail}\n")
    if not check.ok and check.fix:
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
