"""Runs INSIDE the serve-args recorder's throwaway virtualenv, on the vLLM sources it unpacked:
`python vllm_serve_args_driver.py SRC OUT.json`. Not imported by tpubot.

It builds the `vllm` command line exactly as `vllm.entrypoints.cli.main.main()` does — a
`FlexibleArgumentParser` with every subcommand's subparser, `serve` among them through
`make_arg_parser` (FrontendArgs + AsyncEngineArgs over vLLM's real config dataclasses) — and writes
down what that parser accepts: every `serve` option with its spellings, how many values it takes,
its choices and the function that checks its value; the registered tool-call and reasoning
parsers (what the server checks before it starts); and, as examples, what the parser prints for a
few argument lists, run for real (`parse_args` on the top-level parser, SystemExit caught).

Heavy imports (torch, the engine, the model executor, the platforms) are stubbed with the
conformance driver's stand-ins; vLLM's config package, engine args and argparse utilities run for
real. The platform is a stub that says `tpu`, which only matters to defaults, never to which flags
exist. Where a config field is typed with a stubbed class (a torch dtype, say) its check may come
out looser than on the image; no flag the startup script passes is typed so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import sys

import vllm_conformance_driver as stubs

# Kept real inside packages the conformance driver stubs whole: the config dataclasses, the engine
# args that turn them into flags, and one quantization module the config validates against.
REAL = ("vllm.config", "vllm.engine", "vllm.model_executor.layers.quantization.utils.quant_utils")
# Stubbed as well: the API server the serve command starts (its app, routes and protocol models), which
# the serve module imports at its top but the parser never touches.
SERVER = ("vllm.entrypoints.launchers.api_server", "vllm.entrypoints.launchers.app",
          "vllm.entrypoints.launchers.dp_supervisor", "vllm.entrypoints.launchers.launcher",
          "vllm.entrypoints.launchers.grpc_server", "vllm.entrypoints.launchers.render", "vllm.entrypoints.serve")
# `vllm serve` argument lists whose real outcome goes into the file, for the sandbox to be checked against.
EXAMPLES = (
    ["serve", "google/gemma-4-E2B-it", "--max_num_batched_tokens", "4096", "--disable_chunked_mm_input"],
    ["serve", "google/gemma-4-E2B-it", "--no-such-flag", "1"],
    ["serve", "google/gemma-4-E2B-it", "--port", "eighty"],
    ["serve", "google/gemma-4-E2B-it", "--max-num-seqs", "64.5"],
    ["serve", "google/gemma-4-E2B-it", "--max-model-len", "16x"],
    ["serve", "google/gemma-4-E2B-it", "--limit-mm-per-prompt", "{image:4}"],
    ["serve", "google/gemma-4-E2B-it", "--enable-auto-tool-choice=yes"],
    ["serve", "google/gemma-4-E2B-it", "--gpu-memory-utilization"],
    ["serve", "google/gemma-4-E2B-it", "--max_num_seqs", "64", "--limit-mm-per-prompt", '{"image":4,"audio":0}'],
)


def _keep_real() -> None:
    stubbed = stubs._StubFinder.find_spec

    def find_spec(self, name, path, target=None):
        if any(name == m or name.startswith(m + ".") or m.startswith(name + ".") for m in REAL):
            return None
        if any(name == m or name.startswith(m + ".") for m in SERVER):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return stubbed(self, name, path, target)

    stubs._StubFinder.find_spec = find_spec


def _lazy_top_level(src: str) -> None:
    """`from vllm import X` as vllm/__init__.py's lazy MODULE_ATTRS resolve it: for real for the engine
    args (what the parser is built from), a stub for the rest (the engine and its outputs)."""
    text = open(f"{src}/vllm/__init__.py", encoding="utf-8").read()
    attrs = dict(re.findall(r'"(\w+)": "(\.[\w.]+:\w+)"', text))
    package = sys.modules["vllm"]

    def resolve(name: str):
        if name not in attrs:
            raise AttributeError(name)
        module, attr = attrs[name].split(":")
        if module.startswith(".engine.arg_utils"):
            return getattr(importlib.import_module(module, "vllm"), attr)
        return stubs._AnyMeta(attr, (), {})

    package.__getattr__ = resolve  # type: ignore[attr-defined]
    version = re.search(r"__version__ = version = '([^']+)'", open(f"{src}/vllm/_version.py").read())
    package.__version__ = version.group(1) if version else "unknown"  # type: ignore[attr-defined]


def _tpu_platform() -> None:
    import vllm.platforms as platforms

    platform = stubs._StubModule("current_platform")
    platform.device_type = "tpu"  # type: ignore[attr-defined]
    platform.device_name = "tpu"  # type: ignore[attr-defined]
    platforms.current_platform = platform


def build_parser():
    """The top-level `vllm` parser, as `vllm.entrypoints.cli.main.main()` builds it."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    main_source = importlib.util.find_spec("vllm.entrypoints.cli.main").origin
    names = re.findall(r"vllm\.entrypoints\.cli\.([\w.]+),\n", open(main_source).read())
    parser = FlexibleArgumentParser(description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=sys.modules["vllm"].__version__)
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = None
    skipped = []
    for name in dict.fromkeys(names):
        try:
            module = importlib.import_module(f"vllm.entrypoints.cli.{name}")
            commands = module.cmd_init(create_requested=False) if name == "snapshot" else module.cmd_init()
        except Exception as error:  # noqa: BLE001 - a subcommand the stubs cannot build: named in the file
            skipped.append(f"{name}: {type(error).__name__}: {error}")
            continue
        for command in commands:
            try:
                sub = command.subparser_init(subparsers)
            except Exception as error:  # noqa: BLE001 - its name is registered; its own options are not needed
                skipped.append(f"{command.name}: {type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            if command.name == "serve":
                serve = sub
    return parser, serve, skipped


def type_spec(check) -> dict | None:
    """The value check as data: its name, and for vLLM's wrappers the function they wrap."""
    if check is None:
        return None
    name = getattr(check, "__name__", type(check).__name__)
    inner = [cell.cell_contents for cell in (getattr(check, "__closure__", None) or ())]
    spec = {"name": name}
    wrapped = [value for value in inner if callable(value)]
    if name in ("_optional_type", "_parse_type") and wrapped:
        spec["wraps"] = type_spec(wrapped[0])
        spec["repr"] = re.sub(r" at 0x[0-9a-f]+", "", repr(wrapped[0]))
    return spec


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def option_specs(serve) -> list[dict]:
    out = []
    for action in serve._actions:
        out.append({
            "options": list(action.option_strings), "dest": action.dest, "action": type(action).__name__,
            "nargs": action.nargs, "choices": None if action.choices is None else [str(c) for c in action.choices],
            "type": type_spec(action.type), "required": action.required, "default": _jsonable(action.default),
        })
    return out


def run_example(parser, argv: list[str]) -> dict:
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return {"argv": list(argv), "exit_code": code, "stderr": err.getvalue()}


def main(src: str, out_path: str) -> None:
    _keep_real()
    stubs.install_stubs(src)
    _lazy_top_level(src)
    _tpu_platform()
    sys.argv = ["vllm"]  # argparse names the program after argv[0]: `vllm`, its subcommand `vllm serve`
    os.environ["COLUMNS"] = "80"  # what argparse wraps usage lines at in a container without a terminal
    parser, serve, skipped = build_parser()
    if serve is None:
        sys.exit("the serve subcommand could not be built: " + "; ".join(skipped))
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    result = {
        "prog": parser.prog, "usage": parser.format_usage(), "serve_prog": serve.prog,
        "serve_usage": serve.format_usage(), "python": sys.version.split()[0],
        "subcommands_not_built": skipped,
        "options": option_specs(serve),
        "tool_call_parsers": sorted(ToolParserManager.list_registered()),
        "reasoning_parsers": sorted(ReasoningParserManager.list_registered()),
        "examples": [run_example(parser, argv) for argv in EXAMPLES],
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
