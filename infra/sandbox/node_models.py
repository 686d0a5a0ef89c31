"""The sandbox's TPU VMs and the models they serve: one VM per ACTIVE node, running its real startup script.

The TPU emulator calls `on_node_ready` the first time a node is looked at; this reserves the node's
own loopback address, `127.1.N` (`127.0.1.N`), and boots its VM (infra/sandbox/tpu_vm.py): the
node's `startup-script` runs under bash against the VM's metadata server, the project's APIs and a
Docker daemon stand-in, and everything the card shows comes from the script's own guest-attribute
writes. When the script's `docker run` passes vLLM's argument parser, the container loads,
compiles and serves a `VllmEmulator` (labelled as the sandbox model in every response) on the
node's address at the port the script passed, with the API key the script read from Secret
Manager, answering as the release of the image the script pulled — so the bot reaches it exactly
as it reaches a real TPU VM: node external IP → `http://IP:{MODEL_PORT}/v1`. `on_node_gone` stops
the VM and its model.

Faults for tests: `model_fault` (one of `infra.sandbox.vllm.MODEL_FAULTS`) for every model started
from then on; `crash_loop` (an error line) makes every booting vLLM exit with it after loading, and
Docker restart it, until the node goes; `disk_full` leaves no room for the image, and `pull_seconds`
sets how long its pull takes, on VMs booted from then on. Registry and daemon faults live on the registry
(`CloudSandbox.registry`) and on each VM's `docker`.

A node's address is reserved (a bound socket, held) when the node is first seen and served on
when its model starts, so no other process — another test run's sandbox, say — can take it in
between. Fallbacks, so the sandbox works anywhere: if the configured port is taken on the 127.0.1.x
range, another free port is chosen for the whole stack (`port`); where only 127.0.0.1 can be bound
(some non-Linux systems) nodes share it, one model at a time.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
from typing import TYPE_CHECKING

from infra.sandbox.docker import PULL_SECONDS, Container, VllmHost
from infra.sandbox.metadata_server import VmIdentity
from infra.sandbox.tpu_vm import SandboxVm
from infra.sandbox.vllm import DEFAULT_SERVED_VERSION, LatencyModel, VllmEmulator
from infra.sandbox.vllm.served_version import check_served_version, served_version_for
from infra.sandbox.vllm_serve_args import DEFAULT_RELEASE, RECORDED, ServeArgs
from infra.vllm_flags import DEFAULT_MM_LIMITS

if TYPE_CHECKING:
    from infra.sandbox.world import CloudSandbox

log = logging.getLogger(__name__)

NODE_NET = "127.0.1."
FIRST_HOST, LAST_HOST = 2, 254
LABEL = "sandbox model"


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


def parser_release(image: str) -> str:
    """Whose recorded `vllm serve` parser checks a container of `image`: its release's when one is
    recorded, else the default image's (0.32.0)."""
    from infra.vllm_images import served_vllm_version

    version = served_vllm_version(image)
    return version if version in RECORDED else DEFAULT_RELEASE


class NodeModels:
    def __init__(self, *, model: str, max_model_len: int, preferred_port: int,
                 latency: LatencyModel | None = None, time_scale: float = 1.0,
                 served_version: str = DEFAULT_SERVED_VERSION) -> None:
        self.model = model
        self.served_version = check_served_version(served_version)  # what a model answers as by default
        self.model_fault = "none"  # MODEL_FAULTS: what models started from now on get wrong
        self.time_scale = time_scale  # the VMs' clocks run VM_SECONDS_PER_SECOND / time_scale
        self.max_model_len = max_model_len
        self.latency = latency or LatencyModel()  # v5e defaults: TTFT ≈ 22 ms single stream, TPOT ≈ 7.8 ms
        self.crash_loop: str | None = None  # fault: the error line every booting vLLM exits with
        self.disk_full = False  # fault: the Docker daemon of every VM booted from now on has no room for the image
        self.pull_seconds = PULL_SECONDS  # fault when longer: VM seconds each of those daemons takes to pull it
        self.boots: list[tuple[str, float]] = []  # (cache, VM seconds) of every model start that served
        self.cloud: CloudSandbox | None = None  # the project the nodes live in (set by `attach`)
        self._lock = threading.Lock()
        self._vms: dict[tuple[str, str], SandboxVm] = {}
        self._held: dict[tuple[str, str], socket.socket] = {}  # reserved, not yet served on
        # Each stack starts at its own random host, so that stacks of test runs side by side on
        # one machine rarely look at the same addresses.
        self._next_host = random.randint(FIRST_HOST, LAST_HOST)
        self.node_net = _bindable(f"{NODE_NET}{FIRST_HOST}", 0) is not None
        probe_host = f"{NODE_NET}{FIRST_HOST}" if self.node_net else "127.0.0.1"
        self.port = _bindable(probe_host, preferred_port) or _bindable(probe_host, 0) or preferred_port
        if preferred_port and self.port != preferred_port:
            log.warning("sandbox: port %d is taken; sandbox nodes serve their model on port %d", preferred_port,
                        self.port)

    def attach(self, cloud: CloudSandbox) -> None:
        self.cloud = cloud

    # --- the TPU emulator's hooks --------------------------------------------------------------
    def on_node_ready(self, zone: str, node_id: str, labels: dict[str, str]) -> str | None:
        """Boot the node's VM; returns the node's external IP (None: the emulator's default)."""
        cloud = self._cloud()
        assert cloud.tpu is not None
        metadata = cloud.tpu.node_metadata(zone, node_id)
        vm = self.boot_vm(zone, node_id, script=metadata.get("startup-script", ""), attributes=metadata,
                          service_account=cloud.node_service_account(zone, node_id))
        return vm.address if vm is not None else None

    def boot_vm(self, zone: str, node_id: str, *, script: str, attributes: dict[str, str],
                service_account: str, trace: bool = False) -> SandboxVm | None:
        """A VM for (zone, node) on a reserved address, running `script` as its startup script."""
        cloud = self._cloud()
        project = cloud.project_api
        assert project is not None
        for host in self._candidate_hosts():
            # Held from now until the model serves on it: the address the bot is told is ours.
            sock = _reserve(host, self.port, reuse=not self.node_net)
            if sock is None:
                continue
            key = (zone, node_id)
            identity = VmIdentity(
                project=project.project, project_number=project.project_number, service_account=service_account,
                hostname=node_id, attributes=attributes,
                guest_attributes_allowed=not cloud.world.guest_attributes_disabled)
            vm = SandboxVm(
                name=node_id, address=host, script=script, identity=identity, iam=project.iam,
                registry_url=cloud.registry_url, vllm=self._vllm_host(key, host), release_of=parser_release,
                time_scale=self.time_scale,
                on_guest_attribute=lambda ns, k, v, z=zone, n=node_id: cloud.publish(z, n, ns, k, v))
            vm.docker.disk_full = self.disk_full
            vm.docker.pull_seconds = self.pull_seconds
            with self._lock:
                self._held[key] = sock
                self._vms[key] = vm
            # The VM boots beside the TPU API's answer, as a real one does after its node is up: the
            # caller that first saw the node ACTIVE does not wait for a disk, two servers and a fork.
            threading.Thread(target=vm.boot, kwargs={"trace": trace}, name=f"vm-boot-{node_id}", daemon=True).start()
            return vm
        log.warning("sandbox: no free address for the model of node %s in %s", node_id, zone)
        return None

    def _cloud(self) -> CloudSandbox:
        if self.cloud is None or self.cloud.tpu is None or self.cloud.project_api is None:
            raise RuntimeError("NodeModels.attach(cloud) first: a node's VM runs against its project")
        return self.cloud

    def on_node_gone(self, zone: str, node_id: str) -> None:
        with self._lock:
            vm = self._vms.pop((zone, node_id), None)
            sock = self._held.pop((zone, node_id), None)
        if vm is not None:
            vm.stop()
        if sock is not None:
            sock.close()

    # --- what a VM's container needs -------------------------------------------------------------
    def _vllm_host(self, key: tuple[str, str], host: str) -> VllmHost:
        def sleep(vm_seconds: float, cancelled: threading.Event) -> bool:
            vm = self.vm(*key)
            speed = vm.speed if vm is not None else 60.0
            return cancelled.wait(vm_seconds / speed)

        def served(cache: str, vm_seconds: float) -> None:
            with self._lock:
                self.boots.append((cache, vm_seconds))

        return VllmHost(address=host, sleep=sleep, start_model=lambda args, c: self._start_model(key, host, args, c),
                        stop_model=lambda emulator: emulator.stop(), crash_line=lambda: self.crash_loop, served=served)

    def _start_model(self, key: tuple[str, str], host: str, args: ServeArgs, container: Container) -> VllmEmulator:
        port = int(args.get("port", 8000))
        with self._lock:
            sock = self._held.pop(key, None) if port == self.port else None
        api_keys = args.get("api_key") or []
        names = args.get("served_model_name") or [args.get("model_tag", self.model)]
        emulator = VllmEmulator(
            model=names[0], latency=self.latency, label=LABEL,
            max_model_len=int(args.get("max_model_len", self.max_model_len)), host=host, port=port,
            # `--api-key` if given, else the container's VLLM_API_KEY (vLLM's register.py: the flag wins).
            api_key=api_keys[0] if api_keys else container.env.get("VLLM_API_KEY"), sock=sock,
            served_version=served_version_for(container.image), model_fault=self.model_fault,
            limit_mm_per_prompt=json.dumps(args.get("limit_mm_per_prompt") or json.loads(DEFAULT_MM_LIMITS)))
        emulator.start()
        return emulator

    # --- views -----------------------------------------------------------------------------------
    def vm(self, zone: str, node_id: str) -> SandboxVm | None:
        with self._lock:
            return self._vms.get((zone, node_id))

    def emulator_for(self, zone: str, node_id: str) -> VllmEmulator | None:
        vm = self.vm(zone, node_id)
        serving = vm.docker.emulators() if vm is not None else []
        return serving[0] if serving else None

    def booting(self) -> list[tuple[str, str]]:
        """Nodes whose VM serves no model yet."""
        with self._lock:
            keys = list(self._vms)
        return [key for key in keys if self.emulator_for(*key) is None]

    def running(self) -> dict[tuple[str, str], str]:
        with self._lock:
            keys = list(self._vms)
        return {key: emulator.base_url for key in keys if (emulator := self.emulator_for(*key)) is not None}

    def stop_all(self) -> None:
        with self._lock:
            keys = list(self._vms)
        for key in keys:
            self.on_node_gone(*key)

    def _candidate_hosts(self) -> list[str]:
        if not self.node_net:
            return ["127.0.0.1"]
        with self._lock:
            start = self._next_host
            self._next_host = start + 1 if start < LAST_HOST else FIRST_HOST
        count = LAST_HOST - FIRST_HOST + 1
        return [f"{NODE_NET}{FIRST_HOST + (start - FIRST_HOST + i) % count}" for i in range(32)]

