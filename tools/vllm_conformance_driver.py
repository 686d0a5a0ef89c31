"""Runs INSIDE the recorder's throwaway virtualenv, on the vLLM sources the recorder unpacked:
`python vllm_conformance_driver.py SRC CASES.json OUT.json`. Not imported by tpubot.

It drives vLLM's own gemma4 tool and reasoning parsers (`ParserManager.get_parser("gemma4",
"gemma4", enable_auto_tools=True)`, as `vllm serve --enable-auto-tool-choice --tool-call-parser
gemma4 --reasoning-parser gemma4` composes them) over each case's raw model text:
non-streaming through `Parser.parse` and, where the release has them, `message_assembly` and
`resolve_finish_reason`; streaming through `ChatStreamProcessor.step` over the recorded engine
chunks (or `Parser.parse_delta` where the release has no stream processor). Heavy imports
(torch, transformers, …) are stubbed: the parsers only need text, token ids and a vocabulary.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import os
import sys
import types

# Special-token ids of Gemma 4 (shared reference gemma4-wire.md §1.1).
SPECIAL = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<|tool>": 46, "<tool|>": 47, "<|tool_call>": 48, "<tool_call|>": 49,
           "<|tool_response>": 50, "<tool_response|>": 51, '<|"|>': 52, "<|think|>": 98, "<|channel>": 100,
           "<channel|>": 101, "<|turn>": 105, "<turn|>": 106}
STOP_ID = {"tool_response": 50, "turn": 106}
STUBBED = ("torch", "triton", "numpy", "cv2", "PIL", "zmq", "psutil", "cloudpickle", "prometheus_client", "fastapi",
           "starlette", "uvloop", "aiohttp", "huggingface_hub", "safetensors", "tokenizers", "sentencepiece",
           "xgrammar", "outlines_core", "lm_format_enforcer", "llguidance", "partial_json_parser", "blake3", "cbor2",
           "pybase64", "gguf", "ijson", "einops", "numba", "requests", "tqdm", "setproctitle", "cpuinfo", "mistral_common",
           "transformers", "openai_harmony", "jinja2", "librosa", "soundfile", "av", "compressed_tensors", "depyf",
           "watchfiles", "ray", "scipy", "pandas", "tiktoken", "fastsafetensors")
STUBBED_VLLM = ("vllm.config", "vllm.distributed", "vllm.model_executor", "vllm.platforms", "vllm.v1", "vllm.engine",
                "vllm.multimodal", "vllm.lora", "vllm.compilation", "vllm.attention", "vllm.worker", "vllm.executor")


class _AnyMeta(type):
    """A stand-in class for anything a stubbed module exports: usable in annotations and schemas."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyMeta(name, (), {})

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __getitem__(cls, item):
        return cls

    def __call__(cls, *args, **kwargs):
        return _AnyMeta("instance", (), {})

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.any_schema()


class _StubModule(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        # A mixin sits next to real bases (msgspec.Struct): a plain class, so the metaclasses agree.
        value = type(name, (), {}) if name.endswith("Mixin") else _AnyMeta(name, (), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, *, catch_all: bool = False) -> None:
        self.catch_all = catch_all  # last on the path: stub whatever nothing else found, outside vllm

    def find_spec(self, name, path, target=None):
        root = name.split(".")[0]
        if root in STUBBED or any(name == m or name.startswith(m + ".") for m in STUBBED_VLLM):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        # A package that is not installed at all (never a missing part of a real one).
        missing = root != "vllm" and not root.startswith("_") and root not in sys.stdlib_module_names \
            and (name == root or isinstance(sys.modules.get(root), _StubModule))
        if self.catch_all and missing:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


def install_stubs(src: str) -> None:
    sys.meta_path.insert(0, _StubFinder())
    sys.meta_path.append(_StubFinder(catch_all=True))
    real_version = importlib.metadata.version

    def version(name):
        try:
            return real_version(name)
        except importlib.metadata.PackageNotFoundError:
            return "99.0.0"  # a stubbed dependency: new enough for every version check

    importlib.metadata.version = version
    package = types.ModuleType("vllm")  # vllm/__init__.py checks torch: skip it
    package.__path__ = [os.path.join(src, "vllm")]
    sys.modules["vllm"] = package


class Tokenizer:
    """What the parsers ask a tokenizer: the vocabulary (special tokens by id) and decoding."""

    def get_vocab(self):
        return dict(SPECIAL)

    @property
    def vocab(self):
        return dict(SPECIAL)

    def convert_tokens_to_ids(self, token):
        return SPECIAL.get(token, 3)

    def decode(self, ids, **kwargs):
        names = {v: k for k, v in SPECIAL.items()}
        return "".join(names.get(i, "") for i in ids)


def chunk_ids(chunk: str, first_id: int) -> list[int]:
    """Token ids for one engine chunk: special tokens by their id, other text one id per piece."""
    import re

    pieces = [p for p in re.split("(" + "|".join(re.escape(t) for t in SPECIAL) + ")", chunk) if p]
    return [SPECIAL.get(p, first_id + n) for n, p in enumerate(pieces)]


def prompt_tail(case: dict) -> list[int]:
    """The prompt's token ids as far as the parser looks at them (its tail). With thinking on, the
    chat template continues a model turn after tool results with `<|channel>thought\\n` (vLLM
    #45834), so the parser starts in reasoning; otherwise the prompt ends `<|turn>model\\n`."""
    messages = case.get("messages") or []
    thinking = (case.get("chat_template_kwargs") or {}).get("enable_thinking")
    if thinking and messages and messages[-1]["role"] == "tool":
        return [2, 105, 1000, 106, 105, 48, 1001, 49, 50, 1002, 51, 100, 1003]
    return [2, 105, 1000, 106, 105, 1001]


def _optional(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def main(src: str, cases_path: str, out_path: str) -> None:
    install_stubs(src)
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.parser_manager import ParserManager

    assemble = _optional("vllm.entrypoints.openai.chat_completion.message_assembly", "assemble_chat_message_fields")
    resolve_finish = _optional("vllm.entrypoints.serve.utils.tool_calls_utils", "resolve_finish_reason")
    stream_processor = _optional("vllm.entrypoints.openai.chat_completion.stream_processor", "ChatStreamProcessor")
    parser_cls = ParserManager.get_parser(tool_parser_name="gemma4", reasoning_parser_name="gemma4",
                                          enable_auto_tools=True)
    data = json.load(open(cases_path))
    not_derived: set[str] = set()
    for case in data["cases"]:
        prompt_ids = prompt_tail(case)
        body = {"model": "google/gemma-4-E2B-it", "messages": case.get("messages") or [{"role": "user", "content": "hello"}]}
        tools = data["tool_sets"].get(case["tools"])
        if case.get("request_has_tools", True) and tools:
            body.update(tools=tools, tool_choice=case.get("tool_choice", "auto"))
        if case.get("chat_template_kwargs"):
            body["chat_template_kwargs"] = case["chat_template_kwargs"]
        engine_finish = case["engine_finish"]
        chunks = list(case["streaming_chunks"]) or [""]  # no output at all: one empty final step
        ids = [i for n, c in enumerate(chunks) for i in chunk_ids(c, 2000 + 100 * n)]

        request = ChatCompletionRequest(**body)
        parser = parser_cls(Tokenizer(), request.tools)
        parser.adjust_request(request) if hasattr(parser, "adjust_request") else None
        if hasattr(parser, "set_prompt_token_ids"):
            parser.set_prompt_token_ids(prompt_ids)
        reasoning, content, calls = parser.parse(case["raw"], request, enable_auto_tools=True,
                                                 model_output_token_ids=ids)
        if assemble is not None:
            fields = assemble(request, reasoning, content, calls, enable_auto_tools=True, parser_cls=parser_cls)
            reasoning, content, calls = fields.reasoning, fields.content, fields.tool_calls
        else:
            not_derived.add("non-streaming tool_choice filtering (no message_assembly in this release)")
        made = [[c.function.name, c.function.arguments] if hasattr(c, "function") else [c.name, c.arguments]
                for c in calls or []]
        if resolve_finish is not None:
            finish = resolve_finish(engine_finish, request, bool(made))
        else:
            finish = case["non_streaming"]["finish"]
            not_derived.add("non-streaming finish_reason (no resolve_finish_reason in this release: kept from the input)")
        case["non_streaming"] = {"content": content, "reasoning": reasoning, "tool_calls": made, "finish": finish}

        request = ChatCompletionRequest(**body)
        parser = parser_cls(Tokenizer(), request.tools)
        if hasattr(parser, "adjust_request"):
            parser.adjust_request(request)
        total = {"content": None, "reasoning": None, "tool_calls": {}, "finish": None}
        processor = stream_processor(request, parser, enable_auto_tools=True, parser_cls=parser_cls) \
            if stream_processor is not None else None
        if processor is None:
            not_derived.add("streaming finish_reason (no ChatStreamProcessor in this release: kept from the input)")
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            step_finish = engine_finish if last else None
            if processor is not None:
                delta, finish = processor.step(chunk, chunk_ids(chunk, 2000 + 100 * n), step_finish, prompt_ids)
            else:
                delta = parser.parse_delta(delta_text=chunk, delta_token_ids=chunk_ids(chunk, 2000 + 100 * n),
                                           request=request, prompt_token_ids=prompt_ids, finished=last)
                finish = case["streaming_total"]["finish"] if last else None
            if delta is not None:
                for key in ("content", "reasoning"):
                    if getattr(delta, key, None):
                        total[key] = (total[key] or "") + getattr(delta, key)
                for tc in getattr(delta, "tool_calls", None) or []:
                    entry = total["tool_calls"].setdefault(tc.index, ["", ""])
                    if tc.function is not None:
                        entry[0] += tc.function.name or ""
                        entry[1] += tc.function.arguments or ""
            if finish is not None:
                total["finish"] = finish
        total["tool_calls"] = [total["tool_calls"][i] for i in sorted(total["tool_calls"])]
        case["streaming_total"] = total
    data["how"] = (f"Derived by tools/record_vllm_conformance.py from the release's own parser modules "
                   f"(heavy imports stubbed; special-token ids as in gemma4-wire.md). Not derived: "
                   f"{'; '.join(sorted(not_derived)) or 'nothing'}.")
    json.dump(data, open(out_path, "w"), indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
