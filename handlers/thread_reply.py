"""The reply in the mention's thread: a status line at once, then the answer streamed with
chat.startStream/appendStream/stopStream, or — where the workspace does not stream — the status
line edited into the answer with throttled chat.update (Tier 3: ~50/min per workspace).

Every piece of text is redacted and mrkdwn-escaped before it is sent, and a piece is sent only
up to a word boundary, so a secret is never half-sent before the redaction can see all of it.
If redaction changes text that was already streamed (it can, once a multi-line secret ends),
the rest is held and the finished message is rewritten in one chat.update. The redactor is the
agent run's (agent/actions/model_endpoint.py): it knows the deployment's secret values and the live
lease keys, so a model that echoes one, or a model-less answer quoting a tool, posts a marker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent.redact import Redactor
from agent.llm.run import AgentRun
from handlers.cards import escape

log = logging.getLogger(__name__)

STATUS_TEXT = ":hourglass_flowing_sand: Reading your message…"
MARKDOWN_LIMIT = 12_000  # markdown_text per streaming call
ANSWER_LIMIT = 11_000
APPEND_INTERVAL = 0.4  # seconds between appendStream calls (Tier 4)
UPDATE_INTERVAL = 2.0  # seconds between chat.update calls on one message (Tier 3)


def answer_text(run: AgentRun, redactor: Redactor | None = None) -> str:
    body = escape((redactor or Redactor())(run.text))
    if len(body) > ANSWER_LIMIT:
        body = body[: ANSWER_LIMIT - 1] + "…"
    return f"{body}\n\n_{escape(run.label)}_"


class ThreadReply:
    def __init__(self, client: AsyncWebClient, *, channel: str, thread_ts: str, team: str, user: str,
                 status_ts: str = "", clock: Callable[[], float] = time.monotonic,
                 redactor: Redactor | None = None) -> None:
        self._client = client
        self.redactor = redactor or Redactor()  # answer_mention sets the run's once it is built
        self.channel, self.thread_ts, self.team, self.user = channel, thread_ts, team, user
        self.status_ts = status_ts
        self._clock = clock
        self.mode = "undecided"  # -> "stream" | "update"
        self.stream_ts = ""
        self._sent = ""  # text already visible in the answer
        self._diverged = False
        self._last_flush = 0.0

    async def post_status(self) -> None:
        if not self.status_ts:
            response = await self._client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts,
                                                           text=STATUS_TEXT, unfurl_links=False, unfurl_media=False)
            self.status_ts = response["ts"]

    # --- ReplySink --------------------------------------------------------------------------
    async def progress(self, note: str) -> None:
        if self.mode == "update" and self._sent:
            return  # the status line already shows the answer
        await self._update_status(f":hourglass_flowing_sand: {escape(note)}")

    async def partial(self, text: str) -> bool:
        safe = escape(self.redactor(text))
        cut = max(safe.rfind(" "), safe.rfind("\n"))
        ready = safe[: cut + 1] if cut >= 0 else ""
        if not ready.startswith(self._sent):
            self._diverged = True
            return True
        delta = ready[len(self._sent):]
        if not delta.strip() or self._diverged:
            return True
        now = self._clock()
        interval = UPDATE_INTERVAL if self.mode == "update" else APPEND_INTERVAL
        if self._sent and now - self._last_flush < interval:
            return True  # the next call offers the whole text again
        self._last_flush = now
        if self.mode == "undecided":
            await self._start_stream(delta)
            if self.mode == "stream":
                self._sent = ready
                return True
        if self.mode == "stream":
            return await self._append(ready, delta)
        await self._update_status(ready + "…")
        self._sent = ready
        return True

    # --- the end ----------------------------------------------------------------------------
    async def finish(self, run: AgentRun) -> None:
        final = answer_text(run, self.redactor)
        if self.mode != "stream":
            await self._update_status(final)
            return
        remainder = final[len(self._sent):] if final.startswith(self._sent) and not self._diverged else None
        try:
            if remainder is None:
                await self._client.chat_stopStream(channel=self.channel, ts=self.stream_ts)
                await self._client.chat_update(channel=self.channel, ts=self.stream_ts, text=final)
            else:
                while len(remainder) > MARKDOWN_LIMIT:
                    await self._client.chat_appendStream(channel=self.channel, ts=self.stream_ts,
                                                         markdown_text=remainder[:MARKDOWN_LIMIT])
                    remainder = remainder[MARKDOWN_LIMIT:]
                await self._client.chat_stopStream(channel=self.channel, ts=self.stream_ts,
                                                   markdown_text=remainder or None)
        except SlackApiError as error:
            # The stream expired or was stopped: the finished text goes in as an edit.
            log.warning("stopping the stream failed: %s", error.response.get("error"))
            await self._client.chat_update(channel=self.channel, ts=self.stream_ts, text=final)
        if self.status_ts:
            try:
                await self._client.chat_delete(channel=self.channel, ts=self.status_ts)
            except SlackApiError:
                await self._update_status(":white_check_mark: Answered below.")

    async def fail(self, text: str) -> None:
        text = self.redactor(text)
        if self.mode == "stream":
            try:
                await self._client.chat_stopStream(channel=self.channel, ts=self.stream_ts,
                                                   markdown_text=f"\n\n{escape(text)}")
                return
            except SlackApiError:
                pass
        await self._update_status(escape(text))

    # --- Slack calls ------------------------------------------------------------------------
    async def _start_stream(self, first: str) -> None:
        try:
            response = await self._client.chat_startStream(
                channel=self.channel, thread_ts=self.thread_ts, markdown_text=first,
                recipient_user_id=self.user, recipient_team_id=self.team,
            )
        except SlackApiError as error:
            log.info("streaming unavailable (%s); editing the status line instead", error.response.get("error"))
            self.mode = "update"
            return
        self.mode = "stream"
        self.stream_ts = response["ts"]
        await self._update_status(":hourglass_flowing_sand: Answering below…")

    async def _append(self, ready: str, delta: str) -> bool:
        try:
            await self._client.chat_appendStream(channel=self.channel, ts=self.stream_ts, markdown_text=delta)
        except SlackApiError as error:
            if error.response.get("error") == "stopped_by_user":
                return False
            self._diverged = True  # hold the rest; finish() rewrites the message
            return True
        self._sent = ready
        return True

    async def _update_status(self, text: str) -> None:
        if not self.status_ts:
            return
        try:
            await self._client.chat_update(channel=self.channel, ts=self.status_ts, text=text)
        except SlackApiError as error:
            log.warning("chat.update of the status line failed: %s", error.response.get("error"))
