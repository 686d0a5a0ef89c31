"""`tpubot sandbox`: run the local GCP emulators on their own, until Ctrl-C.

The TPU API and the project-level APIs (Compute, Cloud Quotas, Secret Manager, Cloud Storage,
Resource Manager, IAM) of one `SandboxWorld`; it prints the settings that point the bot (and `tpubot doctor`) at all
of them, so
nothing half-configured reaches the real Google APIs.
"""

from __future__ import annotations

import threading

import typer


def register(app: typer.Typer) -> None:
    app.command("sandbox", help="Run the local GCP emulators (TPU, Compute, Cloud Quotas, Secret Manager, Cloud "
                                "Storage, Resource Manager, IAM) until Ctrl-C.")(
        run_sandbox)


def run_sandbox(
    port: int = typer.Option(0, "--port", help="port on 127.0.0.1 (0 = any free port)"),
    time_scale: float = typer.Option(
        1.0, "--time-scale", envvar="SANDBOX_TIME_SCALE", help="multiply emulated cloud timings (lower is faster)"
    ),
    project: str = typer.Option("tpubot-sandbox", "--project", help="the only project the emulator knows"),
) -> None:
    from infra.sandbox.discovery import strict_available
    from infra.sandbox.emulators import SandboxEmulators

    with SandboxEmulators() as emulators:
        tpu = emulators.start_cloud(project=project, time_scale=time_scale, tpu_port=port).tpu
        assert tpu is not None  # started with the cloud
        typer.echo(tpu.base_url)
        typer.echo(f"TPU API emulator for project {project}; zones: "
                   + ", ".join(f"{zone}={behaviour.value}" for zone, behaviour in tpu.zones().items()))
        typer.echo("requests are checked against Google's discovery documents" if strict_available() else
                   "requests are NOT checked against Google's schemas (pip install google-api-python-client)")
        typer.echo("Use it with: " + "  ".join(f"{key.upper()}={value}" for key, value in emulators.overrides.items())
                   + "  (Ctrl-C stops it)")
        typer.echo("For serve + worker on one Redis with every sandbox (TPU, Logging, Slack, model): tpubot dev")
        stopped = threading.Event()
        try:
            while not stopped.wait(timeout=3600):
                pass
        except KeyboardInterrupt:
            pass
