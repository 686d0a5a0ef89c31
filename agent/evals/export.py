"""A 👎 answer with its correction, written as an incident file (docs/eval.md's format) for
`tpubot eval --cases`. What a right answer must contain is a person's call: the correction is put
in the file as a comment, and `facts` and `evidence_lines` are left for them to fill in from it.
The file parses as it is (the shared checks then score the facts found in nothing)."""

from __future__ import annotations

from infra.state.feedback import Corrected


def incident_toml(case: Corrected) -> str:
    answer = case.answer
    correction = "\n".join(f"#   {line}" for line in case.correction.splitlines() or [""])
    answered = "\n".join(f"#   {line}" for line in answer.text.splitlines()[:20])
    return "\n".join([
        f"# Rated :-1: in <#{answer.channel}> (thread {answer.thread_ts}); the answer, by {answer.model}, began:",
        answered,
        "# What the person said it should have said:",
        correction,
        f'id = {_string("feedback-" + answer.answer_id)}',
        'kind = "feedback"',
        f"mention = {_string(case.request or 'what went wrong?')}",
        f"logs = {_multiline(case.logs)}",
        "[expect]",
        "facts = []            # regular expressions a right answer contains, from the correction above",
        "evidence_lines = []   # 1-based numbers of the log lines that hold the evidence",
        'forbidden = ["provision", "teardown"]',
        "",
    ])


def _string(text: str) -> str:
    """A TOML basic string on one line."""
    return '"' + _escaped(text).replace("\n", "\\n") + '"'


def _multiline(lines: list[str]) -> str:
    """A TOML multi-line basic string holding `lines` exactly (the newline after the opening quotes is trimmed)."""
    return '"""\n' + "\n".join(_escaped(line) for line in lines) + '\n"""'


# What a TOML basic string escapes: a backslash, a quote, and control characters but tab and newline.
_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"',
            **{code: f"\\u{code:04x}" for code in [*range(0x20), 0x7F] if chr(code) not in "\t\n"}}


def _escaped(text: str) -> str:
    return text.translate(_ESCAPES)
