"""Ack latency under load: bursts of signed slash commands and events against `tpubot serve`
(2 web processes, one real Redis) side by side with a bare bolt app that only acks (also 2
processes, same ASGI stack and bolt mode), in the same run. Prints p50/p99/max and errors, and
tpubot's p99 by request kind. Not a test: it prints figures.

    python benchmarks/ack_latency.py [--requests 2000] [--concurrency 100] [--sweep 10,25,50]
                                     [--slack-429 chat.update]

`--slack-429 METHODS` makes the Slack stand-in answer every call to those methods with HTTP 429
and `Retry-After: 2` (slack_sdk's rate-limit handler then sleeps 2–3 s per retry): a request
whose ack waited on such a call would show it in its kind's max. 10% of the mix are teardown
confirm clicks on leases that have a status card (the path that once ran chat.update first).

Each app is first warmed with the same number of requests at the measured concurrency (open
connection pools, loaded scripts), in channels of their own so the measured requests meet the
same state every time. `--sweep` adds a table per extra concurrency level.

Target: p99 ≤ 100 ms and ≤ 1.5× the bare app, 0 errors (Slack's limit is 3,000 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlencode

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.local_stack import free_port  # noqa: E402
from infra.sandbox.slack_requests import sign  # noqa: E402
from infra.state.redis_server import ensure_redis  # noqa: E402

TPUBOT = Path(sys.executable).with_name("tpubot")
SLACK_STANDIN = (
    "import sys, threading; sys.path.insert(0, %r)\n"
    "from infra.sandbox.slack_api import InjectedError, SlackApiSandbox\n"
    "slack = SlackApiSandbox(token='xoxb-bench', port={port})\n"
    "for method in {limited!r}:\n"
    "    slack.inject_error(method, InjectedError(429, {{'ok': False, 'error': 'ratelimited'}}, {{'Retry-After': '2'}}),"
    " times=10**6)\n"
    "slack.start(); threading.Event().wait()\n" % str(ROOT)
)
TEAM = "T0BENCH"


def slash_body(text: str, channel: str, user: str, hooks: str) -> tuple[str, str]:
    """`hooks`: the response_url, on the Slack stand-in (tpubot refuses one on any other host)."""
    body = urlencode({"team_id": "T0BENCH", "channel_id": channel, "user_id": user, "command": "/tpu",
                      "text": text, "response_url": hooks, "trigger_id": "t"})
    return body, "application/x-www-form-urlencoded"


def mention_body(channel: str, user: str) -> tuple[str, str]:
    ts = f"{time.time():.6f}{random.randint(0, 999):03d}"
    envelope = {"team_id": "T0BENCH", "api_app_id": "A0", "type": "event_callback",
                "event_id": "Ev" + secrets.token_hex(6), "event_time": int(time.time()),
                "event": {"type": "app_mention", "user": user, "text": "<@UTPUBOT> status please", "ts": ts,
                          "channel": channel, "event_ts": ts}}
    return json.dumps(envelope), "application/json"


def click_body(channel: str, user: str, lease_id: str, hooks: str) -> tuple[str, str]:
    payload = {"type": "block_actions", "user": {"id": user, "team_id": TEAM}, "team": {"id": TEAM},
               "channel": {"id": channel}, "api_app_id": "A0", "trigger_id": "t",
               "container": {"type": "message", "channel_id": channel, "is_ephemeral": True},
               "response_url": hooks,
               "actions": [{"action_id": "teardown_confirm", "block_id": "b", "type": "button", "value": lease_id,
                            "action_ts": f"{time.time():.6f}"}]}
    return "payload=" + quote(json.dumps(payload)), "application/x-www-form-urlencoded"


KINDS = ("status", "up", "help", "mention", "confirm")


def requests_mix(n: int, hooks: str, channels: str = "C",
                 leases: list[tuple[str, str, str]] = ()) -> list[tuple[str, str, str]]:
    """(kind, body, content type): 30% /tpu status, 15% up, 10% help, 35% app_mention over 200
    channels named `channels`NNNN (a fresh prefix is a fresh set of channels), and 10% teardown
    confirm clicks, one per (channel, holder, lease id) in `leases`."""
    rng = random.Random(7)
    out = []
    clicks = list(leases)
    for _ in range(n):
        channel = f"{channels}{rng.randint(0, 199):04d}"
        user = f"U{rng.randint(0, 49):03d}"
        roll = rng.random()
        if roll >= 0.9 and clicks:
            out.append(("confirm", *click_body(*clicks.pop(), hooks)))
        elif roll < 0.3:
            out.append(("status", *slash_body("status", channel, user, hooks)))
        elif roll < 0.45:
            out.append(("up", *slash_body("up", channel, user, hooks)))
        elif roll < 0.55:
            out.append(("help", *slash_body("help", channel, user, hooks)))
        else:
            out.append(("mention", *mention_body(channel, user)))
    return out


async def burst(urls: list[str], secret: str, bodies: list[tuple[str, str, str]], concurrency: int) -> dict:
    """`concurrency` keep-alive connections, each sending its share back to back (aiohttp: the
    client must cost far less than the servers it measures on a 2-core machine)."""
    latencies: list[float] = []
    by_kind: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors = 0
    queue: asyncio.Queue = asyncio.Queue()
    for i, item in enumerate(bodies):
        queue.put_nowait((urls[i % len(urls)], *item))
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async def worker() -> None:
            nonlocal errors
            while not queue.empty():
                url, kind, body, ctype = queue.get_nowait()
                ts = str(int(time.time()))
                headers = {"content-type": ctype, "x-slack-request-timestamp": ts,
                           "x-slack-signature": sign(secret, ts, body)}
                started = time.perf_counter()
                try:
                    async with session.post(url, data=body.encode(), headers=headers) as response:
                        await response.read()
                        if response.status != 200:
                            errors += 1
                    latencies.append(time.perf_counter() - started)
                    by_kind[kind].append(latencies[-1])
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    errors += 1

        wall = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        wall = time.perf_counter() - wall
    return {
        "requests": len(bodies), "errors": errors, "wall_s": wall, "rps": len(latencies) / wall,
        **percentiles(latencies), "by_kind": {kind: percentiles(values) for kind, values in by_kind.items() if values},
    }


def percentiles(latencies: list[float]) -> dict:
    latencies = sorted(latencies)
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(round(0.99 * (len(latencies) - 1))))],
        "max_ms": 1000 * latencies[-1],
    }


def wait_healthy(url: str, path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.post(url + path, timeout=1).status_code in (200, 401, 404, 405):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def carded_leases(events: list[str], secret: str, redis_url: str, prefix: str, count: int,
                  hooks: str) -> list[tuple[str, str, str]]:
    """`count` leases (one `/tpu up` each, in channels `prefix`NNNN) given a status card reference,
    as the worker's first card post would: their confirm click is the path that once updated the card."""
    import redis as redis_sync

    from infra.state import keys

    ups = [(f"{prefix}{i:04d}", f"U{i % 50:03d}") for i in range(count)]
    asyncio.run(burst(events, secret, [("up", *slash_body("up", c, u, hooks)) for c, u in ups], 20))
    client = redis_sync.Redis.from_url(redis_url)
    leases = []
    try:
        for channel, user in ups:
            key = keys.lease(TEAM, channel)
            lease_id = client.hget(key, "lease_id")
            if lease_id:
                client.hset(key, mapping={"card_channel": channel, "card_ts": "1700000000.000100"})
                leases.append((channel, user, lease_id.decode()))
    finally:
        client.close()
    return leases


def measure(apps: dict[str, list[str]], secret: str, requests: int, concurrency: int, round_: int,
            redis_url: str, hooks: str) -> dict:
    """One table: each app warmed, then measured, on channels no earlier round has touched."""
    results = {}
    clicks = requests // 10 + 20
    for name, urls in apps.items():
        events = [u + "/slack/events" for u in urls]

        def leases(prefix: str, name: str = name, events: list[str] = events) -> list[tuple[str, str, str]]:
            if name.startswith("bare"):  # it acks any click alike
                return [(f"{prefix}{i:04d}", "U000", "none") for i in range(clicks)]
            return carded_leases(events, secret, redis_url, prefix, clicks, hooks)

        warm = leases(f"V{round_}")
        asyncio.run(burst(events, secret, requests_mix(requests, hooks, channels=f"W{round_}", leases=warm),
                          concurrency))
        measured = leases(f"K{round_}")
        results[name] = asyncio.run(burst(events, secret, requests_mix(requests, hooks, channels=f"C{round_}",
                                                                       leases=measured), concurrency))
    return results


def print_table(requests: int, concurrency: int, results: dict) -> None:
    print(f"\n{requests} signed requests (55% /tpu, 35% app_mention, 10% teardown confirm clicks), "
          f"{concurrency} concurrent, on {os.cpu_count()} cores\n")
    print(f"{'app':<18}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'req/s':>9}{'errors':>8}")
    for name, r in results.items():
        print(f"{name:<18}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}{r['max_ms']:>9.1f}{r['rps']:>9.0f}{r['errors']:>8}")
    ours_r, bare_r = results["tpubot serve ×2"], results["bare bolt ×2"]
    print(f"\n{'tpubot by kind':<18}{'p99 ms':>9}{'max ms':>9}")
    for kind, v in ours_r["by_kind"].items():
        print(f"{kind:<18}{v['p99_ms']:>9.1f}{v['max_ms']:>9.1f}")
    ratio = ours_r["p99_ms"] / bare_r["p99_ms"]
    print(f"p99 ratio tpubot/bare: {ratio:.2f}× (target ≤ 1.5×); p99 {ours_r['p99_ms']:.1f} ms (target ≤ 100 ms); "
          f"errors {ours_r['errors']} (target 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--sweep", default="", help="more concurrency levels, e.g. 10,25,50")
    parser.add_argument("--slack-429", default="", help="Web API methods Slack answers with 429 Retry-After: 2, "
                                                        "e.g. chat.update")
    args = parser.parse_args()
    limited = [m.strip() for m in args.slack_429.split(",") if m.strip()]
    levels = [args.concurrency, *(int(c) for c in args.sweep.split(",") if c.strip())]

    redis = ensure_redis(os.environ.get("REDIS_URL", ""))
    secret = secrets.token_hex(16)
    procs: list[subprocess.Popen] = []
    # The Slack stand-in gets its own process: its threads would otherwise compete for this
    # process's GIL with the load generator and inflate the very latencies being measured.
    slack_port = free_port()
    procs.append(subprocess.Popen([sys.executable, "-c", SLACK_STANDIN.format(port=slack_port, limited=limited)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GCP_", "TPU_"))}
    env.update(REDIS_URL=redis.url if redis.url.count("/") > 2 else redis.url + "/12",
               SLACK_API_URL=f"http://127.0.0.1:{slack_port}/api/", SLACK_BOT_TOKEN="xoxb-bench",
               SLACK_SIGNING_SECRET=secret)
    try:
        ours = []
        for _ in range(2):
            port = free_port()
            procs.append(subprocess.Popen([str(TPUBOT), "serve", "--port", str(port), "--host", "127.0.0.1"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ours.append(f"http://127.0.0.1:{port}")
        bare = []
        for _ in range(2):
            port = free_port()
            procs.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("bare_bolt_app.py")),
                                           str(port), secret], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            bare.append(f"http://127.0.0.1:{port}")
        for url in ours:
            wait_healthy(url, "/healthz")
        for url in bare:
            wait_healthy(url, "/slack/events")
        apps = {"tpubot serve ×2": ours, "bare bolt ×2": bare}
        hooks = f"http://127.0.0.1:{slack_port}/hooks/bench/1"  # the stand-in's response_url, as Slack's would be
        tables = [(level, measure(apps, secret, args.requests, level, i, env["REDIS_URL"], hooks))
                  for i, level in enumerate(levels)]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=15)
        redis.stop()

    if limited:
        print(f"\nSlack answered every {', '.join(limited)} call with HTTP 429, Retry-After: 2")
    for level, results in tables:
        print_table(args.requests, level, results)
    errors = sum(r["errors"] for _, results in tables for r in results.values())
    if errors:
        raise SystemExit(f"{errors} requests failed (not 200, or no answer within 10 s)")


if __name__ == "__main__":
    main()
