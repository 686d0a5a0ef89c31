"""The action registry: every internal action declared once, with a typed argument model.

Slash commands, model tool calls (and MCP tools) all end in these functions. Importing this
package registers the built-in actions.

May import `agent.lease`, `agent.digest`, the agent root and infra; never `agent.llm`.
"""

from agent.actions.registry import (  # noqa: F401
    Action,
    ActionKind,
    ActionResult,
    ActionStatus,
    REGISTRY,
    get_action,
    run_action,
)
from agent.actions import lease_actions  # noqa: F401,E402  (registers provision/teardown/status)
from agent.actions import zone_actions  # noqa: F401,E402  (registers zones)
from agent.actions import log_actions  # noqa: F401,E402  (registers summarize_logs/query_cloud_logs)
from agent.actions import admin_actions  # noqa: F401,E402  (registers audit/force_unlock)
from agent.actions import oncall_actions  # noqa: F401,E402  (registers oncall)
from agent.actions import cost_actions  # noqa: F401,E402  (registers estimate_cost)
from agent.actions import bench_actions  # noqa: F401,E402  (registers bench)
from agent.actions import workspace_actions  # noqa: F401,E402  (registers leases: the App Home list)
from agent.actions import model_actions  # noqa: F401,E402  (registers ask_model/model_health)
from agent.actions import spend_actions  # noqa: F401,E402  (registers budget/set_budget/spend/spend_chart)
from agent.actions import runbook_actions  # noqa: F401,E402  (registers search_runbooks)
