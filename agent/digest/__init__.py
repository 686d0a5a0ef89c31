"""Log digest: a large incident log cut down to a ranked, citable, token-budgeted summary.

    from agent.digest import build_digest
    digest = build_digest(lines, budget_tokens=4000)
    prompt_part = digest.render()      # text with L<number> citations
    data = digest.to_json()            # {"templates": [...], "tokens": n, ...}

Imports nothing of ours outside itself (the agent root at most); no lease, action or model code.
"""

from agent.digest.digest import (
    BLANK,
    DEFAULT_BUDGET,
    Digest,
    DigestBuilder,
    Exemplar,
    TemplateSummary,
    build_digest,
    mine,
)
from agent.digest.sources import (
    lines_from_bytes,
    lines_from_chunks,
    lines_from_entries,
    lines_from_stream,
)
from agent.digest.spool import LineSpool
from agent.digest.tokens import EstimatedTokens, TokenCounter, VLLMTokenizer, estimate_tokens

__all__ = [
    "BLANK",
    "DEFAULT_BUDGET",
    "Digest",
    "DigestBuilder",
    "EstimatedTokens",
    "Exemplar",
    "LineSpool",
    "TemplateSummary",
    "TokenCounter",
    "VLLMTokenizer",
    "build_digest",
    "estimate_tokens",
    "lines_from_bytes",
    "lines_from_chunks",
    "lines_from_entries",
    "lines_from_stream",
    "mine",
]
