"""Every benchmark runs, at tiny sizes, and fails on errors.

The benchmarks print figures and are run by hand; nothing ran `benchmarks/ack_latency.py` after
the web process began refusing response_urls off Slack's hosts, and for weeks it counted 1,120 of
its 2,000 requests as errors (issue 43). Each benchmark here runs as a person would run it, with
its sizes cut down to seconds of work, and the test fails when the run exits non-zero (each exits
1 on an error or a failed invariant) or prints no figures. Speed is not judged here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # runs our own processes (conftest tier_of)

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def run_benchmark(script: str, *args: str, cwd: Path, timeout: float = 240) -> str:
    # The benchmark starts its own Redis (and emulators) unless told otherwise, as when run by hand.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith(("SLACK_", "GCP_", "TPU_"))}
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=cwd, env=env, text=True,
                            capture_output=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{script} exited {result.returncode}:\n{output[-4000:]}"
    return result.stdout


def test_the_smoke_runs_cover_every_benchmark():
    covered = {"ack_latency.py", "bare_bolt_app.py", "chaos.py", "digest_bench.py", "zone_search.py"}
    assert {path.name for path in BENCHMARKS.glob("*.py")} == covered, "a new benchmark needs a smoke run here"


def test_ack_latency_answers_every_request(tmp_path):
    out = run_benchmark("ack_latency.py", "--requests", "40", "--concurrency", "4", cwd=tmp_path)
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line.startswith(("tpubot serve", "bare bolt"))}
    assert set(rows) == {"tpubot serve ×2", "bare bolt ×2"}, out
    assert all(row[-1] == "0" for row in rows.values()), out  # the errors column
    assert "errors 0 (target 0)" in out


def test_chaos_holds_its_invariants(tmp_path):
    out = run_benchmark("chaos.py", "--seconds", "3", "--channels", "2", "--logs", str(tmp_path / "logs"),
                        cwd=tmp_path, timeout=280)
    verdicts = [line.split()[0] for line in out.splitlines() if line.startswith(("  PASS", "  FAIL"))]
    assert verdicts == ["PASS"] * 7, out


def test_zone_search_places_every_strategy(tmp_path):
    out = run_benchmark("zone_search.py", cwd=tmp_path)
    assert out.count("us-west4-a") >= 4 and "—" not in out, out


def test_digest_bench_prints_its_tables(tmp_path):
    from digest_corpus import loghub_dir

    if loghub_dir() is None:
        pytest.skip("loghub_2k is not here (../shared/data/loghub_2k or LOGHUB_2K_DIR)")
    out = run_benchmark("digest_bench.py", "--lines", "300", cwd=tmp_path)
    for table in ("## 1.", "## 2.", "## 3.", "## 4."):
        assert table in out, out[-3000:]
