"""A sandbox TPU VM: runs the node's real startup script under bash, as the guest agent would.

When a sandbox node becomes ACTIVE, its VM is a directory (its disk: `/var/lib/tpubot` and a `bin`
of the tools a TPU VM image has) and three servers: its metadata server (its service account's
tokens, its project and instance attributes, guest attributes that the TPU API serves back), its
Docker daemon (infra/sandbox/docker.py) pulling from the registry stand-in, and the bash process
running the `startup-script` the node was created with — the bytes the bot sent, unchanged. The
script finds the metadata server through GCE_METADATA_HOST and Docker through DOCKER_HOST (both
the standard variables); everything else it reaches is in the script.

The VM's PATH holds only `VM_TOOLS` (coreutils, curl, python3, tar, …: what the TPU VM's Ubuntu
image ships) and the stand-ins for `docker`, `hostname` (the node's address), `sleep` and `timeout`
(both on the VM's clock; `timeout` also allows `TIMEOUT_ALLOWANCE_REAL_SECONDS` of wall time for
the command's own processes, which run at the host's speed, not the VM's). No Cloud
SDK: a script that needs `gcloud` fails here as it would on the VM.

Time on the VM runs `VM_SECONDS_PER_SECOND / time_scale` times faster than wall time: `sleep 60`
takes a second at SANDBOX_TIME_SCALE=1, and the Docker daemon's pulls and vLLM's load and compile
are counted on the same clock. `slept` adds up what the script waited, in VM seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from infra.sandbox.docker import CLI_SCRIPT, DockerDaemon, VllmHost
from infra.sandbox.iam import Iam
from infra.sandbox.metadata_server import MetadataServer, VmIdentity

VM_SECONDS_PER_SECOND = 60.0  # at SANDBOX_TIME_SCALE=1 a VM minute is a second
# How often the script's watcher looks, in wall time: often enough that a phase of a second shows,
# seldom enough that twenty VMs of a test do not keep two cores busy spawning `docker` and `curl`.
WATCH_INTERVAL_REAL_SECONDS = 0.5
# Wall time `timeout` adds to a VM-clock budget. The command under it (the `docker` CLI: bash, curl and
# the daemon stand-in) costs real milliseconds that do not shrink with the VM's clock: `timeout 60`
# is 180 ms at the tests' clock, which a loaded host has spent before the daemon answered. What the
# daemon waits on the VM's clock (a pull, a load) still runs out a budget; only the spawning does not.
TIMEOUT_ALLOWANCE_REAL_SECONDS = 2
# What the TPU VM image (Ubuntu 22.04) has on its PATH that the startup script may use.
VM_TOOLS = ("bash", "sh", "cat", "cp", "mv", "rm", "mkdir", "mktemp", "chmod", "ls", "ln", "touch", "date", "env",
            "printf", "echo", "true", "false", "test", "[", "head", "tail", "cut", "tr", "sed", "grep", "awk", "sort",
            "uniq", "wc", "tee", "xargs", "find", "basename", "dirname", "readlink", "stat", "id", "uname", "base64",
            "sha256sum", "md5sum", "tar", "gzip", "curl", "python3")

SLEEP_SCRIPT = """#!/bin/bash
# sleep on the sandbox VM's clock (infra/sandbox/tpu_vm.py): a VM second is VM_MS_PER_SECOND real ms.
seconds=${1%s}
printf '%s\\n' "$seconds" >> "$VM_SLEEP_LOG"
ms=$(( ${seconds%%.*} * VM_MS_PER_SECOND ))
printf -v real '%d.%03d' $((ms / 1000)) $((ms % 1000))
exec REAL_SLEEP "$real"
"""
TIMEOUT_SCRIPT = """#!/bin/bash
# timeout on the sandbox VM's clock, as sleep: DURATION is VM seconds, plus VM_TIMEOUT_ALLOWANCE_MS of
# wall time for the command's own processes (infra/sandbox/tpu_vm.py).
seconds=${1%s}
shift
ms=$(( ${seconds%%.*} * VM_MS_PER_SECOND + VM_TIMEOUT_ALLOWANCE_MS ))
printf -v real '%d.%03d' $((ms / 1000)) $((ms % 1000))
exec REAL_TIMEOUT "$real" "$@"
"""
HOSTNAME_SCRIPT = """#!/bin/bash
# hostname as the sandbox TPU VM answers it: -I is the node's address (its VPC IP on a real VM).
case "${1:-}" in
  -I | --all-ip-addresses) echo "ADDRESS " ;;
  *) echo "NAME" ;;
esac
"""


class SandboxVm:
    def __init__(self, *, name: str, address: str, script: str, identity: VmIdentity, iam: Iam, registry_url: str,
                 vllm: VllmHost, release_of, time_scale: float, on_guest_attribute) -> None:
        self.name = name
        self.address = address
        self.script = script
        # One clock for the script's `sleep` (whole milliseconds a VM second) and the daemon's waits.
        self.ms_per_second = max(1, round(1000 * max(time_scale, 1e-6) / VM_SECONDS_PER_SECOND))
        self.speed = 1000 / self.ms_per_second
        self.root = Path(tempfile.mkdtemp(prefix=f"tpubot-vm-{name}-"))
        self.metadata = MetadataServer(identity, iam, on_guest_attribute=on_guest_attribute)
        self.docker = DockerDaemon(registry_url, vllm, release_of)
        self.process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stopped = False

    # --- the VM's disk -------------------------------------------------------------------------
    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def state_dir(self) -> Path:
        return self.root / "var" / "lib" / "tpubot"

    @property
    def path(self) -> str:
        return str(self.bin)

    def _install(self) -> None:
        self.bin.mkdir(parents=True)
        (self.root / "tmp").mkdir()
        (self.root / "root").mkdir()
        for tool in VM_TOOLS:
            found = shutil.which(tool, path="/usr/local/bin:/usr/bin:/bin")
            if found and tool not in ("sleep", "timeout", "hostname", "docker", "gcloud"):
                (self.bin / tool).symlink_to(found)
        real_sleep = shutil.which("sleep", path="/usr/bin:/bin") or "/bin/sleep"
        real_timeout = shutil.which("timeout", path="/usr/bin:/bin") or "/usr/bin/timeout"
        stand_ins = {"docker": CLI_SCRIPT, "sleep": SLEEP_SCRIPT.replace("REAL_SLEEP", real_sleep),
                     "timeout": TIMEOUT_SCRIPT.replace("REAL_TIMEOUT", real_timeout),
                     "hostname": HOSTNAME_SCRIPT.replace("ADDRESS", self.address).replace("NAME", self.name)}
        for name, text in stand_ins.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        (self.root / "startup-script").write_text(self.script)

    def environment(self) -> dict[str, str]:
        return {
            "PATH": self.path, "HOME": str(self.root / "root"), "TMPDIR": str(self.root / "tmp"), "LANG": "C.UTF-8",
            "GCE_METADATA_HOST": self.metadata.host, "DOCKER_HOST": self.docker.docker_host,
            "TPUBOT_STATE_DIR": str(self.state_dir),
            # Whole VM seconds (the script does integer arithmetic with it), at least one.
            "TPUBOT_WATCH_INTERVAL_SECONDS": str(max(1, round(WATCH_INTERVAL_REAL_SECONDS * self.speed))),
            "VM_MS_PER_SECOND": str(self.ms_per_second),
            "VM_TIMEOUT_ALLOWANCE_MS": str(TIMEOUT_ALLOWANCE_REAL_SECONDS * 1000),
            "VM_SLEEP_LOG": str(self.root / "slept.log"),
        }

    # --- life ----------------------------------------------------------------------------------
    def boot(self, *, trace: bool = False) -> SandboxVm:
        """Start the VM's servers and run its startup script (in the background, as at a VM's boot);
        `trace` runs it under `bash -x`, as someone debugging it on the VM would."""
        with self._lock:  # a stop() that came first wins; one that comes now waits for the boot to stand
            if self._stopped:
                return self
            self._install()
            self.metadata.start()
            self.docker.start()
            with (self.root / "startup-script.log").open("wb") as log:
                self.process = subprocess.Popen(
                    [str(self.bin / "bash"), *(["-x"] if trace else []), str(self.root / "startup-script")],
                    env=self.environment(),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    cwd=str(self.root))
        return self

    def stop(self) -> None:
        """The node is gone: everything the VM ran stops (the script and the watcher it left behind)."""
        with self._lock:
            self._stopped = True
            process = self.process
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)
        self.docker.stop()
        self.metadata.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def sleep(self, vm_seconds: float, cancelled: threading.Event) -> bool:
        """Wait `vm_seconds` of the VM's clock; True when `cancelled` came first."""
        return cancelled.wait(vm_seconds / self.speed)

    # --- what happened, for tests and the shell ------------------------------------------------
    @property
    def slept(self) -> float:
        """VM seconds the script (and its watcher) spent in `sleep`."""
        try:
            lines = (self.root / "slept.log").read_text().split()
        except FileNotFoundError:
            return 0.0
        return sum(float(value) for value in lines if value.replace(".", "", 1).isdigit())

    @property
    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def log(self) -> str:
        try:
            return (self.root / "startup-script.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""
