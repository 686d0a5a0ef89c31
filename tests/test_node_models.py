"""Sandbox nodes hold their address from the moment a node is seen (infra/sandbox/node_models.py):
another process cannot take it while the VM boots, a node that goes away during the boot leaves
nothing running, and the model answers as the release of the image the VM's script pulled."""

from __future__ import annotations

import socket

import httpx
import waiting

from sandbox_vms import VmWorld, wait_for_phase


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp and uvicorn bind
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_nodes_address_is_held_while_its_vm_boots_then_served():
    with VmWorld() as vms:
        vm = vms.boot()
        assert not _can_bind(vm.address, vms.models.port)  # held before the model listens
        wait_for_phase(vm, "serving")
        url = f"http://{vm.address}:{vms.models.port}/health"
        assert _answers(url)
        assert vms.models.emulator_for("us-west4-a", vm.name).base_url.startswith(f"http://{vm.address}:")


def test_a_node_gone_before_its_model_served_leaves_nothing_running():
    with VmWorld(time_scale=5.0) as vms:  # a slow VM clock: the node goes while its VM is still booting
        vm = vms.boot()
        assert vms.models.booting() == [("us-west4-a", vm.name)]
        vms.models.on_node_gone("us-west4-a", vm.name)
        assert vms.models.booting() == [] and vms.models.running() == {}
        assert vm.process is None or vm.exit_code is not None  # the script (and its watcher) stopped or never ran
        waiting.wait_until(lambda: _can_bind(vm.address, vms.models.port), timeout=5, what="the address given back")
        assert not vm.root.exists()


def test_models_started_after_a_fault_is_set_have_it_and_answer_as_the_images_release():
    with VmWorld() as vms:
        healthy = vms.boot()
        wait_for_phase(healthy, "serving")
        vms.models.model_fault = "tool_calls_as_text"
        faulty = vms.boot(vms.config(vllm={"image": "vllm/vllm-tpu:v0.33.0"}))
        wait_for_phase(faulty, "serving")
        first, second = (vms.models.emulator_for("us-west4-a", vm.name) for vm in (healthy, faulty))
        assert (first.model_fault, second.model_fault) == ("none", "tool_calls_as_text")
        assert httpx.get(f"{first.base_url.removesuffix('/v1')}/version", timeout=5).json() == {"version": "0.32.0"}
        assert httpx.get(f"{second.base_url.removesuffix('/v1')}/version", timeout=5).json() == {"version": "0.33.0"}
        assert second.fingerprint == "vllm-0.33.0-sandbox" and first.fingerprint == "vllm-0.32.0-sandbox"
