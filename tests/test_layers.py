"""The house rules of the code: no import circle, and every arrow points down.

Between packages: `bot → handlers → agent → infra`. Inside `agent/`: `evals → llm → actions → lease,
digest → root` (the mention agent reaches a lease only through actions; `lease` knows nothing of
`llm`). Every import counts — module level, inside functions and under TYPE_CHECKING — because a
type-only arrow is still a dependency a reader has to hold in their head.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "handlers", "agent", "infra")
PACKAGE_RANK = {"infra": 0, "agent": 1, "handlers": 2, "bot": 3}
# Inside agent/: what each room may import besides itself.
AGENT_MAY_IMPORT = {
    "root": {"root"},
    "digest": {"root"},
    "lease": {"root"},
    "actions": {"lease", "digest", "root"},
    "llm": {"actions", "digest", "root"},
    "evals": {"llm", "actions", "digest", "root"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imported_modules(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            # `import agent.llm.loop` binds the package too; the dependency is the deepest module we own.
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = all_modules()
    return {name: imported_modules(path, name, known) for name, path in known.items()}


def agent_room(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and (ROOT / "agent" / parts[1]).is_dir():
        return parts[1]
    return "root"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_circle_anywhere():
    circles = [c for c in strongly_connected(import_graph()) if len(c) > 1]
    assert circles == [], f"import circles: {circles}"


def test_packages_import_only_downwards():
    upward = sorted(f"{source} → {target}" for source, targets in import_graph().items() for target in targets
                    if PACKAGE_RANK[target.split(".")[0]] > PACKAGE_RANK[source.split(".")[0]])
    assert upward == []


def test_agent_rooms_follow_llm_actions_lease_digest_root():
    wrong = []
    for source, targets in import_graph().items():
        if not source.startswith("agent"):
            continue
        room = agent_room(source)
        for target in targets:
            if target.startswith("agent") and agent_room(target) != room \
                    and agent_room(target) not in AGENT_MAY_IMPORT[room]:
                wrong.append(f"{source} ({room}) → {target} ({agent_room(target)})")
    assert sorted(wrong) == []


def test_agent_has_its_rooms_and_a_small_root():
    rooms = sorted(p.name for p in (ROOT / "agent").iterdir() if (p / "__init__.py").exists())
    assert rooms == ["actions", "digest", "evals", "lease", "llm"]
    root_modules = sorted(p.stem for p in (ROOT / "agent").glob("*.py") if p.stem != "__init__")
    assert set(root_modules) <= {"access", "actor", "context", "model_config", "policy", "redact"}


def test_each_package_says_what_lives_there():
    for init in [ROOT / p / "__init__.py" for p in PACKAGES] + list((ROOT / "agent").glob("*/__init__.py")) \
            + [ROOT / "bot" / "cli" / "__init__.py"]:
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc.lower(), f"{init.relative_to(ROOT)} needs a docstring saying what it may import"


def test_the_checker_sees_a_planted_circle(tmp_path):
    # The graph walker must see function-level and TYPE_CHECKING imports, or the tests above prove nothing.
    known = {"agent.a": tmp_path / "a.py", "agent.b": tmp_path / "b.py"}
    known["agent.a"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agent.b import B\n")
    known["agent.b"].write_text("def f():\n    from agent import a\n")
    graph = {name: imported_modules(path, name, known) for name, path in known.items()}
    assert graph == {"agent.a": {"agent.b"}, "agent.b": {"agent.a"}}
    assert [c for c in strongly_connected(graph) if len(c) > 1] == [["agent.a", "agent.b"]]


def test_readme_draws_the_tree_that_exists():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## How it is built"):]
    tree = section[section.index("```") + 3: section.index("```", section.index("```") + 3)]
    drawn = {line.split()[0].rstrip("/") for line in tree.strip().splitlines()}
    rooms = {p.name for p in (ROOT / "agent").iterdir() if (p / "__init__.py").exists()}
    assert set(PACKAGES) | rooms <= drawn
    assert "llm → actions → lease, digest → root" in section


# --- other libraries' privates -------------------------------------------------------------------
# Only the named adapters may reach into arq's, bolt's or slack_sdk's private names (`_x`): each says
# in its docstring which library version it was written against and what upstream would need to
# remove it, and has a test that fails when that version's behaviour changes.

LIBRARIES = ("arq", "slack_bolt", "slack_sdk")
ADAPTERS = {
    "bot.arq_worker_adapter": "arq",  # the worker riding out Redis outages (tests/test_arq_worker_adapter.py)
    "infra.arq_enqueue_adapter": "arq",  # first-seen markers and the job in one step (tests/test_jobs.py)
    "bot.bolt_form_adapter": "slack_bolt",  # form bodies bolt misreads (tests/test_bolt_form_adapter.py)
}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def library_names(tree: ast.Module) -> dict[str, str]:
    """Local name → the library object it is bound to (`from arq.worker import Worker` → arq.worker.Worker)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LIBRARIES:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def library_object(dotted: str) -> object | None:
    module, _, attribute = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError):
        return None


def private_members(base: object) -> set[str]:
    """The private names a library class has: its class attributes, and the `self._x` its (and its
    library ancestors') code sets or reads — instance attributes like arq Worker's `_pool`."""
    names = {name for name in dir(base) if is_private(name)}
    for klass in getattr(base, "__mro__", ()):
        if klass.__module__.split(".")[0] not in LIBRARIES:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and is_private(node.attr)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return names


def private_library_uses(source: str) -> list[str]:
    """Imports of a library's private names, private attributes reached through a library name,
    and — in a subclass of a library class — private members of the base overridden or used
    (`def _x`, `self._x`, `super()._x`)."""
    tree = ast.parse(source)
    bound = library_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in LIBRARIES and any(map(is_private, a.name.split(".")))]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LIBRARIES:
            module = node.module or ""
            found += [f"line {node.lineno}: from {module} import {a.name}" for a in node.names
                      if any(map(is_private, module.split("."))) or is_private(a.name)]
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"line {node.lineno}: {root.id}….{node.attr}")
        elif isinstance(node, ast.ClassDef):
            found += private_members_of_library_bases(node, bound)
    return sorted(found, key=lambda finding: int(finding.split(":")[0].split()[1]))


def private_members_of_library_bases(cls: ast.ClassDef, bound: dict[str, str]) -> list[str]:
    bases = [library_object(bound[base.id]) for base in cls.bases if isinstance(base, ast.Name) and base.id in bound]
    inherited = {name for base in bases if base is not None for name in private_members(base)}
    if not bases:
        return []
    found = []
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in inherited:
            found.append(f"line {node.lineno}: {cls.name} overrides {node.name}")
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            via_super = isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                and node.value.func.id == "super"
            via_self = isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in inherited
            if via_super or via_self:
                found.append(f"line {node.lineno}: {cls.name} uses {node.attr} of its library base")
    return found


def test_only_the_named_adapters_use_a_private_name_of_arq_bolt_or_slack_sdk():
    found = {name: uses for name, path in all_modules().items()
             if name not in ADAPTERS and (uses := private_library_uses(path.read_text()))}
    assert found == {}, f"private names of {', '.join(LIBRARIES)} outside the named adapters ({sorted(ADAPTERS)}): {found}"


def test_each_adapter_names_the_library_version_it_was_written_against():
    for name, library in ADAPTERS.items():
        path = all_modules()[name]
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert f"Written against {library} " in doc, f"{name} must say which {library} version it was written against"
        assert "would need" in doc or "would remove it" in doc, f"{name} must say what upstream would need to remove it"


def test_the_private_name_check_sees_each_kind_of_reach():
    planted = '''
import arq._internal
from arq.worker import Worker, _private_helper
from slack_sdk._utils import thing
import slack_bolt
from slack_bolt.async_app import AsyncApp
from redis import Redis

slack_bolt.request._hidden
Redis()._own_business  # not one of the three libraries

class Sub(Worker):
    def __init__(self):
        self._mine = 1          # our own attribute: fine
        self._pool = None       # arq's
    async def _poll_iteration(self):
        await super()._poll_iteration()
    async def run_job(self, job_id, score):  # public-named: not a private-name finding
        return None

class App(AsyncApp):
    def helper(self):
        return self._framework_logger
'''
    found = private_library_uses(planted)
    assert found == [
        "line 2: import arq._internal",
        "line 3: from arq.worker import _private_helper",
        "line 4: from slack_sdk._utils import thing",
        "line 9: slack_bolt…._hidden",
        "line 15: Sub uses _pool of its library base",
        "line 16: Sub overrides _poll_iteration",
        "line 17: Sub uses _poll_iteration of its library base",
        "line 23: App uses _framework_logger of its library base",
    ], found


# --- the mode chooses adapters (issue 45) ---------------------------------------------------
# Only the module that turns the mode into a DeploymentTarget tells the modes apart; everything
# else asks the target. The sandbox's emulators are bot/'s business, never agent/'s or handlers/'.
MODE_CHOOSERS = {"infra.deployment_mode"}
MODE_MEMBERS = {"SANDBOX", "CLOUD"}


def mode_branches(source: str) -> list[str]:
    """Reads of `is_sandbox`, and comparisons with a DeploymentMode member (the same branch)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "is_sandbox" \
                or isinstance(node, ast.Name) and node.id == "is_sandbox" \
                or isinstance(node, ast.FunctionDef) and node.name == "is_sandbox":
            found.append(f"line {node.lineno}: is_sandbox")
        elif isinstance(node, ast.Compare):
            found += [f"line {node.lineno}: DeploymentMode.{side.attr}" for side in (node.left, *node.comparators)
                      if isinstance(side, ast.Attribute) and side.attr in MODE_MEMBERS
                      and isinstance(side.value, ast.Name) and side.value.id == "DeploymentMode"]
    return found


def sandbox_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{source} → {target}" for source, targets in graph.items() for target in targets
                  if source.split(".")[0] in ("agent", "handlers") and target.startswith("infra.sandbox"))


def test_no_mode_branch_outside_the_module_that_chooses_adapters():
    found = {name: branches for name, path in all_modules().items()
             if name not in MODE_CHOOSERS and (branches := mode_branches(path.read_text()))}
    assert found == {}, f"ask settings.mode.target instead: {found}"


def test_agent_and_handlers_import_nothing_of_the_sandbox():
    assert sandbox_imports(import_graph()) == []


def test_the_mode_checks_see_planted_violations(tmp_path):
    planted = '''
from infra.deployment_mode import DeploymentMode

def poll(settings):
    if settings.mode.is_sandbox:
        return 0.1
    return 0.5 if settings.mode is DeploymentMode.CLOUD else 1.0
'''
    assert mode_branches(planted) == ["line 5: is_sandbox", "line 7: DeploymentMode.CLOUD"]
    assert mode_branches("delay = settings.mode.target.job_poll_delay\nmode = DeploymentMode.CLOUD  # a default\n") == []
    known = {"handlers.a": tmp_path / "a.py", "infra.sandbox.world": tmp_path / "world.py"}
    known["handlers.a"].write_text("def f():\n    from infra.sandbox import world\n")
    known["infra.sandbox.world"].write_text("")
    graph = {name: imported_modules(path, name, known) for name, path in known.items()}
    assert sandbox_imports(graph) == ["handlers.a → infra.sandbox.world"]


# --- action results ------------------------------------------------------------------------------
# A caller decides by a result's `status` and the type of its `payload`; `data` is what a model reads,
# so only the model's and MCP's edges touch it, and they pass it on whole. A module that runs actions
# (it imports agent.actions) reads no `….data[…]` or `….data.get(…)` anywhere else.

RESULT_DATA_EDGES = {"agent.llm.loop", "bot.mcp_server"}


def result_data_reads(path: Path, name: str, known: dict[str, Path]) -> list[str]:
    if name.startswith("agent.actions") or not any(t.startswith("agent.actions") for t in imported_modules(path, name, known)):
        return []
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Subscript):
            read = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            read = node.func.value
        else:
            continue
        if isinstance(read, ast.Attribute) and read.attr == "data":
            found.append(f"{name} line {node.lineno}")
    return found


def test_no_caller_reads_an_action_results_data_by_key_outside_the_model_and_mcp_edges():
    known = all_modules()
    found = [read for name, path in known.items() if name not in RESULT_DATA_EDGES
             for read in result_data_reads(path, name, known)]
    assert found == [], f"read the result's typed payload instead of its data: {found}"


def test_the_result_data_check_sees_a_planted_read(tmp_path):
    known = {"handlers.planted": tmp_path / "planted.py", "handlers.elsewhere": tmp_path / "elsewhere.py",
             "agent.actions": tmp_path / "actions.py"}
    known["agent.actions"].write_text("")
    known["handlers.planted"].write_text(
        "from agent.actions import run_action\n"
        "async def f(svc, actor):\n"
        "    result = await run_action('zones', svc, actor, {})\n"
        "    zones = result.data['zones']\n"
        "    return zones, result.data.get('order', []), result.data\n")
    # Not an action result: a module that runs no action may read a Slack response's `data`.
    known["handlers.elsewhere"].write_text("def g(error):\n    return error.response.data.get('error')\n")
    assert result_data_reads(known["handlers.planted"], "handlers.planted", known) == [
        "handlers.planted line 4", "handlers.planted line 5"]
    assert result_data_reads(known["handlers.elsewhere"], "handlers.elsewhere", known) == []


def named_action_calls(source: str) -> list[int]:
    """Lines calling run_action with an action's name written out as a string: a caller inside the bot
    passes the action's function (a misspelt one fails at import); only names that arrive as values
    (a model's tool call, MCP, a `/tpu` subcommand) are looked up."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "run_action"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]


def test_no_caller_names_an_action_by_a_string_literal():
    found = {name: lines for name, path in all_modules().items() if (lines := named_action_calls(path.read_text()))}
    assert found == {}, f"pass the action's function to run_action: {found}"


def test_the_named_action_check_sees_a_planted_literal():
    planted = ("async def f(svc, actor, name):\n"
               "    await run_action('zones', svc, actor, {})\n"
               "    await registry.run_action(\"teardown\", svc, actor, {})\n"
               "    await run_action(zone_actions.zones, svc, actor, {})\n"
               "    await run_action(name, svc, actor, {})\n")
    assert named_action_calls(planted) == [2, 3]


# --- arq's ctx -----------------------------------------------------------------------------------
# arq hands every job and hook an untyped dict; one typed accessor reads it (bot/arq_worker_adapter.py's
# worker_context), so a misspelt key is a type error rather than a KeyError in the middle of a job.

CTX_READER = "bot.arq_worker_adapter"
DICT_METHODS = {name for name in dir(dict) if not name.startswith("_")}  # get, update, …: not MCP's ctx.lifespan_context


def ctx_reads(source: str) -> list[str]:
    """Where `ctx` is read or written by key: `ctx[…]`, `ctx.get(…)` (a dict method), `… in ctx`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "ctx" \
                or isinstance(node, ast.Attribute) and node.attr in DICT_METHODS \
                and isinstance(node.value, ast.Name) and node.value.id == "ctx":
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(isinstance(c, ast.Name) and c.id == "ctx" for c in node.comparators):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda finding: int(finding.split(":")[0].split()[1]))


def test_only_the_worker_adapter_reads_arqs_ctx_by_key():
    found = {name: reads for name, path in all_modules().items()
             if name != CTX_READER and (reads := ctx_reads(path.read_text()))}
    assert found == {}, f"read arq's ctx through {CTX_READER}.worker_context, not by key: {found}"


def test_the_ctx_check_sees_each_kind_of_read():
    planted = '''
async def job(ctx, other):
    svc = ctx["services"]
    ctx["slack"] = None
    try_ = ctx.get("job_try", 1)
    if "redis" in ctx and "x" not in ctx:
        pass
    ctx.update(slack=None)
    ctx.lifespan_context  # an attribute of another kind of ctx (MCP's): fine
    return other["services"], worker_context(ctx)  # another dict, and the accessor: fine
'''
    assert ctx_reads(planted) == [
        "line 3: ctx['services']",
        "line 4: ctx['slack']",
        "line 5: ctx.get",
        "line 6: 'redis' in ctx",
        "line 6: 'x' not in ctx",
        "line 8: ctx.update",
    ]


# --- views of Services ---------------------------------------------------------------------------
# A function under these rooms takes the view of Services its feature reads (agent/context.py's
# `…Deps` protocols), so mypy rejects a read of another feature's backend. Only these take Services
# itself, because each runs an action picked at run time, which may read any view (or, in handlers/,
# reaches run_action, which takes Services even for an action named by its function, or run_agent):
SERVICES_ROOMS = ("agent.lease", "agent.actions", "agent.llm", "handlers")
TAKE_ALL_SERVICES = {
    "agent.actions.registry.run_action",  # the one entry to every action
    "agent.llm.loop.run_agent",  # the model's tool calls, through run_action
    "agent.llm.loop.AgentLoop.__init__",  # keeps them for its tool calls
    "agent.llm.modelless.answer",  # the read actions its intent rules pick, through _read
    "agent.llm.modelless._read",
    "agent.llm.proposals.confirm",  # the confirmed proposal's action
    "handlers.slack_app.build_bolt_app",  # hands it to every module's register(app, svc)
    "handlers.slash.register",  # /tpu's subcommand, named by the user
    "handlers.slash.answer_command",
    "handlers.slash.run_subcommand",
    "handlers.app_home.register",  # the Home tab's leases, zones and spend actions
    "handlers.app_home.build_home",
    "handlers.ask_job.answer_ask",  # the ask_model action
    "handlers.alerts.register",  # an alert's Tear down button: the teardown action
    "handlers.alerts.teardown_from_alert",
    "handlers.proposal_buttons.register",  # a confirmed proposal (agent.llm.proposals.confirm)
    "handlers.mention_job.answer_mention",  # run_agent
    "handlers.followups.answer_followup",  # a follow-up answered as a mention
    "handlers.incident_job.investigate",  # run_agent on the alert's logs
    "handlers.incident_job.open_incident",  # investigates the incident it opens
    "handlers.incident_job.handle_alert",
}


def functions_taking_services(source: str, module: str) -> list[str]:
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                annotations = [a.annotation for a in arguments if a.annotation is not None]
                # A quoted annotation ("Services") is read as the expression it spells.
                annotations = [ast.parse(an.value, mode="eval") if isinstance(an, ast.Constant) else an
                               for an in annotations]
                if any(isinstance(n, ast.Name) and n.id in ("Services", "WorkerServices")
                       for annotation in annotations for n in ast.walk(annotation)):
                    found.append(f"{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source), f"{module}.")
    return found


def test_functions_take_the_view_of_services_their_feature_reads():
    found = {name for module, path in all_modules().items() if module.startswith(SERVICES_ROOMS)
             for name in functions_taking_services(path.read_text(), module)}
    assert found == TAKE_ALL_SERVICES


def test_the_services_check_sees_each_kind_of_annotation():
    # A callable over Services counts too: its caller must hold Services to call it.
    planted = ("async def a(svc: Services): ...\n"
               "def b(x, *, svc: 'WorkerServices | None' = None): ...\n"
               "class C:\n    def m(self, svc: LeaseDeps, make: Callable[[Services], int]): ...\n"
               "def d(svc: ChannelDeps): ...\n")
    assert functions_taking_services(planted, "m") == ["m.a", "m.b", "m.C.m"]


def test_each_view_of_services_is_made_of_its_fields():
    from agent import context

    views = [v for name, v in vars(context).items() if name.endswith("Deps") and isinstance(v, type)]
    assert context.ChannelDeps in views and context.WorkerLeaseDeps in views  # the name finds them
    for view in views:
        whole = context.WorkerServices if context.WorkerLeaseDeps in view.__mro__ else context.Services
        fields = {f.name: f.type for f in dataclasses.fields(whole)}
        members = {name: member.fget.__annotations__["return"] for name, member in vars(view).items()
                   if isinstance(member, property)}
        assert members and set(members) <= set(fields), f"{view.__name__}: {set(members) - set(fields)}"
        # Spelt alike: a field whose type changes must change in its views too.
        assert {name: kind.strip("'\"") for name, kind in members.items()} == \
            {name: fields[name].strip("'\"") for name in members}, view.__name__


def test_the_bots_processes_import_openai_only_to_call_the_model():
    """`openai`'s API types are about half of a bot process's start-up CPU; the web process, the
    worker, the shell and the MCP server import it at their first model call (openai_client)."""
    program = textwrap.dedent("""
        import sys
        import bot.cli, bot.mcp_server, bot.shell, bot.web, bot.worker
        from agent.actions.model_endpoint import ModelEndpoint, openai_client
        from agent.model_config import ModelConfig
        print('openai' in sys.modules)
        openai_client(ModelEndpoint('http://127.0.0.1:9/v1', 'a test'), ModelConfig())
        print('openai' in sys.modules)
    """)
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]
