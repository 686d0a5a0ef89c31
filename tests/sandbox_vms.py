"""A sandbox project with TPU VMs, without the bot: for tests of what the startup script does on a VM.

`VmWorld(world)` starts the emulated project (CloudSandbox: TPU API, project APIs with IAM, the
registry) and a NodeModels attached to it; `boot(config)` renders the startup script for that
project (its Secret Manager and Storage URLs are the emulator's, the only thing a deployment's
settings would change) and boots a sandbox TPU VM running it, as the node's VM would.
"""

from __future__ import annotations

from dataclasses import replace

from infra import boot_phases
from infra.sandbox.node_models import NodeModels
from infra.sandbox.tpu_vm import SandboxVm
from infra.sandbox.vllm import LatencyModel
from infra.sandbox.world import CloudSandbox, SandboxWorld
from infra.startup_script import StartupScriptConfig, render_startup_script
from waiting import wait_until

PROJECT = "my-proj"
ZONE = "us-west4-a"
TOKEN = "hf_" + "Zq9" * 12  # what the HF token secret holds in these tests
API_KEY = "key-" + "Xw7" * 12  # a lease's model API key in these tests
KEY_SECRET_ID = "tpubot-model-key-l1"


class VmWorld:
    def __init__(self, world: SandboxWorld | None = None, *, time_scale: float = 0.2) -> None:
        self.world = world or SandboxWorld(secrets={"hf-token": TOKEN, KEY_SECRET_ID: API_KEY})
        self.cloud = CloudSandbox(self.world, project=PROJECT).start()
        self.models = NodeModels(model="google/gemma-4-E2B-it", max_model_len=16384, preferred_port=0,
                                 latency=LatencyModel.instant(), time_scale=time_scale)
        self.models.attach(self.cloud)
        self._nodes = 0

    @property
    def project_api(self):
        assert self.cloud.project_api is not None
        return self.cloud.project_api

    def config(self, **changes) -> StartupScriptConfig:
        base = StartupScriptConfig(project=PROJECT, secret_manager_url=self.project_api.base_url,
                                   storage_url=self.project_api.base_url,
                                   api_key_secret=f"projects/{PROJECT}/secrets/{KEY_SECRET_ID}/versions/latest")
        vllm = changes.pop("vllm", None)
        config = replace(base, **changes)
        return replace(config, vllm=replace(config.vllm, port=self.models.port, **(vllm or {})))

    def boot(self, config: StartupScriptConfig | None = None, *, script: str | None = None, trace: bool = False,
             service_account: str = "", guest_attributes: bool = True) -> SandboxVm:
        self._nodes += 1
        text = script if script is not None else render_startup_script(config or self.config())
        attributes = {"startup-script": text, "enable-guest-attributes": "TRUE" if guest_attributes else "FALSE"}
        vm = self.models.boot_vm(ZONE, f"node-t{self._nodes}", script=text, attributes=attributes,
                                 service_account=service_account or self.world.node_account, trace=trace)
        assert vm is not None, "no free sandbox address"
        return vm

    def stop(self) -> None:
        self.models.stop_all()
        self.cloud.stop()

    def __enter__(self) -> VmWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def phases(vm: SandboxVm) -> list[str]:
    return [value for name, value in vm.metadata.writes if name == f"{boot_phases.NAMESPACE}/phase"]


def attribute(vm: SandboxVm, key: str) -> str | None:
    return vm.metadata.guest_attributes.get(f"{boot_phases.NAMESPACE}/{key}")


def wait_for_phase(vm: SandboxVm, phase: str, timeout: float = 60.0) -> None:
    wait_until(lambda: attribute(vm, "phase") == phase, timeout=timeout,
               what=lambda: f"phase {phase} ({script_state(vm)}; phases so far: {phases(vm)}; log: {vm.log()[-1500:]})")


def script_state(vm: SandboxVm) -> str:
    if vm.process is None:
        return "the startup script was not started"
    code = vm.exit_code
    return f"the startup script is running (pid {vm.process.pid})" if code is None else f"the startup script exited {code}"
