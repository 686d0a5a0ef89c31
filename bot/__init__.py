"""The composition root: Settings, wiring of clients, the processes (serve, worker, socket, shell,
sandbox, mcp) and the `tpubot` CLI in `bot/cli/`. No business rules live here.

May import handlers, agent and infra; nothing imports bot.
"""
