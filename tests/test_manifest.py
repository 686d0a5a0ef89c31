"""The Slack app manifests declare exactly what the code uses: no less (a missing scope is a
`missing_scope` error in production), no more (least privilege).

What is used is derived from the source, not listed by hand: every Slack Web API method called
on a client (`client.chat_postMessage(…)`, `client.api_call("…")`), every event listener
(`@app.event(…)`, `@app.message(…)`), every slash command (`@app.command(…)`), every button
(`@app.action(…)` → interactivity), and downloads of `url_private`. Only the method → scope and
event → subscription tables below are knowledge (Slack's method docs, reference/slack.md §3/§6);
a method or event missing from them fails the test until someone adds it with its scope.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("bot", "handlers", "agent", "infra")
EXCLUDED = ("infra/sandbox",)  # the stand-ins for Slack and GCP are not the bot
HTTP = ROOT / "slack" / "manifest.yaml"
SOCKET = ROOT / "slack" / "manifest.socket.yaml"
EVENTS_PATH = "/slack/events"

# Bot scope each Web API method needs (None: no scope). conversations.replies needs the history
# scope of the conversation type: the bot works in public and private channels, not in DMs.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.delete": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    "chat.startStream": ("chat:write",),
    "chat.appendStream": ("chat:write",),
    "chat.stopStream": ("chat:write",),
    "views.publish": (),
    "files.info": ("files:read",),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    "users.info": ("users:read",),
    "usergroups.list": ("usergroups:read",),
    "usergroups.users.list": ("usergroups:read",),
    "conversations.replies": ("channels:history", "groups:history"),
    "conversations.history": ("channels:history", "groups:history"),
    "conversations.members": ("channels:read", "groups:read"),
    "conversations.info": ("channels:read", "groups:read"),
    "reactions.add": ("reactions:write",),
    "assistant.threads.setStatus": ("assistant:write",),
    # Socket Mode's check of SLACK_APP_TOKEN: an app-level token's connections:write, not a bot scope.
    "apps.connections.open": (),
}

# A `message` listener receives the message.* events subscribed to; leases are per channel, so
# public and private channels (the bot takes no commands in DMs).
EVENT_SUBSCRIPTIONS: dict[str, tuple[str, ...]] = {
    "app_mention": ("app_mention",),
    "app_home_opened": ("app_home_opened",),
    "message": ("message.channels", "message.groups"),
    "member_joined_channel": ("member_joined_channel",),
    "member_left_channel": ("member_left_channel",),
}
SUBSCRIPTION_SCOPES: dict[str, tuple[str, ...]] = {
    "app_mention": ("app_mentions:read",),
    "app_home_opened": (),
    "message.channels": ("channels:history",),
    "message.groups": ("groups:history",),
    "member_joined_channel": ("channels:read", "groups:read"),
    "member_left_channel": ("channels:read", "groups:read"),
}


# --- what the code uses -------------------------------------------------------------------

# slack_sdk helpers that call several Web API methods without an api_call literal of their own.
SDK_HELPERS: dict[str, tuple[str, ...]] = {
    "files_upload_v2": ("files.getUploadURLExternal", "files.completeUploadExternal"),
}


@lru_cache(maxsize=1)
def sdk_methods() -> dict[str, str]:
    """slack_sdk's Python method name → Web API method (read from each method's api_call)."""
    names = {}
    for name, fn in inspect.getmembers(AsyncWebClient, inspect.isfunction):
        if name.startswith("_"):
            continue
        match = re.search(r'api_call\(\s*"([A-Za-z.]+)"', inspect.getsource(fn))
        if match:
            names[name] = match.group(1)
    return names


def source_files() -> list[Path]:
    files = []
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(EXCLUDED):
                files.append(path)
    return files


@lru_cache(maxsize=1)
def usage() -> dict[str, dict[str, set[str]]]:
    """{"methods"|"events"|"commands"|"actions"|"url_private": {name: {where…}}}."""
    found: dict[str, dict[str, set[str]]] = {k: {} for k in ("methods", "events", "commands", "actions", "url_private")}

    def note(kind: str, name: str, path: Path, node: ast.AST) -> None:
        found[kind].setdefault(name, set()).add(f"{path.relative_to(ROOT)}:{node.lineno}")

    methods = sdk_methods()
    for path in source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # Bolt listeners are decorators (`@app.event(…)`) or bolt's lazy form `app.event(…)(ack=…, lazy=[…])`;
        # typer's `app.command("x")(fn)` is a CLI command.
        listeners = {id(d) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     for d in n.decorator_list}
        listeners |= {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
                      and any(k.arg == "ack" for k in n.keywords)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in ("url_private", "url_private_download"):
                note("url_private", "files:read", path, node)
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr = node.func.attr
            for helper_method in SDK_HELPERS.get(attr, ()):
                note("methods", helper_method, path, node)
            if attr in methods:
                note("methods", methods[attr], path, node)
            elif attr == "api_call" and node.args and isinstance(node.args[0], ast.Constant):
                note("methods", node.args[0].value, path, node)
            elif attr in ("event", "message", "command", "action") and id(node) in listeners and _is_app(node.func.value):
                kind = {"event": "events", "message": "events", "command": "commands", "action": "actions"}[attr]
                note(kind, "message" if attr == "message" else _listener_name(node), path, node)
    return found


def _is_app(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "app"


def _listener_name(call: ast.Call) -> str:
    if not call.args:
        return "?"
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return str(arg.value)
    if isinstance(arg, ast.Dict):  # {"type": "message", "subtype": "file_share"}
        for key, value in zip(arg.keys, arg.values):
            if isinstance(key, ast.Constant) and key.value == "type" and isinstance(value, ast.Constant):
                return str(value.value)
    return ast.unparse(arg)  # an action id constant: still a button


def required_subscriptions() -> set[str]:
    events = usage()["events"]
    unknown = sorted(set(events) - set(EVENT_SUBSCRIPTIONS))
    assert not unknown, f"listeners for {unknown} ({[sorted(events[e]) for e in unknown]}): add them to EVENT_SUBSCRIPTIONS"
    return {sub for event in events for sub in EVENT_SUBSCRIPTIONS[event]}


def required_scopes() -> set[str]:
    found = usage()
    unknown = sorted(set(found["methods"]) - set(METHOD_SCOPES))
    assert not unknown, f"{unknown} called at {[sorted(found['methods'][m]) for m in unknown]}: add to METHOD_SCOPES"
    scopes = {scope for method in found["methods"] for scope in METHOD_SCOPES[method]}
    scopes |= {scope for sub in required_subscriptions() for scope in SUBSCRIPTION_SCOPES[sub]}
    scopes |= set(found["url_private"])
    if found["commands"]:
        scopes.add("commands")
    return scopes


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def declared_commands(manifest: dict) -> dict[str, dict]:
    return {c["command"]: c for c in manifest.get("features", {}).get("slash_commands", [])}


# --- the checks ---------------------------------------------------------------------------


def test_the_scan_sees_the_known_calls():
    """Guards the scanner itself: these calls exist today, so finding none means the scan broke."""
    found = usage()
    for method in ("chat.postMessage", "chat.update", "views.publish", "usergroups.users.list", "files.info",
                   "conversations.replies"):
        assert method in found["methods"], method
    assert {"app_mention", "message", "app_home_opened"} <= set(found["events"])
    assert "/tpu" in found["commands"] and found["actions"]


@pytest.mark.parametrize("path", [HTTP, SOCKET], ids=["http", "socket"])
def test_manifest_declares_exactly_the_scopes_the_code_uses(path):
    declared = set(load(path)["oauth_config"]["scopes"]["bot"])
    needed = required_scopes()
    assert not needed - declared, f"{path.name} lacks {sorted(needed - declared)}"
    assert not declared - needed, f"{path.name} declares unused scopes {sorted(declared - needed)}"
    assert len(load(path)["oauth_config"]["scopes"]["bot"]) == len(declared), "a scope is listed twice"


@pytest.mark.parametrize("path", [HTTP, SOCKET], ids=["http", "socket"])
def test_manifest_subscribes_to_exactly_the_events_listened_for(path):
    declared = set(load(path)["settings"]["event_subscriptions"]["bot_events"])
    needed = required_subscriptions()
    assert declared == needed, f"{path.name}: missing {sorted(needed - declared)}, unused {sorted(declared - needed)}"


@pytest.mark.parametrize("path", [HTTP, SOCKET], ids=["http", "socket"])
def test_manifest_declares_the_commands_interactivity_and_home_tab(path):
    manifest = load(path)
    assert set(declared_commands(manifest)) == set(usage()["commands"])
    assert manifest["settings"]["interactivity"]["is_enabled"] is bool(usage()["actions"])
    assert manifest["features"]["app_home"]["home_tab_enabled"] is ("app_home_opened" in usage()["events"])
    assert manifest["features"]["bot_user"]["display_name"]


def test_http_manifest_points_everything_at_the_web_process():
    manifest = load(HTTP)
    web_source = (ROOT / "bot" / "web.py").read_text(encoding="utf-8")
    assert f'Route("{EVENTS_PATH}"' in web_source  # the one path bolt serves
    urls = [c["url"] for c in declared_commands(manifest).values()]
    urls += [manifest["settings"]["event_subscriptions"]["request_url"], manifest["settings"]["interactivity"]["request_url"]]
    assert urls and all(url.startswith("https://") and url.endswith(EVENTS_PATH) for url in urls)
    assert len(set(urls)) == 1
    assert manifest["settings"]["socket_mode_enabled"] is False


def test_socket_manifest_is_the_same_app_without_urls():
    http, socket = load(HTTP), load(SOCKET)
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["event_subscriptions"]
    assert "request_url" not in socket["settings"]["interactivity"]
    assert all("url" not in c for c in declared_commands(socket).values())
    # Strip what differs by mode; the rest must be identical.
    for command in declared_commands(http).values():
        command.pop("url")
    http["settings"]["event_subscriptions"].pop("request_url")
    http["settings"]["interactivity"].pop("request_url")
    http["settings"]["socket_mode_enabled"] = True
    assert http == socket


def test_socket_mode_process_needs_the_app_token():
    source = (ROOT / "bot" / "cli" / "processes.py").read_text(encoding="utf-8")
    assert '_require(settings, "slack_app_token"' in source  # the xapp- token the socket manifest asks for


def test_the_slack_stand_in_grants_the_manifest_scopes():
    """The local Slack's auth.test answers with the manifest's scopes, so local runs exercise the real grant."""
    from infra.sandbox.slack_api import SCOPES

    assert set(SCOPES.split(",")) == set(load(HTTP)["oauth_config"]["scopes"]["bot"])


@pytest.mark.parametrize("manifest", [HTTP, SOCKET], ids=["http", "socket"])
def test_the_usage_hint_names_every_subcommand(manifest):
    """Issue 44: Slack's autocomplete hint named 8 of the 14 subcommands `/tpu help` lists."""
    from handlers.commands import SUBCOMMANDS

    data = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    (command,) = data["features"]["slash_commands"]
    hinted = {part.split()[0] for part in command["usage_hint"].split("|")}
    assert hinted == {sub.name for sub in SUBCOMMANDS}
    assert len(command["usage_hint"]) <= 1000  # maxLength in slackapi/manifest-schema, schemas/manifest.schema.1.0.0.json
