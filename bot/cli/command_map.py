"""Which module registers each `tpubot` command: standard library only, as the package's own import
is (a command line is read before any command module is loaded)."""

from __future__ import annotations

# Each command and the module whose `register(app)` adds it, in the order `tpubot --help` lists them:
# `tpubot <command>` assembles its own module alone (all fifteen cost 0.15 CPU-s of every start).
# tests/test_cli_output.py holds it to what the modules register.
COMMANDS: dict[str, str] = {
    "config": "bot.cli.config",
    "digest": "bot.cli.digest",
    "capacity": "bot.cli.capacity", "cost": "bot.cli.capacity", "bench": "bot.cli.capacity",
    "serve": "bot.cli.processes", "worker": "bot.cli.processes", "socket": "bot.cli.processes",
    "shell": "bot.cli.processes",
    "sandbox": "bot.cli.sandbox",
    "dev": "bot.cli.dev",
    "doctor": "bot.cli.doctor",
    "zones": "bot.cli.zones",
    "render-startup-script": "bot.cli.startup",
    "reconcile": "bot.cli.reconcile",
    "mcp": "bot.cli.mcp",
    "docs": "bot.cli.docs",
    "spend": "bot.cli.spend",
    "eval": "bot.cli.eval",
    "feedback": "bot.cli.feedback",
}


def command_of(args: list[str]) -> str | None:
    """The command a command line names: its first word that is not a root option (each is a flag)."""
    return next((arg for arg in args if not arg.startswith("-")), None)
