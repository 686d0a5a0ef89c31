"""`vllm serve`'s argument parser as a release recorded it: what the sandbox's containers accept.

`infra/sandbox/data/vllm-tpu-0.32.0-serve-args.json` is written by tools/record_vllm_serve_args.py
from vllm-tpu 0.32.0's own parser (every option's spellings, values, choices and value check, the
registered tool-call and reasoning parsers, the usage lines). `parse_serve_args` rebuilds that
parser with Python's argparse and parses a container's `vllm serve …` arguments the way the real
command line does, so that an argument list vLLM refuses ends the same way here:

- `FlexibleArgumentParser`'s rewrite first: `--max_num_seqs` is `--max-num-seqs` (underscores in a
  name are dashes), `--x=v` keeps its value;
- a value its check refuses, a missing value, a flag given a value: the `vllm serve` usage line and
  `vllm serve: error: argument --port: invalid int value: 'eighty'`, exit 2;
- an option nobody declared: the top-level usage and `vllm: error: unrecognized arguments: …`, exit
  2 (argparse reports a subcommand's leftovers from the top-level parser);
- then the server's own checks before it starts (`validate_parsed_serve_args`,
  `validate_api_server_args`): auto tool choice without a tool-call parser, a parser name nobody
  registered — a Python traceback whose last line is the exception, exit 1.

Not reproduced: the dotted JSON form (`--limit-mm-per-prompt.image 4`) and `--config FILE`; an
argument list using them is refused as unrecognized (the startup script uses neither). Value
checks are vLLM's functions by name (`human_readable_int`, `optional_type(int)`, …); a check the
file names but this module does not know (a lambda, a dataclass parser) accepts any value.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, NoReturn

DATA_PACKAGE = "infra.sandbox.data"
RECORDED = {"0.32.0": "vllm-tpu-0.32.0-serve-args.json"}  # vLLM release -> its recorded parser
DEFAULT_RELEASE = "0.32.0"


@dataclass(frozen=True)
class ServeArgs:
    """What a `vllm serve` argument list that the parser accepts asks for (dest -> value)."""

    values: dict[str, Any]

    def get(self, dest: str, default: Any = None) -> Any:
        value = self.values.get(dest, default)
        return default if value is None else value


@dataclass(frozen=True)
class ServeRefused:
    """How `vllm serve` ended instead: its exit code and the text it printed to stderr."""

    exit_code: int
    stderr: str
    lines: list[str] = field(default_factory=list)

    @property
    def last_line(self) -> str:
        return self.stderr.rstrip("\n").rsplit("\n", 1)[-1]


@lru_cache(maxsize=None)
def recorded(release: str = DEFAULT_RELEASE) -> dict:
    name = RECORDED.get(release, RECORDED[DEFAULT_RELEASE])
    return json.loads(resources.files(DATA_PACKAGE).joinpath(name).read_text(encoding="utf-8"))


def parse_serve_args(argv: Sequence[str], release: str = DEFAULT_RELEASE) -> ServeArgs | ServeRefused:
    """`argv` after `vllm` (starting with `serve`), as that release's command line takes it."""
    spec = recorded(release)
    if list(argv[:1]) != ["serve"]:
        return _refused(spec["usage"], spec["prog"], f"argument subparser: invalid choice: {argv[0]!r}"
                        if argv else "the following arguments are required: subparser")
    parser = _parser(release)
    try:
        namespace, extras = parser.parse_known_args(flexible(argv[1:]))
    except _ParseError as error:
        return _refused(spec["serve_usage"], spec["serve_prog"], str(error))
    if extras:
        return _refused(spec["usage"], spec["prog"], "unrecognized arguments: " + " ".join(extras))
    values = vars(namespace)
    refused = _server_checks(values, spec)
    return refused if refused is not None else ServeArgs(values)


def flexible(args: Sequence[str]) -> list[str]:
    """FlexibleArgumentParser's rewrite: underscores in an option's name (up to a `.`) become dashes."""
    out = []
    for arg in args:
        if arg.startswith("--"):
            key, sep, value = arg.partition("=")
            name, dot, rest = key[2:].partition(".")
            out.append("--" + name.replace("_", "-") + dot + rest + sep + value)
        else:
            out.append(arg)
    return out


def _refused(usage: str, prog: str, message: str) -> ServeRefused:
    return ServeRefused(2, f"{usage}{prog}: error: {message}\n")


def _server_checks(values: dict[str, Any], spec: dict) -> ServeRefused | None:
    """What the serve command checks after parsing and before it starts anything (raises in vLLM)."""
    if values.get("enable_auto_tool_choice") and not values.get("tool_call_parser"):
        return _raised("TypeError", "Error: --enable-auto-tool-choice requires --tool-call-parser")
    tools = spec["tool_call_parsers"]
    if values.get("enable_auto_tool_choice") and values.get("tool_call_parser") not in tools:
        return _raised("KeyError", repr(f"invalid tool call parser: {values['tool_call_parser']} "
                                        f"(chose from {{ {','.join(tools)} }})"))
    reasoning = values.get("reasoning_parser") or ""
    if reasoning and reasoning not in spec["reasoning_parsers"]:
        return _raised("KeyError", repr(f"invalid reasoning parser: {reasoning} "
                                        f"(chose from {{ {','.join(spec['reasoning_parsers'])} }})"))
    return None


def _raised(kind: str, message: str) -> ServeRefused:
    return ServeRefused(1, "Traceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 8, in <module>\n"
                           "    sys.exit(main())\n" f"{kind}: {message}\n")


class _ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)


@lru_cache(maxsize=None)
def _parser(release: str) -> _Parser:
    spec = recorded(release)
    parser = _Parser(prog=spec["serve_prog"], add_help=False)
    for option in spec["options"]:
        _add(parser, option)
    return parser


def _add(parser: argparse.ArgumentParser, option: dict) -> None:
    names = option["options"]
    kind = option["action"]
    if kind in ("_HelpAction", "_VersionAction"):
        parser.add_argument(*names, action="store_true", dest=option["dest"])
        return
    if not names:
        parser.add_argument(option["dest"], nargs=option["nargs"], type=_check(option["type"]) or str)
        return
    common: dict[str, Any] = {"dest": option["dest"]}
    if kind == "BooleanOptionalAction":
        # argparse adds the --no- spellings itself.
        positive = [n for n in names if not (n.startswith("--no-") and "--" + n[5:] in names)]
        parser.add_argument(*positive, action=argparse.BooleanOptionalAction, **common)
    elif kind in ("_StoreTrueAction", "_StoreFalseAction"):
        parser.add_argument(*names, action="store_true" if kind == "_StoreTrueAction" else "store_false", **common)
    else:
        action = "append" if kind == "_AppendAction" else "store"
        parser.add_argument(*names, action=action, nargs=option["nargs"], choices=option["choices"],
                            type=_check(option["type"]) or str, **common)


# --- the value checks vLLM's options name (vllm/engine/arg_utils.py, vllm/utils/argparse_utils.py) ---

def human_readable_int(value: str) -> int:
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        try:
            return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?") from error
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return human_readable_int(value)


def parse_reasoning_parser(value: str) -> str:
    return "" if value.lower() == "none" else value


def loads(value: str) -> Any:
    return json.loads(value)


def union_dict_and_str(value: str) -> Any:
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return str(value)
    return _optional(loads, "<function loads>")(value)


_NAMED: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, "loads": loads, "human_readable_int": human_readable_int,
    "human_readable_int_or_auto": human_readable_int_or_auto, "parse_reasoning_parser": parse_reasoning_parser,
    "union_dict_and_str": union_dict_and_str,
}


def _check(spec: dict | None) -> Callable[[str], Any] | None:
    if spec is None:
        return None
    name = spec["name"]
    if name in ("_optional_type", "_parse_type") and spec.get("wraps"):
        inner = _check(spec["wraps"]) or str
        return (_optional if name == "_optional_type" else _parse)(inner, spec.get("repr", ""))
    return _NAMED.get(name, _accept(name))


def _parse(inner: Callable[[str], Any], shown: str) -> Callable[[str], Any]:
    def _parse_type(value: str) -> Any:
        try:
            return inner(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {shown}.") from error

    return _parse_type


def _optional(inner: Callable[[str], Any], shown: str) -> Callable[[str], Any]:
    parse = _parse(inner, shown)

    def _optional_type(value: str) -> Any:
        return None if value in ("", "None") else parse(value)

    return _optional_type


def _accept(name: str) -> Callable[[str], Any]:
    def check(value: str) -> str:
        return value

    check.__name__ = name
    return check
