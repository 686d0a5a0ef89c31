"""`tpubot eval`: incidents with expected answers, three arms, deterministic scores (issue 31).

The top room of agent/: may import `agent.llm` (the arms run the mention agent), `actions`,
`digest`, the agent root and infra; nothing imports it but `bot/cli/eval.py`.
"""
