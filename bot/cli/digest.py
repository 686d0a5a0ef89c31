"""`tpubot digest [FILE|-] [--budget TOKENS] [--json]`: the log digest the agent would see."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import zlib
from pathlib import Path
from typing import BinaryIO, ContextManager, Optional

import typer

from agent.digest import DEFAULT_BUDGET, VLLMTokenizer, build_digest, lines_from_stream

# Below this the digest has room for its header line and nothing else: an empty answer.
MIN_BUDGET = 64
_SAMPLE = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def register(app: typer.Typer) -> None:
    app.command("digest", help="Digest a log file (or stdin) into a ranked, token-budgeted summary.")(digest)


def digest(
    source: str = typer.Argument("-", metavar="FILE", help="Log file (plain or gzip); '-' reads stdin."),
    budget: int = typer.Option(DEFAULT_BUDGET, "--budget", help=f"Token budget for the digest, at least {MIN_BUDGET}."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (shape: docs/json.md, `tpubot digest`)."),
    endpoint: Optional[str] = typer.Option(
        None, "--endpoint", help="OpenAI-compatible vLLM base URL; exact token counts via its /tokenize."
    ),
    model: str = typer.Option("gemma", "--model", help="Model name sent to /tokenize (with --endpoint)."),
) -> None:
    if budget < MIN_BUDGET:
        _fail(f"--budget {budget} leaves no room for a single log template; use at least {MIN_BUDGET} "
              f"(the default is {DEFAULT_BUDGET})")
    tokenizer = VLLMTokenizer(endpoint, model) if endpoint else None
    # Streamed: the input is read once, line by line, so a log of any size costs memory per
    # distinct message, not per line. The binary check looks at what is already buffered.
    with _open(source) as stream:
        if looks_binary(stream.peek(_SAMPLE)):
            _fail(f"{'stdin' if source == '-' else source} is not a text log (it holds NUL or control bytes); "
                  "give a plain or gzip-compressed text file")
        result = build_digest(lines_from_stream(stream), budget_tokens=budget, tokenizer=tokenizer)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        # A stray escape byte in a log line must not drive the terminal: show it as \x1b.
        typer.echo(_TERMINAL_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", result.render()))


def _open(source: str) -> ContextManager[BinaryIO]:
    if source == "-":
        stdin = sys.stdin.buffer
        if not hasattr(stdin, "peek"):  # a test runner's BytesIO; the real stdin is buffered
            stdin = io.BufferedReader(stdin)  # type: ignore[arg-type]
        return contextlib.nullcontext(stdin)  # stdin belongs to the process: not closed here
    path = Path(source)
    if path.is_dir():
        _fail(f"{source} is a directory; give one log file inside it (or '-' for stdin)")
    if not path.exists():
        _fail(f"no such file: {source}")
    try:
        return path.open("rb", buffering=_SAMPLE)
    except OSError as error:
        _fail(f"cannot read {source}: {error.strerror or error}")


def looks_binary(data: bytes) -> bool:
    """NUL bytes, or more than 1 in 20 control characters, in the (decompressed) first 64 KiB.
    Tabs, newlines and the ESC of colour codes are text; an image or a core dump is not."""
    sample = data[:_SAMPLE]
    if sample[:2] == b"\x1f\x8b":
        try:
            sample = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, _SAMPLE)
        except zlib.error:
            return True
    if b"\x00" in sample:
        return True
    text = sample.decode("utf-8", errors="replace")
    return len(_CONTROL.findall(text)) * 20 > max(len(text), 1)


def _fail(message: str) -> None:
    typer.echo(message, err=True)
    raise typer.Exit(code=2)
