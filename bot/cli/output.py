"""How every reporting command prints: a table that never cuts a value, and `--json`.

A table is printed in the first layout that fits the width without cutting anything:

- on a terminal, a box-drawn table (rich) at its natural width;
- not on a terminal (piped, redirected), the same columns as plain aligned text;
- too wide for that: the widest column wrapped inside its cell, at spaces, commas and semicolons;
- a table of many rows (a bench sweep): its columns in several narrower tables, each repeating
  the key columns (context, concurrency) so every part reads on its own;
- otherwise records: one block per row, `column  value` per line, long values wrapped at spaces.

The width is the terminal's, or `COLUMNS` (`shutil.get_terminal_size`; 80 when neither says).
Nothing is ever replaced by `…`: a value the user ran the command for is always printed whole.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Sequence, TextIO

GAP = "  "


@dataclass
class Report:
    """A titled table with optional notes printed under it."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    right_aligned: frozenset[str] = frozenset()  # column names whose values are numbers
    key_columns: int = 1  # leading columns that name a row; repeated when the columns are split

    def add_row(self, *values: Any) -> None:
        self.rows.append([str(v) for v in values])

    def widths(self) -> list[int]:
        """Each column as wide as its widest value, or its name."""
        return [max([len(name)] + [len(row[i]) for row in self.rows]) for i, name in enumerate(self.columns)]

    def line(self, values: Sequence[str], widths: Sequence[int]) -> str:
        """One row in columns of `widths`, numbers right-aligned."""
        return GAP.join(value.rjust(w) if name in self.right_aligned else value.ljust(w)
                        for value, w, name in zip(values, widths, self.columns)).rstrip()


def width_of(out: TextIO) -> int:
    return shutil.get_terminal_size((80, 24)).columns


def is_terminal(out: TextIO) -> bool:
    return bool(getattr(out, "isatty", lambda: False)())


def print_report(report: Report, out: TextIO | None = None, *, width: int | None = None) -> None:
    out = out or sys.stdout
    width = width or width_of(out)
    terminal = is_terminal(out)
    if report.title:
        _write_wrapped(out, report.title, width)
    aligned = aligned_lines(report)
    fits = not report.rows or max(len(line) for line in aligned) <= width
    if terminal and boxed_width(report) <= width:
        _print_rich(report, out, width)
    elif fits:
        out.write("\n".join(aligned) + "\n")
    else:
        out.write("\n".join(wrapped_lines(report, width) or split_lines(report, width)
                             or record_lines(report, width)) + "\n")
    for note in report.notes:
        _write_wrapped(out, note, width)
    out.flush()


def boxed_width(report: Report) -> int:
    """The box table's width: each column plus a space either side and a border between."""
    widths = report.widths()
    return sum(widths) + 3 * len(widths) + 1


def aligned_lines(report: Report) -> list[str]:
    """Header, a dashed rule and the rows, each column as wide as its widest value."""
    widths = report.widths()
    return [report.line(row, widths) for row in (report.columns, ["-" * w for w in widths], *report.rows)]


MIN_WRAPPED_WIDTH = 16
_CHUNK = re.compile(r"[^\s,;]*[,;]?\s*")


def wrapped_lines(report: Report, width: int) -> list[str] | None:
    """Aligned columns with the widest one wrapped inside its cell; None when even that does not
    fit without breaking a word (then the caller falls back to records)."""
    if not report.rows:
        return None
    widths = report.widths()
    wide = widths.index(max(widths))
    room = width - sum(w for i, w in enumerate(widths) if i != wide) - len(GAP) * (len(widths) - 1)
    cells = [[_chunked(value, room) if i == wide else [value] for i, value in enumerate(row)] for row in report.rows]
    if room < max(MIN_WRAPPED_WIDTH, len(report.columns[wide])) or any(
            len(line) > room for row in cells for line in row[wide]):
        return None
    widths[wide] = max([len(report.columns[wide])] + [len(line) for row in cells for line in row[wide]])
    lines = [report.line(report.columns, widths), report.line(["-" * w for w in widths], widths)]
    for row in cells:
        for n in range(max(len(cell) for cell in row)):
            lines.append(report.line([cell[n] if n < len(cell) else "" for cell in row], widths))
    return lines


SPLIT_MIN_ROWS = 4  # fewer rows read better as records, one block each


def split_lines(report: Report, width: int) -> list[str] | None:
    """The columns in groups that fit the width, each group printed with the key columns."""
    if len(report.rows) < SPLIT_MIN_ROWS or len(report.columns) <= report.key_columns:
        return None
    widths = report.widths()
    keys = list(range(report.key_columns))
    room = width - sum(widths[i] + len(GAP) for i in keys)
    groups: list[list[int]] = [[]]
    used = 0
    for index in range(report.key_columns, len(report.columns)):
        need = widths[index] + (len(GAP) if groups[-1] else 0)
        if widths[index] > room:
            return None
        if used + need > room:
            groups.append([])
            used, need = 0, widths[index]
        groups[-1].append(index)
        used += need
    lines: list[str] = []
    for group in groups:
        part = Report(title="", columns=[report.columns[i] for i in keys + group],
                      rows=[[row[i] for i in keys + group] for row in report.rows], right_aligned=report.right_aligned)
        lines += ([""] if lines else []) + aligned_lines(part)
    return lines


def _chunked(value: str, room: int) -> list[str]:
    """Break at spaces, commas and semicolons only; a chunk longer than `room` stays whole."""
    lines = [""]
    for chunk in _CHUNK.findall(value):
        if lines[-1] and len(lines[-1] + chunk.rstrip()) > room:
            lines.append("")
        lines[-1] += chunk
    return [text.rstrip() for text in lines if text.strip()] or [""]


def record_lines(report: Report, width: int) -> list[str]:
    """One block per row: the first value as its heading, then `column  value` lines."""
    label_width = max(len(name) for name in report.columns[1:]) if len(report.columns) > 1 else 0
    lines: list[str] = []
    for index, row in enumerate(report.rows):
        if index:
            lines.append("")
        lines += _wrap(f"{report.columns[0]}: {row[0]}", width, indent="  ")
        for name, value in zip(report.columns[1:], row[1:]):
            lead = f"  {name.ljust(label_width)}  "
            lines += _wrap(lead + value, width, indent=" " * len(lead))
    return lines


def _wrap(text: str, width: int, indent: str) -> list[str]:
    # Wrap at spaces only: a long word (a URL, a zone list) runs past the width rather than being cut.
    return textwrap.wrap(text, width=max(width, len(indent) + 20), subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [""]


def _write_wrapped(out: TextIO, text: str, width: int) -> None:
    for paragraph in text.splitlines() or [""]:
        out.write("\n".join(_wrap(paragraph, width, indent="")) + "\n")


def _print_rich(report: Report, out: TextIO, width: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for name in report.columns:
        # It fits (boxed_width); "fold" only says that rich must never replace a value's end by "…".
        table.add_column(name, justify="right" if name in report.right_aligned else "left", no_wrap=True,
                         overflow="fold")
    for row in report.rows:
        table.add_row(*row)
    Console(file=out, width=width, highlight=False, markup=False, emoji=False).print(table)


def print_json(data: Any, out: TextIO | None = None) -> None:
    """`--json`: one JSON document on stdout; messages go to stderr so the output parses."""
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    out.flush()


def json_option_help(command: str) -> str:
    return f"print JSON instead of a table (shape: docs/json.md, `tpubot {command}`)"
