"""`tpubot digest [FILE|-] [--budget TOKENS] [--json]`: the log digest the agent would see."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from agent.digest import DEFAULT_BUDGET, VLLMTokenizer, build_digest, lines_from_stream


def register(app: typer.Typer) -> None:
    app.command("digest", help="Digest a log file (or stdin) into a ranked, token-budgeted summary.")(digest)


def digest(
    source: str = typer.Argument("-", metavar="[FILE|-]", help="Log file (plain or gzip); '-' reads stdin."),
    budget: int = typer.Option(DEFAULT_BUDGET, "--budget", min=1, help="Token budget for the digest."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (templates, tokens, ...) instead of text."),
    endpoint: Optional[str] = typer.Option(
        None, "--endpoint", help="OpenAI-compatible vLLM base URL; exact token counts via its /tokenize."
    ),
    model: str = typer.Option("gemma", "--model", help="Model name sent to /tokenize (with --endpoint)."),
) -> None:
    # Streamed: the input is read once, line by line, so a log of any size costs memory per
    # distinct message, not per line.
    if source == "-":
        handle = contextlib.nullcontext(sys.stdin.buffer)
    else:
        path = Path(source)
        if not path.is_file():
            typer.echo(f"no such file: {source}", err=True)
            raise typer.Exit(code=2)
        handle = path.open("rb")
    tokenizer = VLLMTokenizer(endpoint, model) if endpoint else None
    with handle as stream:
        result = build_digest(lines_from_stream(stream), budget_tokens=budget, tokenizer=tokenizer)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        typer.echo(result.render())
