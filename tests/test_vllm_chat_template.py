"""The sandbox vLLM renders prompts as the pinned google/gemma-4-E2B-it revision's chat template
(git blob fbe3b59b…, the 2026-07-09 canonical template) does, and flags what renders badly
(infra/sandbox/vllm/chat_template.py). Each expected string here is what that template renders
for the history; the older vLLM example template the sandbox followed before renders differently."""

from __future__ import annotations

import json

from infra.sandbox.vllm.chat_template import render

Q = '<|"|>'
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}


def call(call_id: str, name: str, arguments: dict | str) -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str | None, *calls: dict, **extra: str) -> dict:
    message: dict = {"role": "assistant", "content": text, **extra}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def tool(call_id: str, content) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


LOOKUP = [user("what failed?"), assistant(None, call("c1", "summarize_logs", {})), tool("c1", "T1 ERROR x5")]
RESULT = f"<|tool_call>call:summarize_logs{{}}<tool_call|><|tool_response>response:summarize_logs{{value:{Q}T1 ERROR x5{Q}}}<tool_response|>"


def test_the_generation_prompt_opens_a_model_turn_with_no_empty_thought_channel():
    rendered = render({"messages": [user("Hi"), assistant("Hello there"), user("Again")]})
    assert rendered.text == ("<bos><|turn>user\nHi<turn|>\n<|turn>model\nHello there<turn|>\n"
                             "<|turn>user\nAgain<turn|>\n<|turn>model\n")
    assert render({"messages": [user("Hi")], **THINKING}).text == (
        "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n")


def test_after_tool_results_the_model_writes_on_and_with_thinking_on_in_an_open_thought_channel():
    assert render({"messages": LOOKUP}).text.endswith(f"<|turn>model\n{RESULT}")
    rendered = render({"messages": LOOKUP, **THINKING})
    assert rendered.text.endswith(f"<|turn>model\n{RESULT}<|channel>thought\n")
    assert rendered.problems == []


def test_an_assistant_answer_after_tool_results_closes_the_turn_and_a_new_one_is_asked_for():
    rendered = render({"messages": [*LOOKUP, assistant("Five timeouts."), user("And now?")]})
    assert rendered.text.endswith(f"{RESULT}Five timeouts.<turn|>\n<|turn>user\nAnd now?<turn|>\n<|turn>model\n")
    assert rendered.problems == []


def test_an_assistant_message_followed_by_another_leaves_the_turn_open_for_it():
    history = [user("what failed?"), assistant("Let me look.", call("c1", "summarize_logs", {})),
               tool("c1", "T1 ERROR x5"), assistant("Five timeouts.")]
    rendered = render({"messages": history})
    assert rendered.text.endswith(f"<|turn>model\n{RESULT}Let me look.Five timeouts.<turn|>\n<|turn>model\n")
    assert rendered.problems == []
    rendered = render({"messages": [user("q"), assistant("One."), assistant("Two.")]})
    assert rendered.text.endswith("<|turn>model\nOne.Two.<turn|>\n<|turn>model\n")


def test_null_renders_as_null_in_arguments_and_tool_results():
    history = [user("q"), assistant(None, call("c1", "provision", {"zone": None, "tags": [None, "a"]})),
               tool("c1", None)]
    rendered = render({"messages": history})
    assert f"call:provision{{tags:[null,{Q}a{Q}],zone:null}}" in rendered.text
    assert "response:provision{value:null}" in rendered.text
    assert "None" not in rendered.text and rendered.problems == []


def test_keys_are_sorted_case_insensitively_as_jinja_dictsort_does():
    history = [user("q"), assistant(None, call("c1", "provision", {"Zone": "a", "kind": {"B": 1, "a": 2}})),
               tool("c1", "ok")]
    assert "call:provision{kind:{a:2,B:1},Zone:" in render({"messages": history}).text


def test_reasoning_is_kept_after_the_last_user_message_and_before_it_only_with_preserve_thinking():
    final = render({"messages": [user("q"), assistant("The answer.", reasoning="Because.")]})
    assert final.text.endswith("<|turn>model\n<|channel>thought\nBecause.\n<channel|>The answer.<turn|>\n<|turn>model\n")
    earlier = [user("q"), assistant(None, call("c1", "summarize_logs", {}), reasoning="Plan."), tool("c1", "r"),
               assistant("Done.", reasoning_content="Fin."), user("again")]
    assert "<|channel>" not in render({"messages": earlier}).text
    kept = render({"messages": earlier, "chat_template_kwargs": {"preserve_thinking": True}}).text
    assert "<|turn>model\n<|channel>thought\nPlan.\n<channel|><|tool_call>" in kept and "Fin." not in kept


def test_media_parts_render_their_own_placeholders_in_user_turns_and_tool_results():
    parts = [{"type": "text", "text": " look "}, {"type": "image_url", "image_url": {"url": "data:,"}},
             {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
             {"type": "video_url", "video_url": {"url": "data:,"}}]
    rendered = render({"messages": [{"role": "user", "content": parts}]})
    assert rendered.text.startswith("<bos><|turn>user\nlook<|image|><|audio|><|video|><turn|>\n")
    assert rendered.media_parts == 3
    shot = [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    rendered = render({"messages": [*LOOKUP[:2], tool("c1", shot)]})
    assert rendered.text.endswith(f"response:summarize_logs{{value:{Q}see{Q}}}<tool_response|><|image|>")
    assert rendered.media_parts == 1


def test_a_tool_call_with_no_result_after_it_is_flagged():
    rendered = render({"messages": [user("q"), assistant(None, call("c1", "summarize_logs", {})), user("more")]})
    assert "<tool_call|><|tool_response><|turn>user\nmore" in rendered.text
    assert rendered.problems and "message 1 calls a tool but no tool result follows it" in rendered.problems[0]


def test_arguments_that_are_not_a_json_object_render_as_none_and_are_flagged():
    for raw in ("[1, 2]", "{not json"):
        rendered = render({"messages": [user("q"), assistant(None, call("c1", "provision", raw)), tool("c1", "ok")]})
        assert "<|tool_call>call:provision{}<tool_call|>" in rendered.text
        assert rendered.problems == ["message 1: the arguments of call `provision` are not a JSON object and render as none"]


def test_a_last_assistant_message_with_results_and_text_ends_the_prompt_after_a_closed_turn_and_is_flagged():
    history = [user("q"), assistant("Let me look.", call("c1", "summarize_logs", {})), tool("c1", "T1 ERROR x5")]
    rendered = render({"messages": history})
    assert rendered.text.endswith(f"{RESULT}Let me look.<turn|>\n")
    assert rendered.problems and "no generation prompt" in rendered.problems[0]


def test_a_tool_message_that_follows_no_call_is_dropped_and_flagged():
    rendered = render({"messages": [user("q"), tool("c9", "lost")]})
    assert "lost" not in rendered.text and rendered.text.endswith("<|turn>user\nq<turn|>\n<|turn>model\n")
    assert rendered.problems == ["message 1 (role tool) follows no tool call and is dropped"]
