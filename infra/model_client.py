"""The one `openai` client every caller of a Gemma endpoint uses: the mention agent, `ask_model`, `model_health`.

Built from plain values so both the agent's loop and the read-only model actions can share it
without importing each other (agent/actions/model_endpoint.py hands it the endpoint and its key).
"""

from __future__ import annotations

from openai import AsyncOpenAI, Timeout


def openai_client(base_url: str, *, api_key: str, read_timeout: float, connect_timeout: float,
                  max_retries: int) -> AsyncOpenAI:
    # openai's own Timeout: httpx's before openai 3, httpx2's since (an httpx one is converted per request)
    timeout = Timeout(read_timeout, connect=connect_timeout)
    return AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
