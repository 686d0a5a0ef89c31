#!/usr/bin/env python3
"""Derive the gemma4 conformance cases from a given vLLM release's own serving code.

    python tools/record_vllm_conformance.py 0.33.0 --cases CASES.json -o OUT.json
    python tools/record_vllm_conformance.py 0.32.0 --package vllm-tpu --cases CASES.json -o OUT.json

CASES.json is a conformance file (`../shared/conformance/*.json`: tool sets, and per case the raw
model text, its engine chunks and how generation ended); OUT.json is the same file with
`non_streaming` and `streaming_total` as the release returns them. The release's wheel is
downloaded from PyPI at run time into a temporary directory (never vendored), with a throwaway
virtualenv for the parser's light dependencies; `vllm_conformance_driver.py` runs the parsers
there (torch and the engine stubbed). It prints which cases differ from CASES.json.

What it cannot derive: the engine (cases give the model text and chunking), and, for a release
whose serving layer has no `resolve_finish_reason` / `ChatStreamProcessor` /
`message_assembly` (they came with 0.33), the finish_reason and tool_choice filtering those
decide — it keeps the input's and says so in the output's `how` (so on 0.32.0 it does not derive
the one finish_reason in which 0.32.0 and 0.33.0 differ). Checked against both shared files
(vllm 0.33.0; vllm-tpu 0.32.0): content, reasoning and tool calls agree in every non-streaming
case and in all streamed ones but two, where a bare `thought` label and its `\\n` arrive as
separate chunks and the derived reasoning keeps the `\\n` (the recorded files do not).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DRIVER = Path(__file__).with_name("vllm_conformance_driver.py")
# What the parser modules import for real; everything heavy is stubbed by the driver.
DRIVER_DEPS = ("regex", "pydantic", "openai", "msgspec", "cachetools", "packaging", "pyyaml")
# vllm-tpu builds for CPython 3.12 only; pip picks the wheel for that interpreter, not ours.
WHEEL_TARGET = ("--python-version", "3.12", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_24_x86_64", "--only-binary", ":all:")


def download(package: str, version: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *WHEEL_TARGET,
                    f"{package}=={version}", "-d", str(into)], check=True, timeout=1800)
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        sys.exit(f"no wheel of {package}=={version} on PyPI for CPython 3.12 / manylinux x86_64")
    return wheels[0]


def unpack_sources(wheel: Path, into: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                archive.extract(name, into)


def driver_python(venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *DRIVER_DEPS], check=True, timeout=1800)
    return python


def differing(before: dict, after: dict) -> list[str]:
    def norm(result: dict) -> dict:
        return {**result, "tool_calls": [list(c) for c in result.get("tool_calls") or []]}

    out = []
    for old, new in zip(before["cases"], after["cases"]):
        for key in ("non_streaming", "streaming_total"):
            if norm(old[key]) != norm(new[key]):
                out.append(f"{old['id']} {key}: recorded {json.dumps(old[key])} derived {json.dumps(new[key])}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the vLLM release, e.g. 0.33.0")
    parser.add_argument("--package", default="vllm", help="PyPI package: vllm, or vllm-tpu for a TPU image's release")
    parser.add_argument("--cases", required=True, type=Path, help="a conformance file to take the cases from")
    parser.add_argument("-o", "--out", required=True, type=Path, help="where to write the derived file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vllm-conformance-") as tmp:
        work = Path(tmp)
        wheel = download(args.package, args.version, work / "dist")
        unpack_sources(wheel, work / "src")
        python = driver_python(work / "venv")
        subprocess.run([str(python), str(DRIVER), str(work / "src"), str(args.cases), str(args.out)], check=True,
                       timeout=1800)
    derived = json.loads(args.out.read_text())
    derived["what"] = f"Outputs of {args.package} {args.version}'s gemma4 tool and reasoning parsers ({wheel.name})."
    args.out.write_text(json.dumps(derived, indent=1, ensure_ascii=False) + "\n")
    changes = differing(json.loads(args.cases.read_text()), derived)
    print(f"{len(derived['cases'])} cases derived from {wheel.name}; {len(changes)} differ from {args.cases}:")
    for line in changes:
        print("  " + line)
    print(derived["how"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
