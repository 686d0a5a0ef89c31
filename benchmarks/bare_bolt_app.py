"""The baseline for benchmarks/ack_latency.py: a bolt AsyncApp that only acks, on the same
ASGI stack (Starlette + uvicorn) and in the same bolt mode (process_before_response, see
handlers/slack_app.py) as `tpubot serve`. Usage: python bare_bolt_app.py PORT SECRET"""

import re
import sys

import uvicorn
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route


def main() -> None:
    port, secret = int(sys.argv[1]), sys.argv[2]

    async def authorize(**kwargs) -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T0BENCH", bot_token="xoxb-bare", bot_id="B0", bot_user_id="U0")

    app = AsyncApp(signing_secret=secret, authorize=authorize, process_before_response=True)

    @app.command("/tpu")
    async def ack_command(ack) -> None:
        await ack(text="ok", response_type="ephemeral")

    @app.event("app_mention")
    async def ack_mention() -> None:
        return None

    @app.action(re.compile(".*"))
    async def ack_click(ack) -> None:
        await ack()

    handler = AsyncSlackRequestHandler(app)

    async def events(request: Request):
        return await handler.handle(request)

    uvicorn.run(Starlette(routes=[Route("/slack/events", events, methods=["POST"])]),
                host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
