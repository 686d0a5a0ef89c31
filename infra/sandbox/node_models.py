"""Sandbox vLLM per TPU node: each ACTIVE sandbox node serves an emulated Gemma endpoint.

The TPU emulator calls `on_node_ready` the first time a node is looked at; this starts a
`VllmEmulator` (answering as `served_version`, the vLLM release the configured image runs; the v5e latency model, labelled as the sandbox model
in every response) on the node's own loopback address, `127.0.1.N`, at the deployment's model
port — so the bot reaches it exactly as it reaches a real TPU VM: node external IP →
`http://IP:{MODEL_PORT}/v1`, nothing special-cased. Like the real VM it enforces the API key its
startup script names (`boot_api_key`: read from the sandbox's Secret Manager at boot), so
`/v1/*` without the lease's key answers 401. `on_node_gone` stops it. `model_fault` (one of
`infra.sandbox.vllm.MODEL_FAULTS`) is given to every model booted from then on, so a test can
make the next node's model answer garbage or return tool calls as text.

While it "boots" the node publishes its phases as guest attributes, as the real startup script does
(infra/boot_phases.py, through `publish`): secrets fetched, pulling the image, loading weights,
compiling, serving. A cold boot takes `boot_seconds`, compilation most of it (reference/vllm-tpu.md
§4: 80 %); a warm one — its `XLA_CACHE_BUCKET` already holds a cache under the same key, saved by
an earlier boot after it served — compiles in a fraction of that. The fault `crash_loop` (an error
line) makes every booting node's vLLM exit at start-up with that line, restart, and exit again.

A node's address is reserved (a bound socket, held) when the node is first seen and served on
when its model has "booted", so no other process — another test run's sandbox, say — can take
it in between. Fallbacks, so the sandbox works anywhere: if the configured port is taken on the 127.0.1.x range,
another free port is chosen for the whole stack (`port`); where only 127.0.0.1 can be bound (some
non-Linux systems) nodes share it, one model at a time.
"""

from __future__ import annotations

import functools
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Mapping

from infra.sandbox.vllm import DEFAULT_SERVED_VERSION, LatencyModel, VllmEmulator
from infra.sandbox.vllm.served_version import check_served_version
from infra import boot_phases as bp

log = logging.getLogger(__name__)

NODE_NET = "127.0.1."
FIRST_HOST, LAST_HOST = 2, 254
LABEL = "sandbox model"

# Each phase's share of a cold boot, compiling most of it; with the cache restored, compiling takes
# WARM_COMPILE_SHARE, so a warm boot is about half a cold one (published v5e-1 figures: ~500 s warm
# against ~1,089 s cold). The first phases are longer than on a real VM, so that the card shows them.
COLD_PHASES = ((bp.SECRETS_FETCHED, 0.10), (bp.PULLING_IMAGE, 0.15), (bp.LOADING_WEIGHTS, 0.15), (bp.COMPILING, 0.60))
WARM_COMPILE_SHARE = 0.15
CRASH_PAUSE_SHARE = 0.05  # how long a crashed container stays down before Docker restarts it


class _Boot(threading.Thread):
    """One node's boot, phase by phase; `cancel` (the node is gone) ends it at the next step."""

    def __init__(self, run: Callable[[threading.Event], None]) -> None:
        super().__init__(name="boot", daemon=True)
        self._cancelled = threading.Event()
        self._body = run

    def run(self) -> None:
        self._body(self._cancelled)

    def cancel(self) -> None:
        self._cancelled.set()


def _reserve(host: str, port: int, *, reuse: bool = False) -> socket.socket | None:
    """A socket bound to (host, port) and not yet listening, or None when the address is taken.
    Without SO_REUSEADDR no other process can bind the address while it is held, even with it;
    the price is that an address whose last connections are in TIME_WAIT is skipped for a minute,
    which only the one-address fallback cannot afford (`reuse`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    return sock


def _bindable(host: str, port: int) -> int | None:
    """The port bound (the given one, or a free one for port 0), or None if it cannot be bound."""
    sock = _reserve(host, port, reuse=True)
    if sock is None:
        return None
    with sock:
        return sock.getsockname()[1]


class NodeModels:
    def __init__(self, *, model: str, max_model_len: int, preferred_port: int,
                 latency: LatencyModel | None = None, boot_seconds: float = 0.0,
                 served_version: str = DEFAULT_SERVED_VERSION) -> None:
        self.model = model
        self.served_version = check_served_version(served_version)
        self.model_fault = "none"  # MODEL_FAULTS: what models booted from now on get wrong
        # A real VM needs minutes to pull vLLM and load the model; the sandbox waits this long (on a
        # timer: `on_node_ready` must answer at once) so BOOTING MODEL is visible and the wait is exercised.
        self.boot_seconds = boot_seconds
        self.max_model_len = max_model_len
        self.latency = latency or LatencyModel()  # v5e defaults: TTFT ≈ 22 ms single stream, TPOT ≈ 7.8 ms
        self._lock = threading.Lock()
        self._emulators: dict[tuple[str, str], VllmEmulator] = {}
        self._boots: dict[tuple[str, str], _Boot] = {}  # models still "booting"
        # (zone, node id, namespace, {key: value}): what the node's VM writes as guest attributes.
        self.publish: Callable[[str, str, str, Mapping[str, str]], None] | None = None
        # (zone, node id) → the node's compile cache (`gs://bucket/key`), None without a bucket.
        self.cache_location: Callable[[str, str], str | None] | None = None
        self.caches: set[str] = set()  # the caches saved so far (CloudSandbox.compile_caches)
        self.crash_loop: str | None = None  # fault: the error line every booting vLLM exits with
        self.boots: list[tuple[str, float]] = []  # (cache, seconds) of every boot that reached serving
        # Each stack starts at its own random host, so that stacks of test runs side by side on
        # one machine rarely look at the same addresses.
        self._next_host = random.randint(FIRST_HOST, LAST_HOST)
        # (zone, node id) → the API key the node's VM reads at boot (None: vLLM runs without --api-key).
        self.boot_api_key: Callable[[str, str], str | None] | None = None
        self.node_net = _bindable(f"{NODE_NET}{FIRST_HOST}", 0) is not None
        probe_host = f"{NODE_NET}{FIRST_HOST}" if self.node_net else "127.0.0.1"
        self.port = _bindable(probe_host, preferred_port) or _bindable(probe_host, 0) or preferred_port
        if self.port != preferred_port:
            log.warning("sandbox: port %d is taken; sandbox nodes serve their model on port %d", preferred_port,
                        self.port)

    def on_node_ready(self, zone: str, node_id: str, labels: dict[str, str]) -> str | None:
        """Start the node's model; returns the node's external IP (None: the emulator's default)."""
        api_key = self.boot_api_key(zone, node_id) if self.boot_api_key is not None else None
        for host in self._candidate_hosts():
            # Held from now until the model serves on it: the address the bot is told is ours.
            sock = _reserve(host, self.port, reuse=not self.node_net)
            if sock is None:
                continue
            emulator = VllmEmulator(model=self.model, latency=self.latency, label=LABEL, max_model_len=self.max_model_len,
                                    host=host, port=self.port, api_key=api_key, sock=sock,
                                    served_version=self.served_version, model_fault=self.model_fault)
            with self._lock:
                self._emulators[(zone, node_id)] = emulator
            if self.boot_seconds <= 0:
                self._run_boot(zone, node_id, emulator, threading.Event())
            else:
                boot = _Boot(functools.partial(self._run_boot, zone, node_id, emulator))
                with self._lock:
                    self._boots[(zone, node_id)] = boot
                boot.start()
            return host
        log.warning("sandbox: no free address for the model of node %s in %s", node_id, zone)
        return None

    def _run_boot(self, zone: str, node_id: str, emulator: VllmEmulator, cancelled: threading.Event) -> None:
        started = time.monotonic()
        location = self.cache_location(zone, node_id) if self.cache_location is not None else None
        cache = bp.CACHE_WARM if location is not None and location in self.caches else bp.CACHE_COLD
        self._publish(zone, node_id, {bp.CACHE_KEY: cache, bp.RESTARTS_KEY: "0", bp.LAST_ERROR_KEY: ""})
        for phase, share in COLD_PHASES:
            if phase == bp.COMPILING and self.crash_loop is not None:
                return self._crash_loop(zone, node_id, cancelled)
            if phase == bp.COMPILING and cache == bp.CACHE_WARM:
                share = WARM_COMPILE_SHARE
            self._publish(zone, node_id, {}, phase=phase)
            if cancelled.wait(share * self.boot_seconds):
                return None
        self._boot(zone, node_id, emulator)
        self._publish(zone, node_id, {}, phase=bp.SERVING)
        with self._lock:
            self.boots.append((cache, time.monotonic() - started))
        if location is not None:
            self.caches.add(location)  # the VM saves its cache once, after the first READY
        return None

    def _crash_loop(self, zone: str, node_id: str, cancelled: threading.Event) -> None:
        """vLLM exits while loading the model; Docker restarts it; again, until the node goes (or,
        booting instantly, after two crashes: nothing else would ever end the loop)."""
        restarts = 0
        while not cancelled.is_set() and (self.boot_seconds > 0 or restarts < 2):
            restarts += 1
            self._publish(zone, node_id, {bp.RESTARTS_KEY: str(restarts), bp.LAST_ERROR_KEY: self.crash_loop or ""},
                          phase=bp.CRASHED)
            if cancelled.wait(CRASH_PAUSE_SHARE * self.boot_seconds):
                return
            self._publish(zone, node_id, {}, phase=bp.LOADING_WEIGHTS)
            if cancelled.wait(CRASH_PAUSE_SHARE * self.boot_seconds):
                return

    def _publish(self, zone: str, node_id: str, values: Mapping[str, str], *, phase: str | None = None) -> None:
        if self.publish is None:
            return
        values = dict(values)
        if phase is not None:
            values.update({bp.PHASE_KEY: phase, bp.PHASE_SINCE_KEY: time.strftime(bp.SINCE_FORMAT, time.gmtime())})
        self.publish(zone, node_id, bp.NAMESPACE, values)

    def _boot(self, zone: str, node_id: str, emulator: VllmEmulator) -> None:
        with self._lock:
            self._boots.pop((zone, node_id), None)
            if self._emulators.get((zone, node_id)) is not emulator:
                return  # the node went away while "booting"
        try:
            emulator.start()
        except RuntimeError:
            pass  # the node went away just now, and its model was stopped before it started
        except OSError as error:
            log.warning("sandbox: the model of node %s could not listen on %s:%d: %s", node_id, emulator.host,
                        self.port, error)

    def on_node_gone(self, zone: str, node_id: str) -> None:
        with self._lock:
            emulator = self._emulators.pop((zone, node_id), None)
            boot = self._boots.pop((zone, node_id), None)
        if boot is not None:
            boot.cancel()
        if emulator is not None:
            emulator.stop()

    def emulator_for(self, zone: str, node_id: str) -> VllmEmulator | None:
        with self._lock:
            return self._emulators.get((zone, node_id))

    def booting(self) -> list[tuple[str, str]]:
        """Nodes whose model is still "booting" (its start is pending on a timer)."""
        with self._lock:
            return list(self._boots)

    def running(self) -> dict[tuple[str, str], str]:
        with self._lock:
            return {key: emu.base_url for key, emu in self._emulators.items()}

    def stop_all(self) -> None:
        with self._lock:
            emulators = list(self._emulators.values())
            self._emulators.clear()
            boots = list(self._boots.values())
            self._boots.clear()
        for boot in boots:
            boot.cancel()
        for emulator in emulators:
            emulator.stop()

    def _candidate_hosts(self) -> list[str]:
        if not self.node_net:
            return ["127.0.0.1"]
        with self._lock:
            start = self._next_host
            self._next_host = start + 1 if start < LAST_HOST else FIRST_HOST
        count = LAST_HOST - FIRST_HOST + 1
        return [f"{NODE_NET}{FIRST_HOST + (start - FIRST_HOST + i) % count}" for i in range(32)]
