"""`tpubot digest [FILE|-] [--budget TOKENS] [--json]`: the log digest the agent would see.

One command, two front doors. `register(app)` adds it to the typer app, which gives the help
text and click's error messages. `run_lean(argv)` takes the usual invocations with the standard
library's argparse, so that `tpubot digest` imports neither typer nor pydantic (which typer's
option coercion pulls in): they cost ~14 MB, more than streaming a million-line log does, and
the digest is meant to run in drain3's streaming footprint. Whatever `run_lean` does not take
exactly (`--help`, a malformed or unknown option) it hands to typer, so there is one help and
one set of parse errors. tests/test_digest_cli.py holds the two doors to the same options.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, NoReturn, Optional, TextIO, cast

from agent.digest import DEFAULT_BUDGET, VLLMTokenizer, build_digest, lines_from_stream

if TYPE_CHECKING:
    import typer

# Below this the digest has room for its header line and nothing else: an empty answer.
MIN_BUDGET = 64
DEFAULT_MODEL = "gemma"
_SAMPLE = 64 * 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

HELP = "Digest a log file (or stdin) into a ranked, token-budgeted summary."
SOURCE_HELP = "Log file (plain or gzip); '-' reads stdin."
BUDGET_HELP = f"Token budget for the digest, at least {MIN_BUDGET}."
JSON_HELP = "Print JSON (shape: docs/json.md, `tpubot digest`)."
ENDPOINT_HELP = "OpenAI-compatible vLLM base URL; exact token counts via its /tokenize."
MODEL_HELP = "Model name sent to /tokenize (with --endpoint)."


class DigestRefused(Exception):
    """The input or an option cannot be digested; the message says what to give instead."""


@dataclass(frozen=True)
class DigestRequest:
    source: str = "-"
    budget: int = DEFAULT_BUDGET
    as_json: bool = False
    endpoint: Optional[str] = None
    model: str = DEFAULT_MODEL


def register(app: typer.Typer) -> None:
    import typer

    def digest(
        source: str = typer.Argument("-", metavar="FILE", help=SOURCE_HELP),
        budget: int = typer.Option(DEFAULT_BUDGET, "--budget", help=BUDGET_HELP),
        as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
        endpoint: Optional[str] = typer.Option(None, "--endpoint", help=ENDPOINT_HELP),
        model: str = typer.Option(DEFAULT_MODEL, "--model", help=MODEL_HELP),
    ) -> None:
        try:
            print_digest(DigestRequest(source, budget, as_json, endpoint, model), sys.stdout)
        except DigestRefused as refusal:
            typer.echo(str(refusal), err=True)
            raise typer.Exit(code=2) from None

    app.command("digest", help=HELP)(digest)


class _LeanParser(argparse.ArgumentParser):
    """argparse that raises instead of printing its own usage: typer answers a bad command line."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def lean_parser() -> argparse.ArgumentParser:
    """The typer command's options, for argparse (no `-h`: typer's help answers it)."""
    parser = _LeanParser(prog="tpubot digest", add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("source", nargs="?", default="-")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    parser.add_argument("--json", dest="as_json", action="store_true")
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    return parser


def parse_lean(argv: list[str]) -> DigestRequest | None:
    """The request `argv` asks for, or None when typer should answer (help, a bad option)."""
    if any(arg in ("--help", "-h") for arg in argv):
        return None
    try:
        parsed = lean_parser().parse_args(argv)
    except argparse.ArgumentError:
        return None
    return DigestRequest(parsed.source, parsed.budget, parsed.as_json, parsed.endpoint, parsed.model)


def run_lean(argv: list[str]) -> int | None:
    """Run `tpubot digest ARGV` without typer; the exit code, or None to let typer take it."""
    request = parse_lean(argv)
    if request is None:
        return None
    try:
        print_digest(request, sys.stdout)
        sys.stdout.flush()
    except DigestRefused as refusal:
        print(str(refusal), file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `tpubot digest big.log | head`: the reader stopped. What is still buffered goes to
        # /dev/null, or the interpreter's flush at exit would print a traceback; exit 1, as click does.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)  # click's words for Ctrl-C
        return 1
    return 0


def print_digest(request: DigestRequest, out: TextIO) -> None:
    if request.budget < MIN_BUDGET:
        raise DigestRefused(f"--budget {request.budget} leaves no room for a single log template; use at least "
                            f"{MIN_BUDGET} (the default is {DEFAULT_BUDGET})")
    tokenizer = VLLMTokenizer(request.endpoint, request.model) if request.endpoint else None
    source = request.source
    # Streamed: the input is read once, line by line, so a log of any size costs memory per
    # distinct message, not per line. The binary check looks at what is already buffered.
    with _open(source) as stream:
        if looks_binary(stream.peek(_SAMPLE)):
            raise DigestRefused(f"{'stdin' if source == '-' else source} is not a text log (it holds NUL or control "
                                "bytes); give a plain or gzip-compressed text file")
        result = build_digest(lines_from_stream(stream), budget_tokens=request.budget, tokenizer=tokenizer)
    if request.as_json:
        out.write(json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        # A stray escape byte in a log line must not drive the terminal: show it as \x1b.
        out.write(_TERMINAL_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", result.render()) + "\n")


def _open(source: str) -> ContextManager[io.BufferedReader]:
    if source == "-":
        stdin = sys.stdin.buffer
        if not isinstance(stdin, io.BufferedReader):  # a test runner's BytesIO; the real stdin is buffered
            # BufferedReader needs only readinto, which any binary stream has (typing's BinaryIO does not say so)
            stdin = io.BufferedReader(cast(io.RawIOBase, stdin))
        return contextlib.nullcontext(stdin)  # stdin belongs to the process: not closed here
    path = Path(source)
    if path.is_dir():
        raise DigestRefused(f"{source} is a directory; give one log file inside it (or '-' for stdin)")
    if not path.exists():
        raise DigestRefused(f"no such file: {source}")
    try:
        return io.BufferedReader(io.FileIO(path, "r"), buffer_size=_SAMPLE)  # open(path, "rb", buffering=_SAMPLE)
    except OSError as error:
        raise DigestRefused(f"cannot read {source}: {error.strerror or error}") from None


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
