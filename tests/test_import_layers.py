"""The import graph of sesame has no cycles (late imports and TYPE_CHECKING blocks included), and
``heads/`` stays plain torch: it imports nothing of ``tasks/``, Lightning, Hydra or OmegaConf."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"heads": "sesame.heads", "tasks": "sesame.tasks"}


def _module_name(path: Path) -> str:
    top, *rest = path.relative_to(ROOT).with_suffix("").parts
    name = ".".join([PACKAGES[top], *rest])
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """``{module: every sesame module it imports anywhere in its body}``."""
    modules = {_module_name(p): p for top in PACKAGES for p in (ROOT / top).rglob("*.py") if "evaluate_metrics" not in p.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_there_is_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted((ROOT / "heads").glob("*.py")), ids=lambda p: p.name)
def test_heads_are_plain_torch(path):
    forbidden = ("sesame.tasks", "lightning", "hydra", "omegaconf", "transformers")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else []
        assert not any(n.startswith(forbidden) for n in names), f"{path.name} imports {names}"
