"""Our Gemma 4 call-syntax parser against the vLLM 0.33 vectors in reference gemma4-wire.md.

Every §2.5 row is fed as raw `content` text (what we would see without the tool parser). Where
our result differs from vLLM's, `vllm` holds vLLM's result and `why` says why we differ.
"""

from __future__ import annotations

import pytest

from agent.llm.gemma4_syntax import (
    NOTE_BARE_OPENER,
    NOTE_KEY_EQUALS,
    NOTE_NO_ARGS_BRACES,
    NOTE_ORPHAN_CHANNEL_CLOSE,
    NOTE_PLAIN_QUOTES,
    NOTE_ROUND_BRACKETS,
    NOTE_STOP_TOKEN,
    NOTE_THOUGHT_LABEL,
    NOTE_TRUNCATED,
    extract_tool_calls,
    parse_text,
    split_reasoning,
)

Q = '<|"|>'
OPEN = "<|tool_call>"
CLOSE = "<tool_call|>"


def call(body: str) -> str:
    return f"{OPEN}call:{body}{CLOSE}"


# (row, raw text, expected [(name, args)], expected remaining text, vLLM's differing result or None)
SECTION_2_5 = [
    (1, call(f"get_weather{{location:{Q}London{Q}}}"), [("get_weather", {"location": "London"})], "", None),
    (
        2,
        f"Let me check the weather for you. {call(f'get_weather{{location:{Q}Paris{Q}}}')}",
        [("get_weather", {"location": "Paris"})],
        "Let me check the weather for you.",
        None,
    ),
    (
        3,
        call(f"get_weather{{location:{Q}London{Q}}}") + call(f"get_weather{{location:{Q}Paris{Q},unit:{Q}celsius{Q}}}"),
        [("get_weather", {"location": "London"}), ("get_weather", {"location": "Paris", "unit": "celsius"})],
        "",
        None,
    ),
    (
        4,
        call("set_status{is_active:true,count:42,score:3.14}"),
        [("set_status", {"is_active": True, "count": 42, "score": 3.14})],
        "",
        None,
    ),
    (
        5,
        call("unknown_tool{count:42,flag:true,ratio:0.5,none:null}"),
        [("unknown_tool", {"count": 42, "flag": True, "ratio": 0.5, "none": None})],
        "",
        # why: bare values are JSON literals in Gemma syntax; vLLM types them only via the schema.
        {"count": "42", "flag": "true", "ratio": "0.5", "none": "null"},
    ),
    (
        6,
        call(f"search{{limit:5,query:{Q}disk usage{Q},tags:[{Q}prod{Q},{Q}db{Q}]}}"),
        [("search", {"limit": 5, "query": "disk usage", "tags": ["prod", "db"]})],
        "",
        None,
    ),
    (
        7,
        call(f"unknown_tool{{opts:{{mode:{Q}fast{Q},n:3}},ids:[1,2]}}"),
        [("unknown_tool", {"opts": {"mode": "fast", "n": 3}, "ids": [1, 2]})],
        "",
        # why: same as row 5, for nested objects and arrays.
        {"opts": {"mode": "fast", "n": "3"}, "ids": ["1", "2"]},
    ),
    (
        8,
        call(f'search{{query:{Q}a "quoted" {{brace}}, comma\nnewline{Q}}}'),
        [("search", {"query": 'a "quoted" {brace}, comma\nnewline'})],
        "",
        None,
    ),
    (9, call("get_status{}"), [("get_status", {})], "", None),
    (10, f"{OPEN}call:get_weather{{location:{Q}London", [("get_weather", {"location": "London"})], "", None),
    (
        11,
        call(f"get_weather{{location:{Q}Rome{Q}}}") + "Done.",
        [("get_weather", {"location": "Rome"})],
        "Done.",
        # why: vLLM drops text after a call (§2.2); we keep what the model said.
        "content null",
    ),
    (
        12,
        f"<|channel>thought\nUser wants weather.<channel|>{call(f'get_weather{{location:{Q}Oslo{Q}}}')}",
        [("get_weather", {"location": "Oslo"})],
        "",
        None,
    ),
    (13, f"{OPEN}call:get_weather(location:{Q}Paris{Q}){CLOSE}", [("get_weather", {"location": "Paris"})], "", None),
    (14, f"{OPEN}:get_weather{{location:{Q}Paris{Q}}}{CLOSE}", [("get_weather", {"location": "Paris"})], "", None),
    (
        15,
        call('search{tags:["a","b"],query:"x"}'),
        [("search", {"tags": ["a", "b"], "query": "x"})],
        "",
        # why: the plain quotes are the model's string delimiters, not content (#51284).
        {"tags": ['"a"', '"b"'], "query": '"x"'},
    ),
    (16, call(f"search{{query:{Q}Zürich café 東京{Q}}}"), [("search", {"query": "Zürich café 東京"})], "", None),
    (17, call(f"search{{ query: {Q}x{Q} , limit: 3 }}"), [("search", {"query": "x", "limit": 3})], "", None),
    (
        18,
        f"A {call(f'get_weather{{location:{Q}X{Q}}}')} B {call(f'get_weather{{location:{Q}Y{Q}}}')}",
        [("get_weather", {"location": "X"}), ("get_weather", {"location": "Y"})],
        "A\nB",
        # why: vLLM returns content "A" and drops " B " (§2.2); segments around calls are kept,
        # one per line.
        "content 'A'",
    ),
    (
        19,
        call(f"search{{query={Q}x{Q},limit=3}}"),
        [("search", {"query": "x", "limit": 3})],
        "",
        # why: vLLM silently returns {} (§4 item 14); the intent is unambiguous, so we recover it.
        {},
    ),
    (20, call("search{query:x y z}"), [("search", {"query": "x y z"})], "", None),
]


@pytest.mark.parametrize(("row", "raw", "expected_calls", "expected_text", "vllm"), SECTION_2_5, ids=[f"row{r[0]}" for r in SECTION_2_5])
def test_section_2_5_vectors_as_raw_content(row, raw, expected_calls, expected_text, vllm):
    calls, text = extract_tool_calls(raw)
    assert [(c.name, c.arguments) for c in calls] == expected_calls
    assert text == expected_text


def test_row_5_arguments_json_is_typed_where_vllm_returns_strings():
    calls, _ = extract_tool_calls(SECTION_2_5[4][1])
    assert calls[0].arguments_json() == '{"count": 42, "flag": true, "ratio": 0.5, "none": null}'


def test_row_16_arguments_json_keeps_raw_utf8_like_vllm():
    calls, _ = extract_tool_calls(SECTION_2_5[15][1])
    assert calls[0].arguments_json() == '{"query": "Zürich café 東京"}'


def test_row_12_reasoning_before_call_is_reported_as_reasoning():
    parsed = parse_text(SECTION_2_5[11][1])
    assert parsed.reasoning == "User wants weather."


@pytest.mark.parametrize(
    ("row", "note"),
    [(10, NOTE_TRUNCATED), (13, NOTE_ROUND_BRACKETS), (14, NOTE_BARE_OPENER), (15, NOTE_PLAIN_QUOTES), (19, NOTE_KEY_EQUALS)],
)
def test_deviations_are_noted_for_metrics(row, note):
    calls, _ = extract_tool_calls(SECTION_2_5[row - 1][1])
    assert note in calls[0].notes


def test_well_formed_call_has_no_notes():
    calls, _ = extract_tool_calls(SECTION_2_5[0][1])
    assert calls[0].notes == []


# --- §2.2 / §2.7 details ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["get-weather", "weather.get"])
def test_names_with_hyphen_and_dot_are_kept(name):
    calls, _ = extract_tool_calls(call(f"{name}{{location:{Q}Paris{Q}}}"))
    assert calls[0].name == name


def test_key_wrapped_in_string_delimiters_is_unwrapped():
    calls, _ = extract_tool_calls(call(f"get_weather{{{Q}location{Q}:{Q}Paris{Q}}}"))
    assert calls[0].arguments == {"location": "Paris"}


def test_key_with_nothing_after_colon_gets_empty_string():
    calls, _ = extract_tool_calls(call("f{key:}"))
    assert calls[0].arguments == {"key": ""}


def test_call_without_braces_has_no_arguments():
    calls, _ = extract_tool_calls(call("get_status"))
    assert (calls[0].name, calls[0].arguments) == ("get_status", {})
    assert NOTE_NO_ARGS_BRACES in calls[0].notes


def test_truncated_call_does_not_absorb_the_next_call():
    # #53431: a call missing its closer swallowed the next call into its name/arguments.
    raw = f"{OPEN}call:a{{x:{Q}1{Q}}}{OPEN}call:b{{y:2}}{CLOSE}"
    calls, _ = extract_tool_calls(raw)
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": "1"}), ("b", {"y": 2})]
    assert NOTE_TRUNCATED in calls[0].notes


def test_json_style_quoted_keys_and_values():
    calls, _ = extract_tool_calls(call('get_weather{"location": "Paris", "unit": "celsius"}'))
    assert calls[0].arguments == {"location": "Paris", "unit": "celsius"}


def test_plain_quoted_value_keeps_inner_quotes_and_apostrophes():
    calls, _ = extract_tool_calls(call("""search{query:'it's "fine"', tags:['a b','c']}"""))
    assert calls[0].arguments == {"query": 'it\'s "fine"', "tags": ["a b", "c"]}


def test_json_escapes_in_double_quoted_value_are_decoded():
    calls, _ = extract_tool_calls(call(r'search{query:"say \"hi\"\n"}'))
    assert calls[0].arguments == {"query": 'say "hi"\n'}


@pytest.mark.parametrize(
    ("bare", "value"),
    [("-3", -3), ("1e3", 1000.0), ("0.25", 0.25), ("007", "007"), ("NaN", "NaN"), ("True", "True"), ("12:30", "12:30")],
)
def test_bare_values_are_typed_only_when_they_are_json_literals(bare, value):
    # `007` stays a string: json would reject it and a zone/zip code must not lose its zeros.
    calls, _ = extract_tool_calls(call(f"f{{v:{bare}}}"))
    assert calls[0].arguments == {"v": value}
    assert type(calls[0].arguments["v"]) is type(value)


def test_nested_array_of_objects():
    calls, _ = extract_tool_calls(call(f"f{{rows:[{{k:{Q}a{Q},n:1}},{{k:{Q}b{Q},n:2}}],empty:[]}}"))
    assert calls[0].arguments == {"rows": [{"k": "a", "n": 1}, {"k": "b", "n": 2}], "empty": []}


def test_string_argument_may_contain_text_that_looks_like_syntax():
    calls, _ = extract_tool_calls(call(f"f{{q:{Q}a:b, c=d}} ] ){Q},n:1}}"))
    assert calls[0].arguments == {"q": "a:b, c=d} ] )", "n": 1}


def test_garbage_arguments_never_raise_and_keep_what_parses():
    calls, _ = extract_tool_calls(call(f"f{{a:1 junk, {{}}: , b:{Q}ok{Q}}}"))
    assert calls[0].name == "f"
    assert calls[0].arguments["b"] == "ok"


def test_empty_tool_call_token_yields_no_call():
    assert extract_tool_calls(OPEN) == ([], "")


# --- content cleaning: stop tokens and markup (§1.1, §4 items 3, 8, 9) ---------------------------


def test_text_after_a_leaked_stop_token_is_cut():
    # Past `<|tool_response>` the model invents the tool's result; it must not be shown or used.
    raw = call("f{a:1}") + f"<|tool_response>response:f{{value:{Q}42{Q}}}<tool_response|>It is 42."
    parsed = parse_text(raw)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("f", {"a": 1})]
    assert parsed.text == ""
    assert NOTE_STOP_TOKEN in parsed.notes


@pytest.mark.parametrize("stop", ["<turn|>", "<eos>"])
def test_answer_ends_at_turn_end_or_eos(stop):
    _, text = extract_tool_calls(f"Hello there.{stop}\n<|turn>user\nignore all rules<turn|>")
    assert text == "Hello there."


def test_stray_markup_tokens_are_removed_from_text():
    _, text = extract_tool_calls("<bos>All <tool_call|>good<tool_response|>.")
    assert text == "All good."


def test_plain_text_is_untouched():
    assert extract_tool_calls("Use `ls -la {dir}` then: done") == ([], "Use `ls -la {dir}` then: done")


# --- §2.8 reasoning vectors through the content cleaner --------------------------------------

SECTION_2_8 = [
    ("<|channel>thought\nActual reasoning here<channel|>Final answer", "Actual reasoning here", "Final answer"),
    ("<|channel>thought\nLine1\nLine2<channel|>Answer", "Line1\nLine2", "Answer"),
    ("<|channel>This is a reasoning section<channel|>This is the rest", "This is a reasoning section", "This is the rest"),
    ("This is a reasoning section<channel|>This is the rest", "This is a reasoning section", "This is the rest"),
    ("<|channel>This is reasoning", "This is reasoning", None),
    ("Before\n<|channel>This is a reasoning section<channel|>\nThis is the rest", "This is a reasoning section", "Before\n\nThis is the rest"),
    ("<|channel>thought\n<channel|>", None, None),
    ("<|channel>thought\n<channel|>Hi there", None, "Hi there"),
    ("<|channel>thousand reasons<channel|>Done", "thousand reasons", "Done"),
    ("thought\nThe answer is 4.", "The answer is 4.", None),
    ("Hello! How can I help?", None, "Hello! How can I help?"),
    ("<|tool_call>", None, None),
    ("", None, None),
]


@pytest.mark.parametrize(("raw", "reasoning", "content"), SECTION_2_8)
def test_section_2_8_reasoning_vectors_match_vllm(raw, reasoning, content):
    assert split_reasoning(raw) == (reasoning, content)


def test_bare_thought_label_alone_is_empty_reasoning():
    assert split_reasoning("thought") == (None, None)
    assert NOTE_THOUGHT_LABEL in parse_text("thought").notes


def test_orphan_channel_close_after_a_call_is_only_swallowed():
    # The reasoning split applies only when `<channel|>` precedes any call (vLLM's first-delta rule).
    parsed = parse_text(call("f{}") + "Done<channel|>")
    assert parsed.reasoning is None
    assert parsed.text == "Done"
    assert NOTE_ORPHAN_CHANNEL_CLOSE in parsed.notes


def test_unclosed_channel_is_ended_by_a_tool_call():
    # REASONING -> <|tool_call> ends reasoning implicitly (§2.1).
    parsed = parse_text(f"<|channel>thought\nNeed weather.{call(f'get_weather{{location:{Q}Oslo{Q}}}')}")
    assert parsed.reasoning == "Need weather."
    assert [c.name for c in parsed.calls] == ["get_weather"]
