"""`vllm serve`'s argument parser, as vllm-tpu 0.32.0 recorded it (tools/record_vllm_serve_args.py).

The recorded file holds what the real parser accepts and, as examples, what it printed for a few
argument lists; the sandbox's parser (infra/sandbox/vllm_serve_args.py) must print the same. Every
flag the startup script passes must be one the release declares, with a value it takes.
"""

from __future__ import annotations

import re

import pytest

from infra.sandbox.vllm_serve_args import ServeArgs, ServeRefused, parse_serve_args, recorded
from infra.vllm_flags import VllmConfig, vllm_flags

SPEC = recorded("0.32.0")


def test_the_file_names_its_source_and_was_recorded_from_the_release_the_default_image_runs():
    from infra.vllm_flags import DEFAULT_IMAGE
    from infra.vllm_images import served_vllm_version

    assert SPEC["package"] == "vllm-tpu" and SPEC["version"] == served_vllm_version(DEFAULT_IMAGE) == "0.32.0"
    assert SPEC["source"].startswith("vllm_tpu-0.32.0-") and SPEC["source"].endswith(".whl")
    assert "tools/record_vllm_serve_args.py" in SPEC["what"]
    assert SPEC["subcommands_not_built"] == []  # the top-level usage line lists every subcommand, as vLLM's does


@pytest.mark.parametrize("example", SPEC["examples"], ids=lambda e: " ".join(e["argv"][2:]))
def test_the_sandbox_parser_ends_as_the_real_one_did(example):
    got = parse_serve_args(example["argv"])
    # The real message names json.loads by its repr, memory address and all; the address is the run's.
    want = re.sub(r" at 0x[0-9a-f]+", "", example["stderr"])
    if example["exit_code"] == 0:
        assert isinstance(got, ServeArgs), got
    else:
        assert isinstance(got, ServeRefused) and (got.exit_code, got.stderr) == (example["exit_code"], want)


def test_the_server_refuses_a_tool_parser_nobody_registered_before_it_starts():
    refused = parse_serve_args(["serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "gemma5"])
    assert isinstance(refused, ServeRefused) and refused.exit_code == 1
    assert refused.last_line.startswith("KeyError: 'invalid tool call parser: gemma5 (chose from {")
    assert "gemma4" in SPEC["tool_call_parsers"] and "gemma4" in SPEC["reasoning_parsers"]
    alone = parse_serve_args(["serve", "m", "--enable-auto-tool-choice"])
    assert isinstance(alone, ServeRefused) and alone.last_line == (
        "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser")


def test_every_flag_the_startup_script_passes_is_declared_by_the_release_and_takes_its_value():
    declared = {name for option in SPEC["options"] for name in option["options"]}
    for config in (VllmConfig(), VllmConfig(gpu_memory_utilization=0.9, revision="")):
        flags = vllm_flags(config)
        for flag in (f for f in flags if f.startswith("--")):
            assert flag.replace("_", "-") in declared, flag
        parsed = parse_serve_args(["serve", config.model, *flags])
        assert isinstance(parsed, ServeArgs), parsed
        assert parsed.get("tool_call_parser") == "gemma4" and parsed.get("reasoning_parser") == "gemma4"
        assert parsed.get("limit_mm_per_prompt") == {"image": 4, "audio": 0, "video": 0}
        assert parsed.get("max_num_seqs") == config.max_num_seqs
