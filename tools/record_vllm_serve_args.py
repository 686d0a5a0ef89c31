#!/usr/bin/env python3
"""Record what `vllm serve` of a vLLM release accepts, from that release's own argument parser.

    python tools/record_vllm_serve_args.py 0.32.0 --package vllm-tpu -o infra/sandbox/data/vllm-tpu-0.32.0-serve-args.json

The release's wheel is downloaded from PyPI at run time into a temporary directory (never vendored),
with a throwaway virtualenv for the light dependencies its argument code imports (the same ones the
gemma4 conformance recorder installs); `vllm_serve_args_driver.py` builds the real parser there.
vllm-tpu cannot be imported here for real (it wants torch, JAX and a TPU): the driver runs the
release's `vllm/entrypoints/cli/main.py` construction — `FlexibleArgumentParser`, every
subcommand, `serve` through `make_arg_parser` over the release's real `vllm/config/` dataclasses and
`vllm/engine/arg_utils.py` — with torch, the engine, the model executor, the platform and the API
server stubbed (the conformance driver's stand-ins). What comes out:

- every `serve` option: its spellings, action, number of values, choices and the function that
  checks its value (vLLM's `optional_type`/`parse_type` wrappers with the function they wrap);
- the registered tool-call and reasoning parsers (the server refuses others before it starts);
- the top-level and `serve` usage lines, and examples: argument lists run through the real parser,
  with the exit code and the exact text it printed (the sandbox's `docker run` is checked against them).

The sandbox's `docker` (infra/sandbox/docker.py) refuses a container whose `vllm serve` arguments
this file does not accept, with the text the parser prints (infra/sandbox/vllm_serve_args.py).
When VLLM_IMAGE moves to a new release, record that release and point the sandbox at the new file.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from record_vllm_conformance import download, driver_python, unpack_sources

DRIVER = Path(__file__).with_name("vllm_serve_args_driver.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the vLLM release, e.g. 0.32.0")
    parser.add_argument("--package", default="vllm-tpu", help="PyPI package: vllm-tpu (a TPU image's release) or vllm")
    parser.add_argument("-o", "--out", required=True, type=Path, help="where to write the recorded file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vllm-serve-args-") as tmp:
        work = Path(tmp)
        wheel = download(args.package, args.version, work / "dist")
        unpack_sources(wheel, work / "src")
        python = driver_python(work / "venv")
        subprocess.run([str(python), str(DRIVER), str(work / "src"), str(args.out)], check=True, timeout=1800,
                       cwd=DRIVER.parent)
    recorded = json.loads(args.out.read_text())
    document = {
        "what": f"What `vllm serve` of {args.package} {args.version} accepts, from its own argument parser "
                f"({wheel.name}, downloaded from PyPI), recorded by tools/record_vllm_serve_args.py.",
        "package": args.package, "version": args.version, "source": wheel.name,
        **recorded,
    }
    args.out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(document['options'])} serve options, {len(document['tool_call_parsers'])} tool-call parsers, "
          f"{len(document['reasoning_parsers'])} reasoning parsers from {wheel.name} -> {args.out}")
    if document["subcommands_not_built"]:
        print("subcommands the stubs could not build (their names are still in the usage line):")
        for line in document["subcommands_not_built"]:
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
