"""The agent's requests render well in Gemma 4's chat template (issue 24, items 6–8) and a call cut
off at max_tokens is not run. The sandbox renders every request with the pinned revision's template
(blob fbe3b59b…) and records what renders badly in `emu.prompt_problems`
(infra/sandbox/vllm/chat_template.py; tests/test_vllm_chat_template.py covers the renderer)."""

from __future__ import annotations

import json

import pytest

from infra.sandbox.vllm import DEFAULT_SERVED_VERSION
from infra.sandbox.vllm.chat_template import render
from agent.llm.prompt import model_tools
import test_agent_mentions
from test_agent_mentions import ALICE, LOGS, Q, answer, tool_messages, unscripted

# The emulator shared with test_agent_mentions, bound here by name (pytest finds a module's fixtures by name)
emu = test_agent_mentions.emu


@pytest.fixture(params=[True, False], ids=["stream", "no-stream"])
def bot(request, emu, make_bot):
    yield make_bot(poll_interval="0.2s", admins="UADMIN", gemma_base_url=unscripted(emu).base_url,
                   agent_stream=request.param)
    assert emu.pending_turns == 0, "the test left scripted turns unused"


def assistant_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "assistant"]


def test_item6_a_preamble_with_a_call_stays_in_slack_and_out_of_the_history(bot, emu):
    emu.prompt_problems.clear()
    emu.push_turns("Let me read the logs. <|tool_call>call:summarize_logs{}<tool_call|>",
                   "Five RPC timeouts, first at L8.")
    bot.mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel="C0T6")
    text = answer(bot, "C0T6").text
    assert "Let me read the logs." in text and "Five RPC timeouts, first at L8." in text
    # The first prompt (system prompt, tools, the person's DATA-fenced paste) asks for a new model
    # turn; the pinned template adds no empty thought channel to it.
    first = render(emu.requests[0]).text
    assert first.startswith("<bos><|turn>system\n") and first.endswith("<turn|>\n<|turn>model\n")
    assert "<|channel>" not in first
    second = emu.requests[1]
    assert [m["content"] for m in assistant_messages(second)] == [None]
    # The second prompt continues the model turn right after the tool response.
    assert render(second).text.endswith("<tool_response|>")
    assert emu.prompt_problems == []


def test_item7_every_parameter_the_agent_declares_shows_its_type():
    rendered = render({"messages": [{"role": "user", "content": "hi"}], "tools": model_tools()})
    assert rendered.problems == []
    declared = [(t["function"]["name"], k, p) for t in model_tools()
                for k, p in t["function"]["parameters"].get("properties", {}).items()]
    assert declared, "the agent declares parameters"
    for tool, key, prop in declared:
        assert isinstance(prop.get("type"), str) and "anyOf" not in prop, (tool, key, prop)
        assert f'{key}:{{' in rendered.text and f'type:{Q}{prop["type"].upper()}{Q}' in rendered.text
    # What the template would drop is said in the description instead.
    hours = next(p for t, k, p in declared if t == "query_cloud_logs" and k == "hours")
    assert "at most 168" in hours["description"] and "default 1.0" in hours["description"]
    zone = next(p for t, k, p in declared if t == "provision" and k == "zone")
    assert zone["nullable"] is True and zone["type"] == "string"


def test_item8_null_arguments_are_not_echoed_as_python_none(bot, emu):
    emu.prompt_problems.clear()
    emu.push_turns("<|tool_call>call:summarize_logs{max_tokens:null}<tool_call|>", "Five RPC timeouts from L8.")
    bot.mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel="C0T8")
    answer(bot, "C0T8")
    call = assistant_messages(emu.requests[1])[0]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {}
    assert "None" not in render(emu.requests[1]).text.split("<|tool_call>")[1].split("<tool_call|>")[0]
    assert emu.prompt_problems == []


@pytest.mark.parametrize("served_version", ["0.32.0", "0.33.0"])
def test_a_call_cut_off_at_max_tokens_is_not_run_and_the_model_is_told(bot, emu, served_version):
    # The model writes a call longer than the agent's max_tokens (1024): the engine stops at the
    # limit. 0.33.0 says finish_reason "length"; 0.32.0 (the TPU image) says "tool_calls" when not
    # streaming, with arguments its parser closed; both report completion_tokens == max_tokens.
    emu.served_version = served_version
    try:
        emu.push_turns(f"<|tool_call>call:summarize_logs{{contains:{Q}" + "DEAD " * 1500 + f"{Q}}}<tool_call|>",
                       "The logs show RPC timeouts from L8.")
        bot.mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel="C0TL")
        text = answer(bot, "C0TL").text
    finally:
        emu.served_version = DEFAULT_SERVED_VERSION
    assert emu.requests[0]["max_tokens"] == 1024
    result = tool_messages(emu.requests[1])[0]["content"]
    assert result.startswith("Not run: this `summarize_logs` call was cut off")
    assert "tools: summarize_logs" not in text  # nothing ran


def test_the_last_step_is_told_to_answer_inside_the_tool_results_not_in_a_user_turn(bot, emu):
    # Three steps of tool calls (AGENT_MAX_STEPS is 4), then the fourth, without tools, answers.
    emu.prompt_problems.clear()
    emu.push_turns(*["<|tool_call>call:summarize_logs{}<tool_call|>"] * 3, "Five RPC timeouts, first at L8.")
    bot.mention(f"<@UTPUBOT> what failed?\n{LOGS}", user=ALICE, channel="C0TS")
    assert "Five RPC timeouts, first at L8." in answer(bot, "C0TS").text
    last = emu.requests[3]
    assert "tools" not in last and last["messages"][-1]["role"] == "tool"
    assert last["messages"][-1]["content"].endswith("answer now from what you have, with no more tool calls.")
    assert [m["role"] for m in last["messages"]].count("user") == 1  # the person's mention only
    assert render(last).text.endswith("<tool_response|>")
    assert emu.prompt_problems == []


def test_a_user_turn_after_tool_results_closes_the_model_turn_first():
    # The pinned template closes a model turn that ends in tool results before a user message;
    # vLLM's older example template left it open and the user turn began inside it.
    history = [{"role": "user", "content": "what failed?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "summarize_logs", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "name": "summarize_logs", "content": "T1 ERROR x5"}]
    assert render({"messages": history}).problems == []
    rendered = render({"messages": [*history, {"role": "user", "content": "Answer now."}]})
    assert rendered.problems == []
    assert rendered.text.endswith(f"{{value:{Q}T1 ERROR x5{Q}}}<tool_response|><turn|>\n"
                                  "<|turn>user\nAnswer now.<turn|>\n<|turn>model\n")
