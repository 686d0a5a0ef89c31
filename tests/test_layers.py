"""The house rules of the code: no import circle, and every arrow points down.

Between packages: `bot → handlers → agent → infra`. Inside `agent/`: `evals → llm → actions → lease,
digest → root` (the mention agent reaches a lease only through actions; `lease` knows nothing of
`llm`). Every import counts — module level, inside functions and under TYPE_CHECKING — because a
type-only arrow is still a dependency a reader has to hold in their head.
"""

from __future__ import annotations

import ast
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
