"""Start-up problems in one line: a bad setting or an unreachable Redis names the variable, what
is wrong with its value and the fix, and exits 2 — no traceback unless `tpubot --debug`.

`run(app)` wraps the whole command line, so every command gets this without handling it itself;
`setting_lines(error)` is there for a command that reports settings its own way (doctor).
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsError

from agent.redact import redact
from bot.redis_outage import REDIS_AWAY, RedisUnreachable
from bot.settings import SettingError, Settings

EXIT_CODE = 2

_PROBLEM_BY_TYPE = {
    "int_parsing": "is not a whole number",
    "float_parsing": "is not a number",
    "bool_parsing": "is not true or false",
}
_SETTINGS_FIELD = re.compile(r'error parsing value for field "(\w+)"')


@dataclass
class RunOptions:
    """Set by the root `--debug` option; read when a command has failed."""

    debug: bool = False


def _example(name: str) -> str:
    field = Settings.model_fields.get(name)
    default = field.default if field is not None else None
    if isinstance(default, bool):
        return f"{name.upper()}={str(default).lower()}"
    if isinstance(default, (int, float)):
        return f"{name.upper()}={default}"
    return f"{name.upper()}=<value> (tpubot config shows the current ones)"


def _one(error: ErrorDetails) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a check across several settings: its message names them and the fix
        return message
    name = str(error["loc"][0])
    variable = name.upper()
    if message.startswith(variable):
        return message
    shown = redact(str(error.get("input")))
    problem = _PROBLEM_BY_TYPE.get(error["type"])
    if problem:
        return f"{variable}={shown} {problem}; write it like {_example(name)}"
    return f"{variable}={shown}: {message}"


def _entry_fields(variable: str, errors: list[ErrorDetails]) -> str:
    """A setting made of JSON entries (PRICES) whose entry lacks fields or has unknown ones: one line
    naming them all, with an entry as it should be written."""
    missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing"]
    unknown = [str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden"]
    other = [f"has {e['loc'][-1]}={redact(str(e.get('input')))} ({str(e['msg']).removeprefix('Value error, ')})"
             for e in errors if e["type"] not in ("missing", "extra_forbidden")]
    parts = ([f"lacks {', '.join(missing)}"] if missing else []) + \
            ([f"has {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} not a field"] if unknown else []) + other
    example = _ENTRY_EXAMPLES.get(variable)
    return f"{variable}: an entry {'; '.join(parts)}" + (f"; write each entry like {example}" if example else "")


def _entry_examples() -> dict[str, str]:
    from infra.prices import ENTRY_EXAMPLE

    return {"PRICES": ENTRY_EXAMPLE}


_ENTRY_EXAMPLES = _entry_examples()


def setting_lines(error: BaseException) -> list[str]:
    """One line per problem in a settings error (one per setting for the fields of its entries); []
    when `error` is not one."""
    if isinstance(error, ValidationError) and error.title == Settings.__name__:
        lines: list[str] = []
        nested: dict[str, list[ErrorDetails]] = {}
        for item in error.errors():
            if len(item["loc"]) > 1:  # a field inside a setting's JSON entries
                nested.setdefault(str(item["loc"][0]).upper(), []).append(item)
            else:
                lines.append(_one(item))
        return lines + [_entry_fields(variable, items) for variable, items in nested.items()]
    if isinstance(error, SettingError):
        return [str(error)]
    if isinstance(error, SettingsError):
        match = _SETTINGS_FIELD.search(str(error))
        variable = match.group(1).upper() if match else "a setting"
        cause = f" ({error.__cause__})" if error.__cause__ else ""
        example = {"TPU_LABELS": "'{\"team\": \"ml\"}'"}.get(variable)
        fix = f"write it like {variable}={example}" if example else "write it as JSON (.env.example shows its shape)"
        return [f"{variable} is not valid JSON{cause}; {fix}"]
    return []


def connection_line(error: BaseException) -> str | None:
    if isinstance(error, RedisUnreachable):
        return (f"cannot reach Redis at REDIS_URL={redact(error.url)} ({error}); start it, or point REDIS_URL "
                "at a running server (unset: an embedded one for a single process)")
    if isinstance(error, REDIS_AWAY):
        return (f"cannot reach Redis at REDIS_URL={redact(_configured_redis_url())} ({type(error).__name__}: "
                f"{redact(str(error))}); start it, or point REDIS_URL at a running server "
                "(unset: an embedded one for a single process)")
    return None


def _configured_redis_url() -> str:
    try:
        return Settings.load().redis_url or "(unset)"
    except Exception:  # the settings loaded once already; this is only for the message
        return "(unreadable)"


def one_line(error: BaseException) -> list[str]:
    lines = setting_lines(error)
    if not lines and (line := connection_line(error)):
        lines = [line]
    return lines


def run(app: Callable[..., Any], argv: list[str] | None = None) -> None:
    options = RunOptions()
    try:
        app(args=argv, obj=options)
    except Exception as error:  # only known start-up problems are shortened; the rest keep their traceback
        lines = one_line(error)
        if options.debug:
            raise
        if not lines:
            if not logging.getLogger().handlers:
                raise
            # A process that set up its logging reports its crash there: one JSON line, redacted.
            logging.getLogger("tpubot").critical("exiting on an unexpected error: %s: %s",
                                                 type(error).__name__, error, exc_info=error)
            sys.exit(1)
        for line in lines:
            print(f"tpubot: {line}", file=sys.stderr)
        sys.exit(EXIT_CODE)
