"""`tpubot render-startup-script`: print the startup script a create sends (it holds no secret).

Leases differ in one line only, the name of the lease's API-key secret
(`projects/P/secrets/tpubot-model-key-LEASE/versions/latest`): without `--lease` the script is
printed for the example lease id `LEASE`, and stderr says so; with `--lease ID` it is byte for byte
what that lease's create sent.
"""

from __future__ import annotations

import re
import sys

import typer

from bot.settings import Settings


def register(app: typer.Typer) -> None:
    app.command("render-startup-script",
                help="Print the TPU VM startup script as a create sends it: for the example lease id LEASE, "
                     "or for one lease with --lease.")(render)


def render(lease: str = typer.Option("", "--lease", help="a lease id: print exactly the script its create sent")) -> None:
    from bot.wiring import EXAMPLE_LEASE_ID, startup_script_config_from
    from infra.startup_script import render_startup_script

    lease_id = lease.strip() or EXAMPLE_LEASE_ID
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,60}", lease_id):
        raise typer.BadParameter(f"{lease!r} is not a lease id; give one as `/tpu status` shows it, like a88745c7b7",
                                 param_hint="--lease")
    sys.stdout.write(render_startup_script(startup_script_config_from(Settings.load(), lease_id)))
    if not lease.strip():
        sys.stderr.write(f"(for the example lease id {EXAMPLE_LEASE_ID}: a lease's own script names its key secret "
                         f"tpubot-model-key-<lease id> instead; --lease ID prints exactly that one)\n")
