"""Chaos benchmark: 20 channels cycling /tpu up → ACTIVE → mention → /tpu down against 2 web and
2 worker processes (the real `tpubot serve` / `tpubot worker`) and a sandbox TPU API, while the
benchmark SIGKILLs workers (and starts them again), restarts Redis and injects GCP 503/429.
Then it stops the chaos, lets every channel tear down, and prints what held:

    .venv/bin/python benchmarks/chaos.py [--seconds 120] [--channels 20]

Invariants checked (each printed with its figure; exit 1 if one fails):
- QRs per channel ≤ 1 at every sample (the sandbox's stored QRs, DELETING ones excluded, sampled
  every 0.25 s; the maximum with DELETING ones is printed beside it);
- 0 QRs left at the end;
- 0 leases lost: every `/tpu up` acknowledged as requested reached ACTIVE or a FAILED card;
- 0 alerts posted twice (leases run with a 100 s flex-start limit and a 85 s warning, so
  the ones held past ~15 s are warned during the chaos);
- 0 5xx answers from the web processes, except the mentions Redis could not take during an
  outage (answered 500 by design so Slack retries them; the benchmark retries them as Slack does,
  and prints how many).

Everything is on loopback: Redis is a durable embedded valkey (append-only file), the TPU and
Slack Web API are the project's emulators in this process. Bounded: --seconds of chaos plus at
most SETTLE_SECONDS to settle.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bot.local_stack import free_port  # noqa: E402
from handlers import cards  # noqa: E402
from infra.sandbox.slack_api import SlackApiSandbox  # noqa: E402
from infra.sandbox.slack_requests import SlackRequests  # noqa: E402
from infra.sandbox.tpu_api import TpuSandbox  # noqa: E402
from infra.state.redis_server import RestartableRedis  # noqa: E402

TPUBOT = Path(sys.executable).with_name("tpubot")
SETTLE_SECONDS = 120
STEP_TIMEOUT = 60  # seconds a channel waits for ACTIVE / released before it counts the cycle lost
OUTAGE_SECONDS = 3.0
USER = "UCHAOS"


@dataclass
class Figures:
    cycles: int = 0
    ups: int = 0
    failed_cards: int = 0
    lost: list[str] = field(default_factory=list)
    mentions: int = 0
    mentions_refused_in_outage: int = 0
    five_xx: list[str] = field(default_factory=list)
    kills: int = 0
    redis_restarts: int = 0
    injected: Counter = field(default_factory=Counter)
    max_qrs_per_channel: int = 0
    max_qrs_per_channel_with_deleting: int = 0
    samples: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Cluster:
    def __init__(self, workdir: Path, time_scale: float) -> None:
        self.redis = RestartableRedis(free_port(), str(workdir / "redis")).start()
        self.tpu = TpuSandbox(time_scale=time_scale)
        self.slack = SlackApiSandbox(token="xoxb-chaos-" + secrets.token_hex(12))
        self.secret = secrets.token_hex(16)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_", "REDIS_", "LOG_"))}
        env.update(TPUBOT_ENV_FILE=os.devnull, REDIS_URL=self.redis.url, TPU_API_ENDPOINT=self.tpu.start(),
                   SLACK_API_URL=self.slack.start(), SLACK_BOT_TOKEN=self.slack.token,
                   SLACK_SIGNING_SECRET=self.secret, POLL_INTERVAL="0.5s", JOB_TIMEOUT="6s", LOCK_TTL="5s",
                   MAX_RUN_DURATION="100s", MIN_RUN_DURATION="1s", VALID_UNTIL_DURATION="100s", ALERT_LEAD_TIMES="85s",
                   AGENT_USE_MODEL="false", LOG_FORMAT="json")
        self.env, self.workdir = env, workdir
        self.web_ports = [free_port(), free_port()]
        self.webs = [self._spawn(["serve", "--host", "127.0.0.1", "--port", str(port)], f"web-{i}")
                     for i, port in enumerate(self.web_ports)]
        self.workers = [self._spawn(["worker"], f"worker-{i}") for i in range(2)]

    def _spawn(self, args: list[str], name: str) -> subprocess.Popen:
        log = (self.workdir / f"{name}.log").open("ab")
        return subprocess.Popen([str(TPUBOT), *args], env=self.env, cwd=self.workdir, stdout=log,
                                stderr=subprocess.STDOUT)

    def kill_and_restart_worker(self, index: int) -> None:
        self.workers[index].send_signal(signal.SIGKILL)
        self.workers[index].wait(timeout=10)
        self.workers[index] = self._spawn(["worker"], f"worker-{index}")

    def exited(self) -> list[str]:
        """Each child that has exited, with the last line it printed (a refused setting says why there)."""
        said = []
        for name, proc in [(f"web-{i}", p) for i, p in enumerate(self.webs)] + \
                          [(f"worker-{i}", p) for i, p in enumerate(self.workers)]:
            if proc.poll() is not None:
                lines = (self.workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()
                said.append(f"{name} exited {proc.returncode}: {lines[-1] if lines else '(nothing printed)'}")
        return said

    def ready(self) -> bool:
        if self.exited():
            return True  # nothing to wait for: the caller says why
        try:
            return all(httpx.get(f"http://127.0.0.1:{p}/readyz", timeout=2).status_code == 200 for p in self.web_ports)
        except httpx.HTTPError:
            return False

    def requests(self, index: int) -> SlackRequests:
        port = self.web_ports[index % len(self.web_ports)]
        return SlackRequests(f"http://127.0.0.1:{port}/slack/events", self.secret,
                             response_url_factory=self.slack.response_url, timeout=15)

    def stop(self) -> None:
        for proc in self.webs + self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.webs + self.workers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.slack.stop()
        self.tpu.stop()
        self.redis.stop()


def wait(predicate, timeout: float, interval: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


class Channel(threading.Thread):
    """One channel's user: up, wait ACTIVE, a mention, down + confirm, wait released; again."""

    def __init__(self, n: int, cluster: Cluster, figures: Figures, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"channel-{n}")
        self.channel = f"C0CHAOS{n:02d}"
        self.n, self.cluster, self.figures, self.stop_event = n, cluster, figures, stop
        self.clients = [cluster.requests(0), cluster.requests(1)]
        self.calls = 0

    def _client(self) -> SlackRequests:
        self.calls += 1
        return self.clients[(self.n + self.calls) % 2]

    def _post(self, send) -> object:
        """A request, retried while the web answers that Redis is away (as a person or Slack would)."""
        for _ in range(40):
            try:
                reply = send(self._client())
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            if reply.status >= 500:
                with self.figures.lock:
                    self.figures.five_xx.append(f"{reply.status} {reply.body[:80]}")
                time.sleep(0.5)
                continue
            if "state store is unavailable" in reply.text:  # a 200 that changed nothing: ask again
                time.sleep(0.5)
                continue
            return reply
        raise RuntimeError("the web processes did not answer for 20 s")

    def status(self) -> str:
        return self._post(lambda c: c.slash("status", user=USER, channel=self.channel)).text

    def mention(self) -> None:
        ts = f"{time.time():.6f}"
        retry = 0
        while retry < 40:
            try:
                reply = self._client().mention("<@UTPUBOT> is it up?", user=USER, channel=self.channel, ts=ts,
                                               event_id=f"Ev{self.channel}{ts}", retry_num=retry or None)
            except httpx.HTTPError:
                retry += 1
                time.sleep(0.5)
                continue
            if reply.status < 500:
                break
            with self.figures.lock:  # Redis away: refused so Slack retries, which we do
                self.figures.mentions_refused_in_outage += 1
            retry += 1
            time.sleep(0.5)
        with self.figures.lock:
            self.figures.mentions += 1

    def cycle(self) -> None:
        up = self._post(lambda c: c.slash("up", user=USER, channel=self.channel)).text
        if "Requested" not in up:
            time.sleep(1)
            return
        with self.figures.lock:
            self.figures.ups += 1
        outcome = wait(lambda: ("active" if "ACTIVE" in (s := self.status()) else
                                "failed" if "holds no TPU" in s else None), STEP_TIMEOUT)
        if outcome is None:
            with self.figures.lock:
                self.figures.lost.append(f"{self.channel}: no ACTIVE or FAILED within {STEP_TIMEOUT}s")
            return
        if outcome == "failed":
            with self.figures.lock:
                self.figures.failed_cards += 1
            return
        self.mention()
        time.sleep(random.uniform(5, 25))  # hold it a while: some leases get their deadline warning
        self.release()
        with self.figures.lock:
            self.figures.cycles += 1

    def release(self) -> bool:
        reply = self._post(lambda c: c.slash("down", user=USER, channel=self.channel))
        values = [e["value"] for b in reply.json().get("blocks", []) if b.get("type") == "actions"
                  for e in b["elements"] if e.get("action_id") == cards.TEARDOWN_CONFIRM_ACTION]
        if values:
            self._post(lambda c: c.click(action_id=cards.TEARDOWN_CONFIRM_ACTION, value=values[0], user=USER,
                                         channel=self.channel))
        released = wait(lambda: "holds no TPU" in self.status(), STEP_TIMEOUT)
        if not released:
            with self.figures.lock:
                self.figures.lost.append(f"{self.channel}: not released within {STEP_TIMEOUT}s")
        return bool(released)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.cycle()
            except RuntimeError as error:
                with self.figures.lock:
                    self.figures.lost.append(f"{self.channel}: {error}")

    def close(self) -> None:
        for client in self.clients:
            client.close()


def sample_qrs(cluster: Cluster, figures: Figures, stop: threading.Event) -> None:
    while not stop.is_set():
        live, every = Counter(), Counter()
        for qr in cluster.tpu.queued_resources():
            channel = qr["labels"].get("tpubot-channel", "?")
            every[channel] += 1
            if qr["state"] != "DELETING":
                live[channel] += 1
        with figures.lock:
            figures.samples += 1
            figures.max_qrs_per_channel = max(figures.max_qrs_per_channel, max(live.values(), default=0))
            figures.max_qrs_per_channel_with_deleting = max(figures.max_qrs_per_channel_with_deleting,
                                                           max(every.values(), default=0))
        time.sleep(0.25)


def chaos(cluster: Cluster, figures: Figures, stop: threading.Event, rng: random.Random) -> None:
    actions = ["kill", "kill", "redis", "gcp503", "gcp429"]
    while not stop.wait(rng.uniform(6, 12)):
        action = rng.choice(actions)
        if action == "kill":
            cluster.kill_and_restart_worker(rng.randrange(len(cluster.workers)))
            figures.kills += 1
        elif action == "redis":
            cluster.redis.stop()
            time.sleep(OUTAGE_SECONDS)  # the outage itself
            cluster.redis.start()
            figures.redis_restarts += 1
        else:
            status = 503 if action == "gcp503" else 429
            count = rng.randint(1, 3)
            cluster.tpu.inject_failures(count, http_status=status, path_contains="queuedResources")
            figures.injected[status] += count


def duplicate_alerts(slack: SlackApiSandbox) -> tuple[int, int]:
    """(alerts posted, alerts posted more than once) from the Slack stand-in's record."""
    seen: Counter = Counter()
    for call in slack.calls_to("chat.postMessage"):
        blocks = call.body.get("blocks") or []
        if isinstance(blocks, str):
            import json

            blocks = json.loads(blocks)
        if not any(e.get("action_id") == "alert_teardown" for b in blocks if b.get("type") == "actions"
                   for e in b.get("elements", [])):
            continue
        lease = re.search(r"lease `([^`]+)`", str(blocks))
        seen[(lease.group(1) if lease else "?", call.body.get("text", ""))] += 1
    return sum(seen.values()), sum(1 for count in seen.values() if count > 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120, help="how long the chaos runs")
    parser.add_argument("--channels", type=int, default=20)
    parser.add_argument("--time-scale", type=float, default=0.5, help="sandbox TPU timings (lower is faster)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--logs", default="", help="directory for the processes' logs (default: a new temp dir)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    random.seed(args.seed)

    figures = Figures()
    started = time.monotonic()
    logs = Path(args.logs or tempfile.mkdtemp(prefix="tpubot-chaos-"))
    logs.mkdir(parents=True, exist_ok=True)
    if True:
        cluster = Cluster(logs, args.time_scale)
        try:
            if not wait(cluster.ready, 120) or cluster.exited():
                print("the web processes did not become ready", *cluster.exited(), sep="\n  ", file=sys.stderr)
                return 1
            stop_channels, stop_chaos, stop_sampling = threading.Event(), threading.Event(), threading.Event()
            channels = [Channel(n, cluster, figures, stop_channels) for n in range(args.channels)]
            sampler = threading.Thread(target=sample_qrs, args=(cluster, figures, stop_sampling), daemon=True)
            chaos_thread = threading.Thread(target=chaos, args=(cluster, figures, stop_chaos, rng), daemon=True)
            sampler.start()
            chaos_thread.start()
            for channel in channels:
                channel.start()
            time.sleep(args.seconds)  # the benchmark's run time
            stop_chaos.set()
            chaos_thread.join()
            stop_channels.set()
            settle_end = time.monotonic() + SETTLE_SECONDS
            for channel in channels:
                channel.join(timeout=max(1.0, settle_end - time.monotonic()))
            left_running = [c.channel for c in channels if c.is_alive()]
            # Whatever a channel still holds (a cycle cut short), it releases now.
            for channel in channels:
                if not channel.is_alive() and "holds no TPU" not in channel.status():
                    channel.release()
            wait(lambda: not cluster.tpu.queued_resources(), max(5.0, settle_end - time.monotonic()))
            stop_sampling.set()
            sampler.join()
            qrs_left = len(cluster.tpu.queued_resources())
            alerts, twice = duplicate_alerts(cluster.slack)
            alive = sum(proc.poll() is None for proc in cluster.webs + cluster.workers)
            dead = {i: proc.returncode for i, proc in enumerate(cluster.webs + cluster.workers) if proc.poll() is not None}
            for channel in channels:
                channel.close()
        finally:
            cluster.stop()

    elapsed = time.monotonic() - started
    checks = [
        ("QRs per channel at any sample (≤ 1)", figures.max_qrs_per_channel, figures.max_qrs_per_channel <= 1),
        ("QRs left at the end (0)", qrs_left, qrs_left == 0),
        ("leases lost (0)", len(figures.lost), not figures.lost),
        ("alerts sent twice (0)", twice, twice == 0),
        ("5xx answers (0)", len(figures.five_xx), not figures.five_xx),
        ("processes alive at the end (4)", alive, alive == 4),
        ("channels still cycling after the settle (0)", len(left_running), not left_running),
    ]
    print(f"chaos: {args.channels} channels, 2 web + 2 worker processes, {args.seconds:.0f}s of chaos, "
          f"{elapsed:.0f}s in all (seed {args.seed})")
    print(f"  cycles completed (up → ACTIVE → mention → down → released): {figures.cycles}")
    print(f"  /tpu up requested: {figures.ups}; ended FAILED (GCP errors beyond retries): {figures.failed_cards}")
    print(f"  mentions accepted (200): {figures.mentions}; refused during a Redis outage and retried (500 by design): "
          f"{figures.mentions_refused_in_outage}")
    print(f"  workers SIGKILLed (and restarted): {figures.kills}")
    print(f"  Redis restarts ({OUTAGE_SECONDS:.0f}s outages): {figures.redis_restarts}")
    print(f"  injected GCP errors: 503 ×{figures.injected[503]}, 429 ×{figures.injected[429]}")
    print(f"  QR samples: {figures.samples}; max per channel incl. DELETING: "
          f"{figures.max_qrs_per_channel_with_deleting}")
    print(f"  alerts posted: {alerts}")
    for name, value, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {value}")
    for line in figures.lost[:10] + figures.five_xx[:10]:
        print(f"    {line}")
    if dead:
        print(f"    exited: {dead} (process index: web-0, web-1, worker-0, worker-1)")
    print(f"  logs: {logs}")
    return 0 if all(ok for _, _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
