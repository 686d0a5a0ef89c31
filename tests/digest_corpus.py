"""The Loghub-2k samples for tests and benchmarks: where they are, how to read them, and how to
score a grouping of them.

The data has a research-only licence and is never copied into the repository: it is read from
`$LOGHUB_2K_DIR`, else from `../shared/data/loghub_2k` next to the repository checkout.

Grouping accuracy (GA) and its F1 (FGA) are re-implemented from the definition in
reference/logs-metrics.md §1.3 (the upstream scoring code is GPL-3.0 and is not used): a line counts
as correctly grouped when the set of lines in its predicted group is exactly the set of lines in its
ground-truth group.
"""

from __future__ import annotations

import csv
import os
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "LOGHUB_2K_DIR"
SYSTEMS = (
    "Android", "Apache", "BGL", "HDFS", "HPC", "Hadoop", "HealthApp", "Linux",
    "Mac", "OpenSSH", "OpenStack", "Proxifier", "Spark", "Thunderbird", "Windows", "Zookeeper",
)  # fmt: skip


@dataclass(frozen=True)
class LabelledLog:
    system: str
    raw_lines: list[str]
    contents: list[str]
    event_ids: list[str]
    labels: list[str]  # BGL/Thunderbird alert label ("-" = no alert); "" where the system has none


def loghub_dir() -> Path | None:
    configured = os.environ.get(ENV_VAR)
    candidates = [Path(configured)] if configured else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "data" / "loghub_2k")
    for candidate in candidates:
        if (candidate / "HDFS" / "HDFS_2k.log").is_file():
            return candidate
    return None


def load_system(directory: Path, system: str) -> LabelledLog:
    log_path = directory / system / f"{system}_2k.log"
    raw = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    with open(f"{log_path}_structured.csv", encoding="utf-8", errors="replace", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != len(raw):
        raise ValueError(f"{system}: {len(raw)} log lines but {len(rows)} labelled rows")
    return LabelledLog(
        system=system,
        raw_lines=raw,
        contents=[row["Content"] for row in rows],
        event_ids=[row["EventId"] for row in rows],
        labels=[row.get("Label", "") for row in rows],
    )


def grouping_accuracy(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} labelled lines")
    if not truth:
        return 1.0
    truth_sizes = Counter(truth)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(predicted):
        members[group].append(index)
    correct = 0
    for indices in members.values():
        labels = {truth[index] for index in indices}
        if len(labels) == 1 and truth_sizes[truth[indices[0]]] == len(indices):
            correct += len(indices)
    return correct / len(truth)


def grouping_f1(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    """FGA: F1 of PGA (correct groups / predicted groups) and RGA (correct groups / truth groups),
    a group being correct when its lines are exactly one truth group's lines (§1.3)."""
    if len(predicted) != len(truth):
        raise ValueError(f"{len(predicted)} predictions for {len(truth)} labelled lines")
    if not truth:
        return 1.0
    truth_sizes = Counter(truth)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(predicted):
        members[group].append(index)
    correct = sum(
        1
        for indices in members.values()
        if len({truth[index] for index in indices}) == 1 and truth_sizes[truth[indices[0]]] == len(indices)
    )
    precision, recall = correct / len(members), correct / len(truth_sizes)
    return 0.0 if correct == 0 else 2 * precision * recall / (precision + recall)
