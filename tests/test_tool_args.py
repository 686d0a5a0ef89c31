"""Argument coercion against typed action models, with errors written for the model."""

from __future__ import annotations

import json
from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent.llm.gemma4_syntax import extract_tool_calls
from agent.llm.tool_args import ToolArgumentError, coerce_arguments, describe_fields


class SetStatus(BaseModel):
    is_active: bool
    count: int
    score: float = 0.0


class Opts(BaseModel):
    mode: Literal["fast", "slow"]
    n: int


class Unknown(BaseModel):
    """Typed version of §2.5 rows 5 and 7's `unknown_tool`."""

    count: int | None = None
    flag: bool | None = None
    ratio: float | None = None
    none: str | None = "default"
    opts: Opts | None = None
    ids: list[int] = []


class Search(BaseModel):
    query: str
    tags: list[str] = []
    limit: int = 10


class Zone(str, Enum):
    A = "us-central1-a"
    B = "europe-west4-b"


class Provision(BaseModel):
    zone: Zone
    dry_run: bool = False


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: str


def test_row_5_untyped_strings_are_coerced_through_the_model():
    # vLLM 0.33 returns untyped bare values as strings (§2.5 row 5, #47906).
    args = coerce_arguments(Unknown, '{"count": "42", "flag": "true", "ratio": "0.5", "none": "null"}')
    assert (args.count, args.flag, args.ratio, args.none) == (42, True, 0.5, None)


def test_row_7_nested_object_and_array_strings_are_coerced():
    args = coerce_arguments(Unknown, '{"opts": {"mode": "fast", "n": "3"}, "ids": ["1", "2"]}')
    assert args.opts == Opts(mode="fast", n=3)
    assert args.ids == [1, 2]


def test_row_4_typed_values_pass_through():
    args = coerce_arguments(SetStatus, '{"is_active": true, "count": 42, "score": 3.14}')
    assert args == SetStatus(is_active=True, count=42, score=3.14)


def test_row_15_plain_quotes_are_stripped_from_strings_and_list_items():
    # #51284: vLLM keeps the model's plain quotes inside the string values.
    args = coerce_arguments(Search, '{"tags": ["\\"a\\"", "\\"b\\""], "query": "\\"x\\""}')
    assert args.query == "x"
    assert args.tags == ["a", "b"]


def test_single_plain_quotes_are_stripped():
    assert coerce_arguments(Search, {"query": "'disk usage'"}).query == "disk usage"


def test_only_one_matching_layer_of_quotes_is_stripped():
    assert coerce_arguments(Search, {"query": '"a" and "b"'}).query == '"a" and "b"'
    assert coerce_arguments(Search, {"query": "'it\"s"}).query == "'it\"s"


def test_apostrophe_inside_single_quotes_is_content():
    assert coerce_arguments(Search, {"query": "'it's down'"}).query == "it's down"


def test_quotes_are_stripped_before_enum_and_literal_validation():
    assert coerce_arguments(Provision, {"zone": '"us-central1-a"'}).zone is Zone.A
    assert coerce_arguments(Opts, {"mode": "'slow'", "n": 1}).mode == "slow"


def test_bare_number_for_a_string_field_is_kept_as_written():
    # Our own parser types `location:12345`; a declared string keeps it as text (§2.2).
    calls, _ = extract_tool_calls("<|tool_call>call:search{query:12345,limit:3}<tool_call|>")
    args = coerce_arguments(Search, calls[0].arguments)
    assert (args.query, args.limit) == ("12345", 3)


def test_dict_input_from_our_parser_and_json_string_from_vllm_agree():
    calls, _ = extract_tool_calls('<|tool_call>call:search{tags:["a","b"],query:"x"}<tool_call|>')
    from_parser = coerce_arguments(Search, calls[0].arguments)
    from_vllm = coerce_arguments(Search, json.dumps({"tags": ['"a"', '"b"'], "query": '"x"'}))
    assert from_parser == from_vllm == Search(query="x", tags=["a", "b"])


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("False", False), ('"true"', True), (" TRUE ", True)])
def test_boolean_strings_true_false_are_accepted(raw, expected):
    assert coerce_arguments(SetStatus, {"is_active": raw, "count": 1}).is_active is expected


@pytest.mark.parametrize("raw", ["yes", "2", 2, "on", "y"])
def test_other_boolean_spellings_are_rejected_deliberately(raw):
    # pydantic lax mode would accept these; a 2B model sending them is more likely confused.
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(SetStatus, {"is_active": raw, "count": 1}, tool_name="set_status")
    assert '"is_active" must be a boolean, true or false' in str(err.value)


def test_boolean_for_an_integer_field_is_rejected():
    # Lax pydantic would turn true into 1.
    with pytest.raises(ToolArgumentError, match='"count" must be an integer, not a boolean'):
        coerce_arguments(SetStatus, {"is_active": True, "count": True})


@pytest.mark.parametrize(("raw", "expected"), [("42", 42), (" -7 ", -7), ('"5"', 5)])
def test_integer_strings_are_coerced(raw, expected):
    assert coerce_arguments(SetStatus, {"is_active": True, "count": raw}).count == expected


def test_non_integer_for_int_field_names_field_type_and_value():
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(Search, '{"query": "x", "limit": "ten"}', tool_name="search")
    message = str(err.value)
    assert '"limit": expected integer, got "ten"' in message
    assert message.startswith("Invalid arguments for tool `search`:")
    assert "Call `search` again" in message


def test_wrong_type_in_list_item_names_the_index():
    with pytest.raises(ToolArgumentError, match=r'"ids\[1\]": expected integer, got "x"'):
        coerce_arguments(Unknown, {"ids": ["1", "x"]})


def test_wrong_type_in_nested_model_names_the_path():
    with pytest.raises(ToolArgumentError, match=r'"opts\.mode": expected one of "fast", "slow", got "turbo"'):
        coerce_arguments(Unknown, {"opts": {"mode": "turbo", "n": 1}})


def test_invalid_json_string_is_an_error_for_the_model():
    # e.g. leaked `<|"|>` fragments in streamed arguments on old vLLM (#38946).
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(Search, '{"query": "Buy milk<|', tool_name="search")
    assert "not valid JSON" in str(err.value)
    assert "query (string, required)" in str(err.value)


def test_json_that_is_not_an_object_is_rejected():
    with pytest.raises(ToolArgumentError, match="must be a JSON object"):
        coerce_arguments(Search, '["x"]')


@pytest.mark.parametrize("raw", ["", "   ", None, "{}"])
def test_empty_arguments_mean_no_arguments(raw):
    assert coerce_arguments(Unknown, raw) == Unknown()


def test_missing_required_field_is_named_with_its_type():
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(Search, "{}", tool_name="search")
    assert err.value.problems == ['"query" is required (string) but was not given.']


def test_unknown_key_is_an_error_with_a_suggestion():
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(Provision, {"zone": "us-central1-a", "dryrun": True}, tool_name="provision")
    assert err.value.problems == ['"dryrun" is not a field of this tool. Did you mean "dry_run"?']
    assert "Accepted fields: zone (one of" in str(err.value)


def test_unknown_key_is_dropped_when_the_model_opts_in():
    assert coerce_arguments(Lenient, {"query": "x", "extra": 1}) == Lenient(query="x")


def test_null_for_defaulted_non_optional_field_uses_the_default():
    assert coerce_arguments(Search, {"query": "x", "limit": "null"}).limit == 10
    assert coerce_arguments(Search, {"query": "x", "limit": None}).limit == 10


def test_null_for_required_field_is_an_error():
    with pytest.raises(ToolArgumentError, match='"query" is required and cannot be null'):
        coerce_arguments(Search, {"query": None})


def test_all_problems_are_reported_at_once():
    with pytest.raises(ToolArgumentError) as err:
        coerce_arguments(SetStatus, {"is_active": "maybe", "count": "x", "colour": "red"})
    assert len(err.value.problems) == 3


def test_alias_is_accepted_and_listed():
    class Aliased(BaseModel):
        zone_name: str = Field(alias="zone")

    assert coerce_arguments(Aliased, {"zone": "a"}).zone_name == "a"
    assert describe_fields(Aliased) == "zone (string, required)"


def test_untyped_array_string_is_parsed_for_list_fields():
    assert coerce_arguments(Search, {"query": "x", "tags": '["prod", "db"]'}).tags == ["prod", "db"]


class Typed(BaseModel):
    i: int = 0
    n: float = 0.0
    b: bool = False
    s: str = ""
    maybe_n: float | None = None


TYPED_SCHEMA = {"i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"},
                "s": {"type": "string"}, "maybe_n": {"type": "number", "nullable": True}}


@pytest.mark.parametrize(("key", "bare"), [
    ("i", "4.0"), ("i", "1e3"), ("i", "42"), ("n", "1e3"), ("n", "2.0"), ("n", "3.5"), ("b", "1"), ("b", "0"),
    ("b", "true"), ("s", "12345"), ("maybe_n", "null"), ("maybe_n", "2"),
])
def test_a_value_means_the_same_whether_or_not_the_server_typed_it(key, bare):
    """vLLM types a bare value by the declared schema; an untyped schema (or our raw-text parser)
    delivers the same text as a string. Both must give the same argument."""
    from infra.sandbox.vllm.gemma_args import coerce_args

    typed_by_server = coerce_args({key: bare}, TYPED_SCHEMA)
    assert coerce_arguments(Typed, json.dumps(typed_by_server)) == coerce_arguments(Typed, json.dumps({key: bare}))


@pytest.mark.parametrize(("key", "bare"), [("i", "4.5"), ("i", "inf"), ("b", "yes")])
def test_a_value_neither_path_can_use_is_rejected_both_ways(key, bare):
    from infra.sandbox.vllm.gemma_args import coerce_args

    for raw in (coerce_args({key: bare}, TYPED_SCHEMA), {key: bare}):
        with pytest.raises(ToolArgumentError):
            coerce_arguments(Typed, json.dumps(raw))


@pytest.mark.parametrize("hours, said", [("0.0000001", "shorter than the shortest lease"),
                                         ("0.1", "shorter than the shortest lease, 10m"),
                                         ("999999999999", "longer than the longest lease, 7d"),
                                         ("nan", "longer than the longest lease, 7d")])
def test_the_models_provision_hours_meet_the_same_bounds_as_tpu_up(hours, said):
    # The model's tool call: coerced from Gemma's syntax, then validated with the deployment's policy
    # (agent/llm/loop.py), as /tpu up's arguments are. A sub-second lease was once priced $0.
    from pydantic import ValidationError

    from agent.actions.lease_actions import ProvisionArgs
    from agent.policy import Policy

    (call,), _ = extract_tool_calls(f"<|tool_call>call:provision{{hours:{hours}}}<tool_call|>")
    with pytest.raises((ToolArgumentError, ValidationError)) as refused:
        args = coerce_arguments(ProvisionArgs, call.arguments, tool_name="provision")
        ProvisionArgs.model_validate(args.model_dump(), context={"policy": Policy()})
    assert said in str(refused.value)
