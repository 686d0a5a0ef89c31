"""`tpubot sandbox`: run the local TPU REST emulator on its own, until Ctrl-C."""

from __future__ import annotations

import threading

import typer


def register(app: typer.Typer) -> None:
    app.command("sandbox", help="Run the local Cloud TPU API emulator (point TPU_API_ENDPOINT at it).")(run_sandbox)


def run_sandbox(
    port: int = typer.Option(0, "--port", help="port on 127.0.0.1 (0 = any free port)"),
    time_scale: float = typer.Option(
        1.0, "--time-scale", envvar="SANDBOX_TIME_SCALE", help="multiply emulated cloud timings (lower is faster)"
    ),
    project: str = typer.Option("tpubot-sandbox", "--project", help="the only project the emulator knows"),
) -> None:
    from infra.sandbox.tpu_api import TpuSandbox

    sandbox = TpuSandbox(time_scale=time_scale, project=project, port=port)
    base_url = sandbox.start()
    typer.echo(base_url)
    typer.echo(f"TPU API emulator for project {project}; zones: "
               + ", ".join(f"{zone}={behaviour.value}" for zone, behaviour in sandbox.zones().items()))
    typer.echo(f"Use it with: TPU_API_ENDPOINT={base_url}  (Ctrl-C stops it)")
    typer.echo("For serve + worker on one Redis with every sandbox (TPU, Logging, Slack, model): tpubot dev")
    stopped = threading.Event()
    try:
        while not stopped.wait(timeout=3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sandbox.stop()
