"""sesame's modules keep the layer order of ``docs/ARCHITECTURE.md``:

    heads < core < encoders < inputs < base < tasks (each task package: glue, qa, ner, ...)
          < saved < compression < runs < inference < export < cli

A module uses only its own layer and the layers below it; task packages never use each other; and
generic code (every layer but the task packages) never uses a task package: it reaches a task only
through the dotted class paths of ``conf/task/<task>.yaml``.
"Uses" is every import anywhere in a module's body (module level, inside functions, under
``TYPE_CHECKING``), absolute or relative, ``from pkg import module`` counting as importing ``module``;
and every string that names a sesame module (``"sesame.tasks.inference.onnx_runner"``, a dotted
class path), which is there to be loaded with ``importlib.import_module`` or Hydra's ``get_class`` /
``get_method`` / ``instantiate``. A ``conf/task/<task>.yaml`` sits with the task package its
``task.module`` names: it may name that package's classes (or lower layers'), nothing above the task
layer and no other task's. Every module must be in a layer (``LAYERS`` below), so a new folder is
placed on purpose. Besides: the import graph has no cycle, and ``heads/`` stays plain torch.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
#: Repository folder -> installed package.
PACKAGES = {"heads": "sesame.heads", "tasks": "sesame.tasks"}
#: The rank all task packages share: every ``tasks/<x>/`` that a ``conf/task/*.yaml`` names in ``task.module``.
TASKS = "tasks"
#: The layers, lowest first, each with its folders (or files) in the repository. docs/ARCHITECTURE.md
#: lists the same (tests/test_architecture_doc.py checks every module is named there).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("heads", ("heads",)),
    ("core", ("tasks/__init__.py", "tasks/core")),
    ("encoders", ("tasks/encoders",)),
    ("inputs", ("tasks/inputs",)),
    ("base", ("tasks/base",)),
    (TASKS, ()),
    ("saved", ("tasks/saved",)),
    ("compression", ("tasks/compression",)),
    ("runs", ("tasks/runs",)),
    ("inference", ("tasks/inference",)),
    ("export", ("tasks/export",)),
    ("cli", ("tasks/cli",)),
)
#: Console scripts that are one task's own command, and the task package each may use: sesame-score is
#: the official SQuAD scorer (a predictions file against a SQuAD-format gold file), so it imports the
#: qa task's metrics. It stays with the other console scripts in tasks/cli/; nothing else is exempt.
TASK_COMMANDS = {"tasks/cli/score.py": "qa"}
ORDER = " < ".join(name for name, _ in LAYERS)
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}
#: A string that names a sesame module, or something in one (a dotted class path).
SESAME_NAME = re.compile(r"sesame\.(?:heads|tasks)(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Layer:
    name: str  # a LAYERS name; task packages: "task <package>"
    rank: int
    task: str | None = None  # the task package, for layers of rank TASKS

    def may_use(self, other: Layer) -> bool:
        if other.task is not None:  # a task package: only itself (generic layers reach it through conf/task)
            return other.task == self.task
        return other.rank <= self.rank

    def rule_against(self, other: Layer) -> str:
        if other.task is not None and self.task is not None:
            return "task packages never use each other"
        if other.task is not None:
            return "generic code never names a task: it reaches one through the class paths of conf/task/<task>.yaml"
        return f"a module uses only its own layer and those below it: {ORDER}"


@dataclass(frozen=True)
class Use:
    source: str  # the using module (or a conf file)
    source_path: str  # its repository path
    target: str  # the module used (a name that is not a module file: as written)
    target_path: str  # its repository path (or where it would be)
    line: int
    how: str  # "imports" or "string-loads"
    implied: bool = False  # the package of ``from package import module``: the module's use is checked


def module_name(path: str) -> str:
    """``tasks/core/errors.py`` -> ``sesame.tasks.core.errors``; ``tasks/core/__init__.py`` -> ``sesame.tasks.core``."""
    top, *rest = Path(path).with_suffix("").parts
    return ".".join([PACKAGES[top], *rest]).removesuffix(".__init__")


def module_path(name: str, modules: dict[str, str]) -> str:
    """The repository path of a module, or where a module of that name would be."""
    if name in modules:
        return modules[name]
    for top, package in PACKAGES.items():
        if name == package or name.startswith(package + "."):
            return "/".join([top, *name.removeprefix(package).strip(".").split(".")]).rstrip("/") + ".py"
    return name


def find_modules(root: Path) -> dict[str, str]:
    """``{module name: repository path}`` of every ``.py`` file under ``heads/`` and ``tasks/``."""
    return {module_name(p.relative_to(root).as_posix()): p.relative_to(root).as_posix()
            for top in PACKAGES for p in sorted((root / top).rglob("*.py")) if "__pycache__" not in p.parts}


def _known(name: str, modules: dict[str, str]) -> str:
    """The module a dotted name names: itself, or the module of a class path; else ``name`` as written
    (a module not written yet: its layer follows from its name)."""
    return name if name in modules else name.rpartition(".")[0] if name.rpartition(".")[0] in modules else name


def code_uses(root: Path, modules: dict[str, str]) -> list[Use]:
    """Every import and every string-named sesame module, anywhere in each module's body."""
    uses = []
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse((root / path).read_text(encoding="utf-8"), filename=path)):
            if isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from . import x, from ..core import errors
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    origin = f"{base}.{node.module}" if node.module else base
                else:
                    origin = node.module or ""
                found = [f"{origin}.{a.name}" for a in node.names if f"{origin}.{a.name}" in modules]
                if origin in modules:  # the package runs too; only its own names are a use to check
                    implied = len(found) == len(node.names)
                    uses.append(Use(name, path, origin, modules[origin], node.lineno, "imports", implied))
                how = "imports"
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in modules]
                how = "imports"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SESAME_NAME.fullmatch(node.value):
                found = [_known(node.value, modules)]
                how = "string-loads"
            else:
                continue
            uses += [Use(name, path, t, module_path(t, modules), node.lineno, how) for t in found]
    return [u for u in uses if u.target != u.source]


def conf_uses(root: Path, modules: dict[str, str]) -> list[Use]:
    """The dotted class paths under ``task:`` of each ``conf/task/*.yaml`` (module, datamodule,
    predictor, export, data_settings, head_settings, ...)."""
    uses = []
    for conf in sorted((root / "conf" / "task").glob("*.yaml")):
        text = conf.read_text(encoding="utf-8")
        task = (yaml.safe_load(text) or {}).get("task") or {}
        lines = text.splitlines()
        for key, value in task.items():
            if isinstance(value, str) and SESAME_NAME.fullmatch(value):
                line = next((i for i, row in enumerate(lines, 1) if re.match(rf"\s*{key}:\s*{re.escape(value)}\b", row)), 0)
                target = _known(value, modules)
                uses.append(Use(f"task.{key}", conf.relative_to(root).as_posix(), target, module_path(target, modules),
                                line, "string-loads"))
    return uses


def task_packages(root: Path, modules: dict[str, str]) -> set[str]:
    """The folders ``tasks/<x>`` that a ``conf/task/*.yaml`` names in ``task.module``, generic folders excepted."""
    generic = {f.split("/")[1] for _, folders in LAYERS for f in folders if f.startswith("tasks/")}
    return {Path(u.target_path).parts[1] for u in conf_uses(root, modules)
            if u.source == "task.module" and u.target_path.startswith("tasks/") and len(Path(u.target_path).parts) > 2}\
        - generic


def layer_of(path: str, tasks: set[str]) -> Layer | None:
    """The layer of a repository path (``tasks/glue/data.py``); None: in no layer."""
    for name, folders in LAYERS:
        if any(path == f or path.startswith(f + "/") for f in folders):
            return Layer(name, RANK[name])
    parts = Path(path).parts
    if len(parts) > 2 and parts[0] == "tasks" and parts[1] in tasks:
        return Layer(f"task {parts[1]}", RANK[TASKS], parts[1])
    return None


def layer_violations(root: Path) -> list[str]:
    """One line per module in no layer and per use that breaks the layer order."""
    modules = find_modules(root)
    tasks = task_packages(root, modules)
    problems = [f"{path} ({name}) is in no layer: add its folder to LAYERS in tests/test_import_layers.py and to "
                "docs/ARCHITECTURE.md, or, for a task package, name its classes in conf/task/<task>.yaml"
                for name, path in modules.items() if layer_of(path, tasks) is None]
    confs = conf_uses(root, modules)
    # A task's conf file sits with the task package its task.module names.
    conf_layer = {u.source_path: layer for u in confs if u.source == "task.module"
                  if (layer := layer_of(u.target_path, tasks)) and layer.task}
    for use in code_uses(root, modules) + confs:
        if use.implied:
            continue
        source = conf_layer.get(use.source_path) if use.source_path.startswith("conf/") else layer_of(use.source_path, tasks)
        target = layer_of(use.target_path, tasks)
        if source is None:
            problems.append(f"{use.source_path}:{use.line}: {use.source}: the file's task.module names no task package")
        elif target is None:
            problems.append(f"{use.source_path}:{use.line}: {use.source} ({source.name}) {use.how} {use.target}, "
                            f"which is in no layer")
        elif not source.may_use(target) and TASK_COMMANDS.get(use.source_path, "") != target.task:
            problems.append(f"{use.source_path}:{use.line}: {use.source} ({source.name}) {use.how} "
                            f"{use.target} ({target.name}); {source.rule_against(target)}")
    return sorted(set(problems))


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: every sesame module it imports anywhere in its body}`` (imports only: a string load is
    lazy and cannot make an import cycle)."""
    modules = find_modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for use in code_uses(root, modules):
        if use.how == "imports":
            graph[use.source].add(use.target)
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


# The tree ---------------------------------------------------------------------------------------------

def test_every_module_keeps_the_layer_order():
    problems = layer_violations(ROOT)
    assert not problems, f"{len(problems)} layer violation(s):\n" + "\n".join(problems)


def test_the_shipped_tasks_are_task_packages():
    assert {"glue", "qa", "ner"} <= task_packages(ROOT, find_modules(ROOT))


def test_there_is_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("path", sorted((ROOT / "heads").rglob("*.py")), ids=lambda p: p.name)
def test_heads_are_plain_torch(path):
    forbidden = ("sesame.tasks", "lightning", "hydra", "omegaconf", "transformers")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in getattr(node, "names", [])] if isinstance(node, ast.Import) else []
        assert not any(n.startswith(forbidden) for n in names), f"{path.name} imports {names}"


# The checker itself, on a small made-up tree -----------------------------------------------------------

SYNTHETIC = {
    "heads/__init__.py": "",
    "heads/pooling.py": "import torch\n",
    "tasks/__init__.py": "",
    "tasks/core/__init__.py": "",
    "tasks/core/errors.py": """
        from sesame.tasks.runs import runner
        def late():
            import sesame.tasks.base.task_module
        """,
    "tasks/core/paths.py": """
        from typing import TYPE_CHECKING
        from . import errors
        if TYPE_CHECKING:
            from ..inputs import batching
        """,
    "tasks/inputs/__init__.py": "",
    "tasks/inputs/batching.py": "from sesame.heads import pooling\nfrom sesame.tasks.core.errors import late\n",
    "tasks/base/__init__.py": "",
    "tasks/base/task_module.py": "from hydra.utils import get_class\nRUNNER = 'sesame.tasks.runs.runner.train'\n",
    "tasks/alpha/__init__.py": "",
    "tasks/alpha/module.py": "from sesame.tasks.base.task_module import RUNNER\nfrom ..beta import module\n",
    "tasks/alpha/data.py": "from . import module\n",
    "tasks/beta/__init__.py": "",
    "tasks/beta/module.py": "import importlib\nALPHA = importlib.import_module('sesame.tasks.alpha.data')\n",
    "tasks/runs/__init__.py": "",
    "tasks/runs/runner.py": """
        from sesame.tasks.alpha import module
        from sesame.tasks.core import errors, paths
        TASK = 'sesame.tasks.beta.module.Beta'
        """,
    "tasks/stray/__init__.py": "",
    "conf/task/alpha.yaml": """
        task:
          name: alpha
          module: sesame.tasks.alpha.module.AlphaModule
          datamodule: sesame.tasks.alpha.data.AlphaData
          predictor: sesame.tasks.beta.module.Beta
          export: sesame.tasks.runs.runner.Export
          head_settings: sesame.tasks.core.errors.Settings
        """,
    "conf/task/beta.yaml": "task:\n  name: beta\n  module: sesame.tasks.beta.module.BetaModule\n",
    "conf/task/gamma.yaml": "task:\n  name: gamma\n  module: sesame.tasks.runs.runner.Gamma\n",
}


@pytest.fixture
def synthetic(tmp_path):
    for path, text in SYNTHETIC.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return tmp_path


def test_the_checker_catches_each_kind_of_violation(synthetic):
    problems = layer_violations(synthetic)
    expected = [
        # module level, absolute, ``from pkg import module``
        "tasks/core/errors.py:1: sesame.tasks.core.errors (core) imports sesame.tasks.runs.runner (runs)",
        # inside a function
        "tasks/core/errors.py:3: sesame.tasks.core.errors (core) imports sesame.tasks.base.task_module (base)",
        # relative, under TYPE_CHECKING
        "tasks/core/paths.py:4: sesame.tasks.core.paths (core) imports sesame.tasks.inputs.batching (inputs)",
        # a string naming a module of a higher layer
        "tasks/base/task_module.py:2: sesame.tasks.base.task_module (base) string-loads sesame.tasks.runs.runner (runs)",
        # task packages, relative and string-loaded
        ("tasks/alpha/module.py:2: sesame.tasks.alpha.module (task alpha) imports sesame.tasks.beta.module (task beta); "
         "task packages never use each other"),
        "tasks/beta/module.py:2: sesame.tasks.beta.module (task beta) string-loads sesame.tasks.alpha.data (task alpha)",
        # generic code naming a task, by import or by string
        ("tasks/runs/runner.py:1: sesame.tasks.runs.runner (runs) imports sesame.tasks.alpha.module (task alpha); "
         "generic code never names a task"),
        "tasks/runs/runner.py:3: sesame.tasks.runs.runner (runs) string-loads sesame.tasks.beta.module (task beta)",
        # a task's conf naming another task's class, and a class above the task layer
        "conf/task/alpha.yaml:5: task.predictor (task alpha) string-loads sesame.tasks.beta.module (task beta)",
        "conf/task/alpha.yaml:6: task.export (task alpha) string-loads sesame.tasks.runs.runner (runs)",
        # a task conf whose task.module is no task's
        "conf/task/gamma.yaml:3: task.module: the file's task.module names no task package",
        # a folder no layer holds
        "tasks/stray/__init__.py (sesame.tasks.stray) is in no layer",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in problems), f"not reported: {line}\nreported:\n" + "\n".join(problems)
    assert len(problems) == len(expected), "\n".join(problems)
    assert any(p.startswith(expected[0]) and p.endswith(f"; a module uses only its own layer and those below it: {ORDER}")
               for p in problems)


def test_the_checker_allows_what_the_order_allows(synthetic):
    problems = "\n".join(layer_violations(synthetic))
    for fine in ("tasks/inputs/batching.py",  # inputs -> heads, inputs -> core
                 "tasks/alpha/data.py",  # within its own task package
                 "tasks/runs/runner.py:2",  # runs -> core
                 "conf/task/alpha.yaml:3", "conf/task/alpha.yaml:4",  # conf: its own task
                 "conf/task/alpha.yaml:7", "conf/task/beta.yaml",  # conf: a lower layer
                 "tasks/core/paths.py:2", "sesame.tasks.alpha.module (task alpha) imports sesame.tasks.base"):
        assert fine not in problems, problems


def test_relative_imports_resolve_from_the_package(synthetic):
    graph = import_graph(synthetic)
    assert graph["sesame.tasks.core.paths"] == {"sesame.tasks.core", "sesame.tasks.core.errors", "sesame.tasks.inputs",
                                                "sesame.tasks.inputs.batching"}  # the packages run too
    assert graph["sesame.tasks.alpha.module"] == {"sesame.tasks.base.task_module", "sesame.tasks.beta", "sesame.tasks.beta.module"}
    assert "sesame.tasks.alpha.data" not in graph["sesame.tasks.beta.module"]  # a string load is no import
