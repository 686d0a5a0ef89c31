"""Each runbook claim issue 41 corrected, held by its symptom: a line as the real system prints
it (the source is named beside it) is matched by the right section and by no section that used to
claim it, the search finds that section from the line alone, and the section says the corrected
fact (not the old one)."""

from __future__ import annotations

import pytest

from infra.runbooks.index import RunbookIndex
from infra.runbooks.library import RunbookLibrary

INDEX: RunbookIndex = RunbookLibrary(folders=[RunbookLibrary.from_settings().folders[0]]).index()

FLEX_ZONES = "RB:tpu-flex-start#flex-start-not-offered-for-this-accelerator-in-this-zone"
DEADLINE = "RB:tpu-flex-start#run-duration-reached-and-the-queued-resource-is-suspended"
EARLY = "RB:tpu-flex-start#queued-resource-suspended-before-its-run-duration-ended"
QUOTA = "RB:tpu-quota#tpu-quota-exhausted"
STOCKOUT = "RB:tpu-quota#zone-out-of-tpu-capacity"
REFUSED = "RB:gemma4-serving#tool-calls-refused-server-started-without-auto-tool-choice"
AS_TEXT = "RB:gemma4-serving#tool-calls-come-back-as-plain-text"
FLOAT16 = "RB:gemma4-serving#empty-answers-from-a-model-run-in-float16"
TEMPLATE = "RB:gemma4-serving#chat-template-raises-templateerror"
STRUCTURED = "RB:gemma4-serving#structured-output-request-refused"
MM_TOKENS = "RB:vllm-tpu#max-num-batched-tokens-below-a-multimodal-item"
SMEM = "RB:vllm-tpu#xla-compile-ran-out-of-smem-or-vmem"
HBM_COMPILE = "RB:vllm-tpu#xla-compile-ran-out-of-hbm"
RECOMPILE = "RB:vllm-tpu#recompilation-after-warm-up"
GATED = "RB:vllm-tpu#model-weights-refused-by-hugging-face"
FINE_GRAINED = "RB:vllm-tpu#fine-grained-hugging-face-token-without-gated-access"
READONLY = "RB:redis#failover-writes-reach-a-read-only-replica"
LOADING = "RB:redis#restarted-redis-still-loading-its-data"
OOM = "RB:redis#redis-out-of-memory"
API_DEADLINE = "RB:tpu-quota#google-cloud-api-call-timed-out"


def section(cite: str):
    found = INDEX.by_cite(cite)
    assert found is not None, cite
    return found


def matching(line: str) -> set[str]:
    return {s.cite for s, _ in INDEX.matching([(1, line)])}


def searched(line: str) -> list[str]:
    return [hit.section.cite for hit in INDEX.search(line, limit=3)]


# (the line as printed, its source, the section that must match it)
REAL_LINES = [
    # the TPU API's per-zone serving quota, as gcloud printed it (github.com/sayouzone, a public setup log;
    # the quota's per-zone form: cloud.google.com/tpu/docs/quota, marin-community/marin#6198)
    ('"message": "Quota limit \'TPUV5sLitepodServingPerProjectPerZoneForTPUAPI\' has been exceeded. '
     'Limit: 4 in zone us-east5-a.",', QUOTA),
    # the comma-joined form issue 41 names
    ("Quota limit 'TPUV5sPreemptibleLitepodServingPerProjectPerZoneForTPUAPI,TPUV5sPreemptibleLitepodPerProjectPer"
     "RegionForTPUAPI' has been exceeded. Limit: 0 in region us-central1.", QUOTA),
    # skypilot-org/skypilot#4579 (no reservation was used)
    ("W 01-16 17:42:36 instance_utils.py:112] Got return code 8 in us-central1-a: 'Insufficient reserved capacity. "
     "Contact customer support to increase your reservation. [EID: 0x7adf6d58c08b0aa4]'", STOCKOUT),
    # vLLM's refusal, as an OpenAI client prints it (ogx-ai/ogx#1185; vllm/renderers/online_renderer.py)
    ("E   openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': '\"auto\" tool choice requires "
     "--enable-auto-tool-choice and --tool-call-parser to be set', 'type': 'BadRequestError', 'param': None, "
     "'code': 400}", REFUSED),
    # vllm-project/vllm#14817's cause, the engine config line (vLLM's LLMEngine start-up line)
    ("INFO 03-14 10:02:11 [core.py:60] Initializing a V1 LLM engine (v0.8.0) with config: "
     "model='google/gemma-3-4b-it', dtype=torch.float16, max_seq_len=8192", FLOAT16),
    # vllm/v1/core/encoder_cache_manager.py, with an explicit 2048
    ("ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger than "
     "max_num_batched_tokens (2048). Please increase max_num_batched_tokens.", MM_TOKENS),
    # vllm-project/vllm#8318 (v5e, --max-model-len 16384)
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory "
     "in memory space smem. Used 1.00M of 1.00M smem. Exceeded smem capacity by 1.7K.", SMEM),
    # pytorch/xla#9524
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory "
     "in memory space vmem. Used 32.42M of 16.00M vmem. Exceeded vmem capacity by 16.42M", SMEM),
    # huggingface_hub/utils/_http.py's 403 for a fine-grained token without gated access
    ("huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: Please enable access to public gated repositories in "
     "your fine-grained token settings to view this repository.", FINE_GRAINED),
    # transformers' raise_exception from an older Gemma template (FasterDecoding/Medusa#102)
    ("jinja2.exceptions.TemplateError: Conversation roles must alternate user/assistant/user/assistant/...",
     TEMPLATE),
    # redis-py drops the reply's prefix (redis/_parsers/base.py)
    ("redis.exceptions.ReadOnlyError: You can't write against a read only replica.", READONLY),
    ("redis.exceptions.BusyLoadingError: Redis is loading the dataset in memory", LOADING),
    ("redis.exceptions.OutOfMemoryError: command not allowed when used memory > 'maxmemory'.", OOM),
    # vLLM's TPU runner (vllm-project/vllm#14710) and tpu-inference's ForbidCompile
    ("AssertionError: Recompilation after warm up is detected during the sampler. num_xla_graphs = 12 "
     "curr_cached_graph = 13", RECOMPILE),
    ("RuntimeError: JAX compilation occurred but was forbidden in this context.", RECOMPILE),
    # vllm/v1/structured_output/backend_xgrammar.py (vllm-project/vllm#16321)
    ("openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': 'The provided JSON schema contains "
     "features not supported by xgrammar.', 'type': 'BadRequestError', 'param': None, 'code': 400}", STRUCTURED),
    # the bot's own lines for the two kinds of suspension (agent/lease/expiry.py)
    ("lease 91ab: qr-c03infer-91ab SUSPENDED, suspended by Google Cloud at 07:02:10 UTC, 6 h 57 min before its "
     "deadline (stateInitiator SERVICE)", EARLY),
    ("lease 91ab reached its deadline 2026-11-04T14:00:00Z (runDuration 28800s)", DEADLINE),
    # a call past its deadline, as google-api-core raises it (oppia/oppia#22814), and its retry giving up in
    # the older wording (googleapis/python-datastore#432; retry/retry_base.py now says "Timeout of")
    ("google.api_core.exceptions.DeadlineExceeded: 504 Deadline Exceeded", API_DEADLINE),
    ("google.api_core.exceptions.RetryError: Deadline of 60.0s exceeded while calling target function, last "
     "exception: 504 Deadline Exceeded", API_DEADLINE),
]


@pytest.mark.parametrize("line, cite", REAL_LINES, ids=[cite.split("#")[1] + f"-{n}" for n, (_, cite) in
                                                       enumerate(REAL_LINES)])
def test_a_real_line_is_matched_and_found_by_its_section(line: str, cite: str):
    assert cite in matching(line), sorted(matching(line))
    assert cite in searched(line), searched(line)


def test_flex_start_names_the_serving_zone_for_a_serving_shape():
    text = section(FLEX_ZONES).cause + section(FLEX_ZONES).fix
    assert "us-central1-a" in text and "serving" in text and "us-west4-a" in text and "training" in text


def test_v5e_serving_quota_is_per_zone_and_the_fix_tries_another_zone_of_the_same_region():
    quota = section(QUOTA)
    assert "per zone" in quota.cause and "per-project, per-region" not in quota.cause
    assert "another zone, the same region included" in quota.fix


def test_insufficient_reserved_capacity_is_a_stockout_not_a_reservation_only_message():
    stockout = section(STOCKOUT)
    assert "the same for a reservation" not in " ".join(stockout.symptoms)
    assert "no reservation" in " ".join(stockout.symptoms) + stockout.cause


def test_a_parser_without_auto_tool_choice_is_refused_not_answered_as_text():
    refused, as_text = section(REFUSED), section(AS_TEXT)
    assert "with a parser but no auto tool choice, the call can come back as plain text" not in refused.cause
    assert "whichever of the two flags is missing" in refused.cause
    assert 'tool_choice: "none"' in as_text.cause and "parser missed" in as_text.cause
    line = ('{"object":"error","message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and '
            '--tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}')
    assert REFUSED in matching(line) and AS_TEXT not in matching(line)


def test_empty_answers_are_blamed_on_float16_and_a_healthy_completions_line_matches_nothing():
    float16 = section(FLOAT16)
    assert "#14817" in float16.cause and "float16" in float16.cause and "chat template" not in float16.title.lower()
    healthy = 'INFO:     10.128.0.2:50412 - "POST /v1/completions HTTP/1.1" 200 OK'
    assert matching(healthy) == set()
    served = ('{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" San Francisco is a city",'
              '"finish_reason":"length"}]}')
    assert matching(served) == set()


def test_leaving_the_batched_tokens_flag_out_is_not_offered_as_a_fix():
    # vllm-tpu 0.32.0 (the PyPI sdist): get_batch_defaults picks 512 only when the platform's
    # device name is "V5E", tpu-inference 0.32.0 returns f"TPU {chip.name}" ("TPU V5E", tpu-info
    # 0.7.1), and its get_device_total_memory raises, so an unset value is the generic 2048; the
    # lift to the largest item (vllm#43051) needs is_mm_prefix_lm. A v5e-1 boot without the flag
    # failed with "(2496) is larger than max_num_batched_tokens (2048)".
    mm = section(MM_TOKENS)
    assert "or leave the flag out" not in mm.fix and "do not leave the flag out" in mm.fix
    assert "by itself" not in mm.cause and "the unset default is 2,048" in mm.cause
    line = ("(EngineCore pid=2187) ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger "
            "than max_num_batched_tokens (2048). Please increase max_num_batched_tokens.")
    assert matching(line) == {MM_TOKENS}


def test_a_suspension_before_the_deadline_is_not_read_as_the_deadline():
    early = ("lease 91ab: qr-c03infer-91ab SUSPENDED, suspended by Google Cloud at 07:02:10 UTC, 6 h 57 min "
             "before its deadline (stateInitiator SERVICE)")
    assert DEADLINE not in matching(early)
    assert "Expect this at the lease's deadline" not in section(DEADLINE).fix
    assert "USER" in section(EARLY).cause and "SERVICE" in section(EARLY).cause
    user = "  stateInitiator: USER"
    assert matching(user) == {EARLY}


def test_a_fine_grained_token_is_not_told_to_accept_the_licence_again():
    line = ("huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: Please enable access to public gated "
            "repositories in your fine-grained token settings to view this repository.")
    assert GATED not in matching(line)
    fine = section(FINE_GRAINED)
    assert "accepting the licence again changes nothing" in fine.cause and "gated repositories" in fine.fix


def test_an_hbm_compile_error_is_not_taken_for_an_smem_one():
    hbm = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
           "memory in memory space hbm. Used 17.23G of 15.75G hbm. Exceeded hbm capacity by 1.48G.")
    assert HBM_COMPILE in matching(hbm) and SMEM not in matching(hbm)


def test_a_name_quoted_in_a_symptoms_description_is_not_a_pattern():
    from infra.runbooks.sections import parse_runbook

    parsed = parse_runbook("x", "# X\n\n## Loading\n**Symptoms**\n- `Redis is loading the dataset` — redis-py drops the "
                                "`LOADING` prefix\n**Cause**\nc\n**Fix**\nf\n**Sources**\n- https://e.org\n", "x.md")
    [only] = parsed.sections
    assert [p.pattern for p in only.patterns] == ["Redis is loading the dataset"]
    assert not only.matches("tpubot-startup: phase: loading-weights")


def test_a_call_past_its_deadline_is_not_read_as_the_flex_start_deadline():
    """`/tpu runbook DEADLINE_EXCEEDED` is a Google API call timing out: its section comes first, not
    the flex-start run-duration ones that share the word (they still answer "deadline")."""
    assert searched("DEADLINE_EXCEEDED")[0] == API_DEADLINE
    assert DEADLINE in searched("deadline")
    flex_start_end = "lease 91ab reached its deadline 2026-11-04T14:00:00Z (runDuration 28800s)"
    assert API_DEADLINE not in matching(flex_start_end)
