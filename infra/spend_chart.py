"""A month's TPU spend as a PNG bar chart: one bar per channel, the idle share stacked on top
(time the model was READY with no traffic, priced like the rest), each channel's budget marked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

WIDTH_PX, HEIGHT_PX, DPI = 900, 500, 100
BUSY_COLOR = "#1f77b4"  # exact colours: tests read the bars back from the pixels
IDLE_COLOR = "#ff7f0e"
BUDGET_COLOR = "#000000"


@dataclass(frozen=True)
class ChartBar:
    label: str
    usd: float
    idle_usd: float = 0.0  # the part of `usd` spent idle
    budget_usd: float | None = None


def write_spend_chart(month: str, bars: list[ChartBar], path: str | Path, *, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in CI
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axis = plt.subplots(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI)
    try:
        positions = list(range(len(bars)))
        busy = [max(0.0, bar.usd - bar.idle_usd) for bar in bars]
        idle = [min(bar.idle_usd, bar.usd) for bar in bars]
        axis.bar(positions, busy, width=0.6, color=BUSY_COLOR, label="in use", antialiased=False)
        axis.bar(positions, idle, width=0.6, bottom=busy, color=IDLE_COLOR, label="idle (READY, no traffic)",
                 antialiased=False)
        budgets = [(i, bar.budget_usd) for i, bar in enumerate(bars) if bar.budget_usd is not None]
        if budgets:
            axis.scatter([i for i, _ in budgets], [b for _, b in budgets], marker="_", s=900, color=BUDGET_COLOR,
                         label="budget", zorder=3)
        for i, bar in enumerate(bars):
            axis.annotate(f"${bar.usd:,.2f}", (i, max(bar.usd, bar.budget_usd or 0.0)), textcoords="offset points",
                          xytext=(0, 4),
                          ha="center", fontsize=8)
        axis.set_xticks(positions, [bar.label for bar in bars], rotation=30 if len(bars) > 6 else 0, fontsize=8)
        axis.set_ylabel("USD")
        top = max([bar.usd for bar in bars] + [b for _, b in budgets] + [0.01])
        axis.set_ylim(0, top * 1.4)  # headroom: the legend sits above the tallest bar, never on it
        axis.set_xlim(-0.6, max(len(bars), 1) - 0.4)
        axis.set_title(title or f"TPU spend per channel, {month} (UTC)")
        axis.legend(loc="upper center", ncol=3, fontsize=8, frameon=False)
        axis.spines[["top", "right"]].set_visible(False)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path
