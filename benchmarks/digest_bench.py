"""Log digest benchmark on Loghub-2k, ours vs drain3 0.9.11 in the same process and run.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/digest_bench.py [--lines 1000000] [--skip-speed]

Prints three tables:
1. grouping accuracy (GA, reference/logs-metrics.md §1.3) per system and mean, on the raw `.log`
   lines (headers kept, no per-system settings) and on the `Content` column, for our miner and
   for drain3 (default config with the masking list of drain3's example drain3.ini);
2. lines/s on an N-line input built by cycling all 16 raw 2k files: our whole digest (header
   stripping, masking, mining, ranking, rendering at the default budget) vs drain3
   `add_log_message` without masks (its fastest setting) and with the ini masks;
3. BGL: share of the 143 alert lines (Label != "-") whose template is shown in a 4,000-token digest.

The data is read from $LOGHUB_2K_DIR or ../shared/data/loghub_2k (research licence; never copied).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.digest import DigestBuilder, build_digest  # noqa: E402
from agent.digest.loghub import SYSTEMS, load_system, loghub_dir  # noqa: E402
from agent.digest.metrics import grouping_accuracy  # noqa: E402

# drain3's example drain3.ini masking instructions (drain3 repository, examples/drain3.ini).
DRAIN3_INI_MASKS = [
    (r"((?<=[^A-Za-z0-9])|^)(([0-9a-f]{2,}:){3,}([0-9a-f]{2,}))((?=[^A-Za-z0-9])|$)", "ID"),
    (r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})((?=[^A-Za-z0-9])|$)", "IP"),
    (r"((?<=[^A-Za-z0-9])|^)([0-9a-f]{6,} ?){3,}((?=[^A-Za-z0-9])|$)", "SEQ"),
    (r"((?<=[^A-Za-z0-9])|^)([0-9A-F]{4} ?){4,}((?=[^A-Za-z0-9])|$)", "SEQ"),
    (r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
    (r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM"),
    (r"(?<=executed cmd )(\".+?\")", "CMD"),
]


def drain3_miner(masks: bool):
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.profiling_enabled = False
    if masks:
        config.masking_instructions = [MaskingInstruction(pattern, name) for pattern, name in DRAIN3_INI_MASKS]
    return TemplateMiner(config=config)


def ours_grouping(lines: list[str]) -> list[int]:
    builder = DigestBuilder()
    signatures = [builder.add(line) for line in lines]
    template_of = builder.template_ids()
    return [template_of[s] for s in signatures]


def drain3_grouping(lines: list[str]) -> list[int]:
    miner = drain3_miner(masks=True)
    return [miner.add_log_message(line)["cluster_id"] for line in lines]


def accuracy_table(directory: Path) -> None:
    print("\n## Grouping accuracy (GA) on Loghub-2k, no per-system settings\n")
    print("| System | ours raw | drain3 raw | ours Content | drain3 Content |")
    print("|---|---|---|---|---|")
    columns: list[list[float]] = [[], [], [], []]
    for system in SYSTEMS:
        log = load_system(directory, system)
        row = [
            grouping_accuracy(ours_grouping(log.raw_lines), log.event_ids),
            grouping_accuracy(drain3_grouping(log.raw_lines), log.event_ids),
            grouping_accuracy(ours_grouping(log.contents), log.event_ids),
            grouping_accuracy(drain3_grouping(log.contents), log.event_ids),
        ]
        for column, value in zip(columns, row):
            column.append(value)
        print(f"| {system} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    print("| **mean** | " + " | ".join(f"**{statistics.fmean(c):.3f}**" for c in columns) + " |")


def throughput_table(directory: Path, total: int) -> None:
    pool = [line for system in SYSTEMS for line in load_system(directory, system).raw_lines]
    lines = list(itertools.islice(itertools.cycle(pool), total))
    print(f"\n## Throughput on {len(lines):,} raw lines (16 systems' 2k files cycled), one run each\n")
    print("| Miner | seconds | lines/s | ours is faster by |")
    print("|---|---|---|---|")

    def timed(run) -> float:
        gc.collect()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    ours = timed(lambda: build_digest(lines))
    results = [("ours: full digest (strip, mask, mine, rank, render)", ours)]
    for label, masks in (("drain3 0.9.11, no masks", False), ("drain3 0.9.11, drain3.ini masks", True)):
        miner = drain3_miner(masks)
        add = miner.add_log_message
        results.append((label, timed(lambda: [add(line) for line in lines])))
    for label, seconds in results:
        print(f"| {label} | {seconds:.1f} | {len(lines) / seconds:,.0f} | {seconds / ours:.1f}x |")


def bgl_alert_table(directory: Path, budget: int = 4_000) -> None:
    log = load_system(directory, "BGL")
    builder = DigestBuilder()
    signatures = [builder.add(line) for line in log.raw_lines]
    template_of = builder.template_ids()
    digest = builder.build(budget_tokens=budget)
    first_line: dict[int, int] = {}
    for number, signature in enumerate(signatures, start=1):
        first_line.setdefault(template_of[signature], number)
    shown = {t.first_line for t in digest.templates}
    alerts = [i for i, label in enumerate(log.labels) if label != "-"]
    kept = [i for i in alerts if first_line[template_of[signatures[i]]] in shown]
    alert_templates = {template_of[signatures[i]] for i in alerts}
    print(f"\n## BGL alert recall in a {budget:,}-token digest\n")
    print("| alert lines | kept | alert templates (ours) | shown templates / all | digest tokens |")
    print("|---|---|---|---|---|")
    print(
        f"| {len(alerts)} | {len(kept)} ({len(kept) / len(alerts):.0%}) | {len(alert_templates)} | "
        f"{len(digest.templates)} / {len(digest.ranked)} | {digest.tokens:,} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    directory = loghub_dir()
    if directory is None:
        print("loghub_2k not found: set LOGHUB_2K_DIR or place it at ../shared/data/loghub_2k")
        return 1
    try:
        import drain3  # noqa: F401
    except ImportError:
        print("drain3 is not installed: pip install -e '.[bench]'")
        return 1
    accuracy_table(directory)
    bgl_alert_table(directory)
    if not args.skip_speed:
        throughput_table(directory, args.lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
