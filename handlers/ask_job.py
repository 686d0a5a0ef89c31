"""`/tpu ask …`: the worker side. The slash command is answered at once ("Asking…"); the model's
answer can take longer than Slack's 3-second window, so it runs here, as a queued job that a
restart does not lose, and comes back to the asker through the command's `response_url`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slack_sdk.webhook.async_client import AsyncWebhookClient

from agent.actions import ActionStatus, model_actions, run_action
from agent.context import Actor, Services
from infra.jobs import JobOutcome, JobSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AskJob:
    team: str
    channel: str
    user_id: str
    prompt: str
    response_url: str  # the slash command's, where the answer goes
    max_tokens: int = 256


ASK_JOB = JobSpec("answer_ask", AskJob)


def ask_job_id(team: str, channel: str, trigger_id: str) -> str:
    # One answer per slash invocation: a redelivered command queues nothing new.
    return f"ask:{team}:{channel}:{trigger_id}"


async def answer_ask(svc: Services, job: AskJob) -> JobOutcome:
    actor = Actor(user_id=job.user_id, team=job.team, channel=job.channel)
    result = await run_action(model_actions.ask_model, svc, actor, {"prompt": job.prompt, "max_tokens": job.max_tokens})
    icon = {ActionStatus.DONE: ":robot_face:", ActionStatus.DENIED: ":no_entry:"}.get(result.status, ":warning:")
    response = await AsyncWebhookClient(job.response_url).send(
        text=f"{icon} {result.text}", response_type="ephemeral", replace_original=False)
    if response.status_code != 200:
        log.warning("posting the /tpu ask answer failed: HTTP %s", response.status_code)
        return JobOutcome.failed("undelivered", bare=True)
    return JobOutcome.ok() if result.ok else JobOutcome.refused()
