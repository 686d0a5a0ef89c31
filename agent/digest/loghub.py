"""Locating and reading the Loghub-2k samples used by tests and benchmarks.

The data has a research-only licence and is never copied into the repository: it is read from
`$LOGHUB_2K_DIR`, else from `../shared/data/loghub_2k` next to the repository checkout.
"""

from __future__ import annotations

import csv
import os
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
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub_2k")
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
