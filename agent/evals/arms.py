"""The three arms an incident is put to, each answering it as the bot would:

- `agent`: the mention agent (tools, runbooks, the digest) on a given endpoint;
- `bare`: the same model with only the question and the numbered logs, no tools, no digest;
- `modelless`: the bot's answer without a model (intent rules, the digest, runbook links).
Each run gets its own channel, so no arm sees another's state.

In Slack the agent answers without the model when the model fails; here that answer is not the
model's, so the case is the agent arm's error (scored 0), never a model-less answer scored as the agent.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass

import openai

from agent.actions.run_context import RunContext
from agent.context import Actor, Services
from agent.llm.loop import run_agent
from agent.llm.material import MentionBuilder
from agent.actions.model_endpoint import ModelEndpoint, openai_client
from agent.llm.modelless import BRING_THE_MODEL_UP
from agent.llm.run import NullSink
from agent.model_config import ModelConfig
from agent.evals.cases import Incident

BARE_SYSTEM = "You are an SRE assistant. Answer briefly. Cite log lines like L12."


class Arm(str, enum.Enum):
    AGENT = "agent"
    BARE = "bare"
    MODELLESS = "modelless"


@dataclass(frozen=True)
class Answer:
    text: str
    proposed: list[str]
    seconds: float
    error: str = ""


def mention_of(incident: Incident):
    builder = MentionBuilder(incident.mention)
    builder.add("pasted text", list(incident.logs))
    return builder.build()


async def answer(arm: Arm, incident: Incident, svc: Services, *, endpoint: str, model: str,
                 channel: str, source: str | None = None) -> Answer:
    """`source`: what the endpoint is called in an error (`--endpoint`); None keeps the config's."""
    started = time.perf_counter()
    actor = Actor(user_id="UEVAL", team="T0EVAL", channel=channel)
    try:
        if arm is Arm.BARE:
            text, proposed = await _bare(incident, dataclasses.replace(svc.model, base_url=endpoint, model=model)), []
        else:
            config = dataclasses.replace(svc.model, base_url=endpoint, model=model, stream=False,
                                         enabled=arm is Arm.AGENT,
                                         base_url_source=source or svc.model.base_url_source)
            run = await run_agent(dataclasses.replace(svc, model=config), RunContext(actor, svc.redactor),
                                  mention_of(incident), NullSink())
            if arm is Arm.AGENT and not run.used_model:
                # The label says why the model did not answer (refused, timed out, HTTP 400, …).
                return Answer("", [], time.perf_counter() - started, run.label)
            # The model-less standing offer is made whatever the incident says; only proposals drawn
            # from the mention or the logs count against a case's forbidden actions.
            text, proposed = run.text, [proposal.action for proposal in run.proposals
                                        if proposal.label != BRING_THE_MODEL_UP]
    except Exception as error:  # an arm that fails scores 0 on the case; the run goes on
        return Answer("", [], time.perf_counter() - started, f"{type(error).__name__}: {error}")
    return Answer(text, proposed, time.perf_counter() - started)


async def _bare(incident: Incident, config: ModelConfig) -> str:
    """The model alone, asked through the deployment's model settings (its key: GEMMA_API_KEY)."""
    numbered = "\n".join(f"L{number}: {line}" for number, line in enumerate(incident.logs, start=1))
    async with openai_client(ModelEndpoint(config.base_url, "eval"), config) as client:
        completion = await client.chat.completions.create(
            model=config.model, max_tokens=config.max_answer_tokens, temperature=config.temperature,
            messages=[{"role": "system", "content": BARE_SYSTEM},
                      {"role": "user", "content": f"{incident.mention}\n\nLogs:\n{numbered}"}])
    return (completion.choices[0].message.content or "") if completion.choices else ""


async def endpoint_problem(endpoint: str, model: str, config: ModelConfig) -> str | None:
    """Why the arms could not talk to `model` at `endpoint`, asked once through the client they use
    (`GET …/models`); None: it answers and serves that model."""
    client = openai_client(ModelEndpoint(endpoint, "--endpoint"), dataclasses.replace(config, max_retries=0))
    url = f"{endpoint.rstrip('/')}/models"
    try:
        page = await client.models.list()
    except openai.APIConnectionError as error:
        cause = error.__cause__ or error
        detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        return f"nothing answered GET {url} ({detail}); start the model server or fix the URL"
    except openai.AuthenticationError:
        return f"GET {url} answered HTTP 401: the server wants an API key (vllm serve --api-key), which the eval does not send"
    except openai.APIStatusError as error:
        return (f"GET {url} answered HTTP {error.status_code}, not a model list: give the OpenAI-compatible "
                f"base URL vLLM serves (it ends in /v1)")
    finally:
        await client.close()
    served = [entry.id for entry in page.data]
    if model not in served:
        return f"it serves {', '.join(served) or 'no model'}, not --model {model}"
    return None
