"""Sandbox node models hold their address from the moment a node is seen (infra/sandbox/node_models.py):
another process cannot take it while the model "boots", and a node that goes away during the boot
leaves nothing listening."""

from __future__ import annotations

import socket

import httpx
import waiting

from infra.sandbox.node_models import NodeModels
from infra.sandbox.vllm import LatencyModel


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp and uvicorn bind
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _models(boot_seconds: float) -> NodeModels:
    return NodeModels(model="google/gemma-4-E2B-it", max_model_len=16384, preferred_port=0,
                      latency=LatencyModel.instant(), boot_seconds=boot_seconds)


def test_a_nodes_address_is_held_while_its_model_boots_then_served():
    models = _models(boot_seconds=0.5)
    try:
        host = models.on_node_ready("us-west4-a", "node-1", {}) or "127.0.0.1"
        assert not _can_bind(host, models.port)  # held before the model listens
        url = f"http://{host}:{models.port}/v1/models"
        waiting.wait_until(lambda: _answers(url), timeout=15, what="the node's model")
        assert httpx.get(url, timeout=5).json()["data"][0]["id"] == "google/gemma-4-E2B-it"
    finally:
        models.stop_all()


def test_a_node_gone_before_its_model_booted_leaves_nothing_listening():
    models = _models(boot_seconds=0.3)
    host = models.on_node_ready("us-west4-a", "node-2", {}) or "127.0.0.1"
    assert models.booting() == [("us-west4-a", "node-2")]
    models.on_node_gone("us-west4-a", "node-2")
    # The pending boot is cancelled with the node: no model starts that nobody would stop.
    assert models.booting() == [] and models.running() == {}
    waiting.wait_until(lambda: _can_bind(host, models.port), timeout=5, what="the address to be given back")
    assert not _answers(f"http://{host}:{models.port}/v1/models")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False



def test_models_booted_after_a_fault_is_set_have_it_and_answer_as_the_configured_release():
    models = NodeModels(model="google/gemma-4-E2B-it", max_model_len=16384, preferred_port=0,
                        latency=LatencyModel.instant(), served_version="0.33.0")
    try:
        models.on_node_ready("us-west4-a", "node-3", {})
        models.model_fault = "tool_calls_as_text"
        host = models.on_node_ready("us-west4-a", "node-4", {}) or "127.0.0.1"
        healthy, faulty = models.emulator_for("us-west4-a", "node-3"), models.emulator_for("us-west4-a", "node-4")
        assert (healthy.model_fault, faulty.model_fault) == ("none", "tool_calls_as_text")
        url = f"http://{host}:{models.port}/version"
        waiting.wait_until(lambda: _answers(url), timeout=15, what="the node's model")
        assert httpx.get(url, timeout=5).json() == {"version": "0.33.0"}
    finally:
        models.stop_all()
