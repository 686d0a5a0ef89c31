"""`docker` as a sandbox TPU VM knows it: a CLI stand-in on the VM's PATH and the daemon it talks to.

The CLI (`CLI_SCRIPT`, bash and curl, as light as the real client) sends its argv and environment
to this VM's daemon stand-in at DOCKER_HOST and prints what the daemon answers, with its exit code:
what the real `docker` prints for the commands the startup script uses.

- `pull IMAGE`: the manifest from the registry stand-in (infra/sandbox/registry.py), as Docker Hub
  or Artifact Registry answers; its refusals become the daemon's own lines (`Error response from
  daemon: toomanyrequests: …`, `manifest for X not found: manifest unknown: manifest unknown`), and
  a full disk (`disk_full`) `failed to register layer: …: no space left on device`. A pull takes
  `pull_seconds` of the VM's clock (`PULL_SECONDS` unless a test slows the link).
- `run --detach --name N --restart unless-stopped -v H:C -e NAME … --entrypoint vllm IMAGE serve …`:
  a container whose `vllm serve` arguments are parsed by vLLM's own parser as its release recorded
  it (infra/sandbox/vllm_serve_args.py). One it refuses exits at once with vLLM's text and Docker
  restarts it (100 ms, doubling, as dockerd does); one it takes loads, compiles (shorter with a
  compile cache in the mounted `/root/.cache/vllm`, where it leaves one) and then serves the
  sandbox vLLM on the VM's address, with the API key from `--api-key` or the container's
  VLLM_API_KEY, answering as the image's release.
- `login -u USER --password-stdin https://HOST`: checks the credentials with the registry (its
  `/v2/`) and keeps them for that host's pulls (Basic auth, as dockerd sends them), `Login Succeeded`.
- `inspect --format '{{.RestartCount}} {{.State.Running}} {{.State.StartedAt}}'`, `logs [--tail N]
  [--since T]`, `rm -f`.

Nothing else: an unknown command or `run` option is refused as the real CLI refuses it.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import requests

from infra.sandbox.http_server import ServerThread, handler_class, read_body, reply
from infra.sandbox.registry import split_reference
from infra.sandbox.vllm_serve_args import ServeArgs, ServeRefused, parse_serve_args

# VM seconds (infra/sandbox/tpu_vm.py's clock): a pull, then a container's load and compile.
PULL_SECONDS = 30.0
LOAD_SECONDS = 30.0
COLD_COMPILE_SECONDS = 60.0
WARM_COMPILE_SECONDS = 9.0  # a restored XLA cache: reference/vllm-tpu.md §4 has ~500 s warm against ~1,089 cold
RESTART_DELAY_SECONDS = 0.1  # dockerd's first restart delay; doubled each time, at most a minute

CLI_SCRIPT = r"""#!/bin/bash
# docker, as the sandbox TPU VM has it: the command goes to this VM's Docker daemon stand-in
# (DOCKER_HOST, infra/sandbox/docker.py), which answers with what the real CLI prints: stdout as the
# body, the exit code and stderr (base64) in headers. Few processes: the startup script's watcher
# calls it every few seconds. `--password-stdin` reads stdin, sent after the environment.
stdin=()
if [[ " $* " == *" --password-stdin "* ]]; then stdin=("DOCKER_CLI_STDIN=$(cat)"); fi
{ printf '%s\0' "$#" "$@"; env -0; if ((${#stdin[@]})); then printf '%s\0' "${stdin[@]}"; fi; } | curl -sS -i --max-time 600 --data-binary @- \
    "http://${DOCKER_HOST#tcp://}/cli" 2>/dev/null | {
  code=1 err="" answered=0
  while IFS= read -r line; do
    answered=1
    line=${line%$'\r'}
    [[ -z $line ]] && break
    case ${line,,} in
      x-docker-exit:*) code=${line#*: } ;;
      x-docker-stderr:*) err=${line#*: } ;;
    esac
  done
  if ((!answered)); then
    echo "Cannot connect to the Docker daemon at ${DOCKER_HOST}. Is the docker daemon running?" >&2
    exit 1
  fi
  cat
  if [[ -n $err ]]; then base64 -d <<<"$err" >&2; fi
  exit "$code"
}
"""

_RUN_VALUE_OPTIONS = {"--name", "--restart", "--network", "--net", "--shm-size", "-v", "--volume", "-e", "--env",
                      "--entrypoint", "-p", "--publish", "--log-driver", "--log-opt", "--user", "-u", "-w", "--workdir"}
_RUN_FLAGS = {"-d", "--detach", "--privileged", "--rm", "-i", "-t", "-it", "--init"}


@dataclass
class Result:
    code: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass
class Container:
    id: str
    name: str
    image: str
    entrypoint: str
    command: list[str]
    env: dict[str, str]
    mounts: dict[str, str]  # container path -> host path
    restart: str
    restart_count: int = 0
    exit_code: int | None = None
    running: bool = False
    started_at: float = 0.0
    log: list[tuple[float, str]] = field(default_factory=list)
    removed: threading.Event = field(default_factory=threading.Event)
    emulator: Any = None  # the sandbox VllmEmulator while it serves

    def write(self, *lines: str) -> None:
        now = time.time()
        self.log.extend((now, line) for line in lines)


@dataclass
class VllmHost:
    """What a container's vLLM needs from its VM and the sandbox (given by infra/sandbox/tpu_vm.py)."""

    address: str  # the VM's address: vLLM listens there on --port
    sleep: Callable[[float, threading.Event], bool]  # VM seconds, cancelled → True when cancelled
    start_model: Callable[[ServeArgs, Container], Any]  # the sandbox vLLM for these args, started
    stop_model: Callable[[Any], None]
    crash_line: Callable[[], str | None]  # the fault every booting vLLM exits with, if any
    served: Callable[[str, float], None]  # (cache warm/cold, VM seconds to serve) of each boot that served


class DockerDaemon:
    def __init__(self, registry_url: str, vllm: VllmHost, release_of: Callable[[str], str],
                 host: str = "127.0.0.1") -> None:
        self.registry_url = registry_url
        self.vllm = vllm
        self.release_of = release_of  # image -> the vLLM release whose parser its containers use
        self.disk_full = False
        self.pull_seconds = PULL_SECONDS  # VM seconds a pull takes: a registry far away or a slow link takes longer
        self.images: set[str] = set()
        self.containers: dict[str, Container] = {}
        self.calls: list[list[str]] = []  # every CLI argv, in order
        self.logins: dict[str, str] = {}  # registry host -> the Basic credentials `docker login` kept
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        handler = handler_class(self._serve_http, ("POST",), timeout=600)
        self._http = ServerThread((host, 0), handler, "docker-daemon")

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> DockerDaemon:
        self._http.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            containers = list(self.containers.values())
            self.containers.clear()
        for container in containers:
            self._remove(container)
        self._http.stop()

    @property
    def docker_host(self) -> str:
        return "tcp://" + self._http.root.removeprefix("http://")

    # --- the CLI -------------------------------------------------------------------------------
    def _serve_http(self, http: BaseHTTPRequestHandler) -> None:
        items = read_body(http).decode("utf-8", "replace").split("\0")
        count = int(items[0]) if items and items[0].isdigit() else 0
        env = dict(item.split("=", 1) for item in items[1 + count:] if "=" in item)
        result = self.cli(items[1:1 + count], env)
        reply(http, 200, result.stdout.encode(), "text/plain; charset=utf-8",
              {"X-Docker-Exit": str(result.code),
               "X-Docker-Stderr": base64.b64encode(result.stderr.encode()).decode()})

    def cli(self, argv: list[str], env: dict[str, str]) -> Result:
        with self._lock:
            self.calls.append(list(argv))
        if not argv:
            return Result(0, "Usage:  docker [OPTIONS] COMMAND\n")
        command, args = argv[0], argv[1:]
        handlers: dict[str, Callable[[list[str], dict[str, str]], Result]] = {
            "pull": self._pull, "login": self._login, "run": self._run, "inspect": self._inspect, "logs": self._logs, "rm": self._rm,
        }
        if command not in handlers:
            return Result(1, "", f"docker: '{command}' is not a docker command.\nSee 'docker --help'\n")
        return handlers[command](args, env)

    def _pull(self, args: list[str], env: dict[str, str]) -> Result:
        if len(args) != 1:
            return Result(1, "", '"docker pull" requires exactly 1 argument.\n')
        return self.pull(args[0])

    def _login(self, args: list[str], env: dict[str, str]) -> Result:
        user, server, rest = "", "", list(args)
        while rest:
            arg = rest.pop(0)
            if arg in ("-u", "--username") and rest:
                user = rest.pop(0)
            elif arg == "--password-stdin":
                continue
            elif arg.startswith("-"):
                return Result(125, "", f"unknown flag: {arg}\nSee 'docker login --help'.\n")
            else:
                server = arg
        password = env.get("DOCKER_CLI_STDIN", "").rstrip("\n")
        if not password:
            return Result(1, "", "Error: Cannot perform an interactive login from a non TTY device\n")
        host = server.removeprefix("https://").removeprefix("http://").rstrip("/")
        credentials = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        response = requests.get(f"{self.registry_url}/v2/", headers={"Host": host, "Authorization": credentials},
                                timeout=30)
        if response.status_code != 200:
            return Result(1, "", f"Error response from daemon: Get \"https://{host}/v2/\": unauthorized: "
                                 "authentication failed\n")
        with self._lock:
            self.logins[host] = credentials
        return Result(0, "Login Succeeded\n", "WARNING! Your password will be stored unencrypted in "
                                               "/root/.docker/config.json.\n")

    def pull(self, image: str) -> Result:
        host, repository, reference = split_reference(image)
        headers = {"Host": host, "Accept": "application/vnd.docker.distribution.manifest.v2+json"}
        if host in self.logins:
            headers["Authorization"] = self.logins[host]
        try:
            response = requests.get(f"{self.registry_url}/v2/{repository}/manifests/{reference}", headers=headers,
                                    timeout=30)
        except requests.RequestException as error:
            return Result(1, "", f"Error response from daemon: Get \"https://{host}/v2/\": {error}\n")
        errors = (response.json().get("errors") or [{}]) if response.status_code != 200 else []
        if response.status_code == 429:
            return Result(1, "", f"Error response from daemon: toomanyrequests: {errors[0].get('message', '')}\n")
        if response.status_code in (401, 403):
            return Result(1, "", f"Error response from daemon: Head \"https://{host}/v2/{repository}/manifests/"
                                 f"{reference}\": denied: {errors[0].get('message', '')}\n")
        if response.status_code == 404:
            return Result(1, "", f"Error response from daemon: manifest for {image} not found: manifest unknown: "
                                 "manifest unknown\n")
        if response.status_code != 200:
            return Result(1, "", f"Error response from daemon: {errors[0].get('message', response.reason)}\n")
        tag = reference if not reference.startswith("sha256:") else "latest"
        if image in self.images:
            return Result(0, f"{tag}: Pulling from {repository}\nDigest: {response.headers.get('Docker-Content-Digest')}\n"
                             f"Status: Image is up to date for {image}\n{image}\n")
        if self.vllm.sleep(self.pull_seconds, self._stopping):
            return Result(1, "", "Error response from daemon: context canceled\n")
        layers = response.json().get("layers") or []
        if self.disk_full:
            layer = (layers[-1]["digest"] if layers else "sha256:0").removeprefix("sha256:")
            return Result(1, f"{tag}: Pulling from {repository}\n",
                          f"failed to register layer: write /var/lib/docker/overlay2/{layer[:64]}/diff/usr/local/lib/"
                          "python3.12/site-packages/jaxlib/libjax_common.so: no space left on device\n")
        with self._lock:
            self.images.add(image)
        done = "".join(f"{layer['digest'].removeprefix('sha256:')[:12]}: Pull complete\n" for layer in layers)
        return Result(0, f"{tag}: Pulling from {repository}\n{done}Digest: "
                         f"{response.headers.get('Docker-Content-Digest')}\nStatus: Downloaded newer image for {image}\n"
                         f"{image}\n")

    def _run(self, args: list[str], env: dict[str, str]) -> Result:
        options: dict[str, list[str]] = {}
        rest = list(args)
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            name, eq, value = option.partition("=")
            if name in _RUN_FLAGS:
                continue
            if name not in _RUN_VALUE_OPTIONS:
                return Result(125, "", f"unknown flag: {name}\nSee 'docker run --help'.\n")
            if not eq:
                if not rest:
                    return Result(125, "", f"flag needs an argument: {name}\nSee 'docker run --help'.\n")
                value = rest.pop(0)
            options.setdefault(name.lstrip("-"), []).append(value)
        if not rest:
            return Result(125, "", '"docker run" requires at least 1 argument.\nSee \'docker run --help\'.\n')
        image, command = rest[0], rest[1:]
        name = (options.get("name") or [""])[-1] or f"sandbox_{secrets.token_hex(4)}"
        with self._lock:
            if name in self.containers:
                taken = self.containers[name].id
                return Result(125, "", f"docker: Error response from daemon: Conflict. The container name \"/{name}\" is "
                                       f"already in use by container \"{taken}\". You have to remove (or rename) that "
                                       "container to be able to reuse that name.\n")
        stderr = ""
        if image not in self.images:
            pulled = self.pull(image)
            stderr = f"Unable to find image '{image}' locally\n" + pulled.stderr
            if pulled.code:
                return Result(125, "", f"Unable to find image '{image}' locally\ndocker: {pulled.stderr}")
        container_env: dict[str, str] = {}
        for item in options.get("e", []) + options.get("env", []):
            key, eq, value = item.partition("=")
            if eq:
                container_env[key] = value
            elif key in env:
                container_env[key] = env[key]  # `-e NAME` copies the CLI's own variable
        mounts = {}
        for item in options.get("v", []) + options.get("volume", []):
            host_path, _, inside = item.partition(":")
            mounts[inside.split(":")[0]] = host_path
        entrypoint = (options.get("entrypoint") or [""])[-1]
        container = Container(id=secrets.token_hex(32), name=name, image=image, entrypoint=entrypoint, command=command,
                              env=container_env, mounts=mounts, restart=(options.get("restart") or ["no"])[-1])
        # `docker run -d` answers once the container has started: an inspect right after it must not
        # read an exit (the startup script would publish a crash with an empty error line).
        container.started_at, container.running = time.time(), True
        with self._lock:
            self.containers[name] = container
        threading.Thread(target=self._life, args=(container,), name=f"container-{name}", daemon=True).start()
        return Result(0, container.id + "\n", stderr)

    def _life(self, container: Container) -> None:
        """Run the container; Docker restarts it (unless-stopped / always / on-failure) when it exits."""
        delay = RESTART_DELAY_SECONDS
        while not container.removed.is_set():
            container.exit_code = self._run_once(container)
            container.running = False
            if container.removed.is_set() or container.restart == "no":
                return
            if self.vllm.sleep(delay, container.removed):
                return
            delay = min(delay * 2, 60.0)
            container.restart_count += 1
            container.started_at, container.running = time.time(), True

    def _run_once(self, container: Container) -> int:
        """One run of the container's process; its exit code (0 when it was removed while serving)."""
        if container.entrypoint != "vllm":
            container.write(f"exec: \"{container.entrypoint or container.command[:1]}\": the sandbox runs only "
                            "`--entrypoint vllm` containers")
            return 127
        release = self.release_of(container.image)
        parsed = parse_serve_args(container.command, release)
        if isinstance(parsed, ServeRefused):
            container.write(*parsed.stderr.rstrip("\n").split("\n"))
            return parsed.exit_code
        return self._serve(container, parsed, release)

    def _serve(self, container: Container, args: ServeArgs, release: str) -> int:
        shown = {k: v for k, v in args.values.items() if v not in (None, False, "", [], {}) and k != "api_key"}
        container.write(f"INFO {_stamp()} [api_server.py] vLLM API server version {release}",
                        f"INFO {_stamp()} [utils.py] non-default args: {shown}")
        started = 0.0
        cache_dir = container.mounts.get("/root/.cache/vllm")
        warm = bool(cache_dir and Path(cache_dir).is_dir() and any(Path(cache_dir).iterdir()))
        if self.vllm.sleep(LOAD_SECONDS, container.removed):
            return 0
        started += LOAD_SECONDS
        crash = self.vllm.crash_line()
        if crash:
            container.write("Traceback (most recent call last):",
                            '  File "/usr/local/lib/python3.12/site-packages/tpu_inference/models/jax/gemma4.py", line '
                            "412, in __init__", crash)
            return 1
        container.write(f"INFO {_stamp()} [model_runner.py] Loading weights took 9.87 seconds",
                        f"INFO {_stamp()} [compilation.py] Compiling the model with different input shapes...")
        compile_seconds = WARM_COMPILE_SECONDS if warm else COLD_COMPILE_SECONDS
        if self.vllm.sleep(compile_seconds, container.removed):
            return 0
        started += compile_seconds
        if cache_dir and not warm:
            program = Path(cache_dir) / "xla_cache" / f"{secrets.token_hex(8)}.xla"
            program.parent.mkdir(parents=True, exist_ok=True)
            program.write_bytes(b"sandbox compiled program\n")  # what a later boot restores
        container.write(f"INFO {_stamp()} [compilation.py] Compilation finished in {compile_seconds:.2f} [secs]")
        try:
            container.emulator = self.vllm.start_model(args, container)
        except OSError as error:
            container.write(f"ERROR {_stamp()} [api_server.py] OSError: {error}")
            return 1
        self.vllm.served("warm" if warm else "cold", started)
        container.write(f"INFO {_stamp()} [launcher.py] Starting vLLM API server on http://0.0.0.0:{args.get('port')}",
                        "INFO:     Application startup complete.")
        container.removed.wait()
        return 0

    def _find(self, name: str) -> Container | None:
        with self._lock:
            return self.containers.get(name)

    def _inspect(self, args: list[str], env: dict[str, str]) -> Result:
        template, names = "", []
        rest = list(args)
        while rest:
            item = rest.pop(0)
            if item in ("--format", "-f") and rest:
                template = rest.pop(0)
            elif item.startswith("--format="):
                template = item.partition("=")[2]
            else:
                names.append(item)
        out = []
        for name in names:
            container = self._find(name)
            if container is None:
                return Result(1, "", f"Error: No such object: {name}\n")
            fields = {".RestartCount": str(container.restart_count),
                      ".State.Running": "true" if container.running else "false",
                      ".State.StartedAt": _rfc3339_nano(container.started_at), ".Id": container.id,
                      ".Name": "/" + container.name, ".Config.Image": container.image}
            if not template:
                out.append(json.dumps([{"Id": container.id, "Name": "/" + container.name,
                                        "RestartCount": container.restart_count,
                                        "State": {"Running": container.running,
                                                  "StartedAt": _rfc3339_nano(container.started_at)}}], indent=4))
                continue
            out.append(_render(template, fields))
        return Result(0, "\n".join(out) + "\n")

    def _logs(self, args: list[str], env: dict[str, str]) -> Result:
        tail, since, names = None, None, []
        rest = list(args)
        while rest:
            item = rest.pop(0)
            if item in ("--tail", "-n") and rest:
                tail = int(rest.pop(0))
            elif item == "--since" and rest:
                since = _parse_time(rest.pop(0))
            else:
                names.append(item)
        container = self._find(names[0]) if names else None
        if container is None:
            return Result(1, "", f"Error response from daemon: No such container: {names[0] if names else ''}\n")
        lines = [line for at, line in list(container.log) if since is None or at >= since]
        if tail is not None:
            lines = lines[-tail:] if tail else []
        return Result(0, "".join(line + "\n" for line in lines))

    def _rm(self, args: list[str], env: dict[str, str]) -> Result:
        names = [a for a in args if not a.startswith("-")]
        for name in names:
            with self._lock:
                container = self.containers.pop(name, None)
            if container is None:
                return Result(1, "", f"Error response from daemon: No such container: {name}\n")
            self._remove(container)
        return Result(0, "".join(n + "\n" for n in names))

    def _remove(self, container: Container) -> None:
        container.removed.set()
        container.running = False
        if container.emulator is not None:
            self.vllm.stop_model(container.emulator)
            container.emulator = None

    def emulators(self) -> list[Any]:
        with self._lock:
            return [c.emulator for c in self.containers.values() if c.emulator is not None]


def _render(template: str, fields: dict[str, str]) -> str:
    """A Go template of `{{.Field}}` references only, as `docker inspect --format` fills it."""
    return re.sub(r"\{\{\s*(\.[\w.]+)\s*\}\}", lambda match: fields.get(match[1], "<no value>"), template)


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%m-%d %H:%M:%S")


def _rfc3339_nano(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((epoch % 1) * 1e9):09d}Z"


def _parse_time(text: str) -> float | None:
    """`docker logs --since` takes RFC 3339 (what `inspect` printed) or a Unix time."""
    try:
        return float(text)
    except ValueError:
        pass
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", text.strip())
    if match is None:
        return None
    whole = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return whole + (float("0." + match[2]) if match[2] else 0.0)
