"""docs/ARCHITECTURE.md cannot go stale: it names every module of ``heads/`` and ``tasks/`` (a task package
with a ``README.md`` of its own names its modules there instead, so adding a task touches no generic file),
and lists the layers in the order ``tests/test_import_layers.py`` enforces."""

from __future__ import annotations

import re

import pytest

from tests.test_import_layers import LAYERS, ORDER, ROOT, TASKS, find_modules

DOC = ROOT / "docs" / "ARCHITECTURE.md"
#: A heading that names a folder: ``### core: `tasks/core/` `` or ``#### `tasks/glue/` (...)``.
FOLDER_HEADING = re.compile(r"^#{2,6} .*?`((?:heads|tasks)(?:/[\w<>]+)*)/`", re.MULTILINE)


def sections(text: str) -> dict[str, str]:
    """``{folder: the text under its heading, up to the next heading}``."""
    headings = list(re.finditer(r"^#{2,6} .*$", text, re.MULTILINE))
    found = {}
    for i, heading in enumerate(headings):
        if match := FOLDER_HEADING.match(heading.group(0)):
            end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
            found[match.group(1)] = text[heading.end():end]
    return found


def is_named(path: str, text: str) -> bool:
    """The module's path in backticks anywhere, or its path inside the folder in the folder's section."""
    if f"`{path}`" in text:
        return True
    by_folder = sections(text)
    return any(path.startswith(folder + "/") and f"`{path.removeprefix(folder + '/')}`" in body
               for folder, body in by_folder.items())


def documented_modules() -> list[str]:
    """Every module file, empty package markers (``__init__.py`` with nothing in it) excepted."""
    return sorted(path for path in find_modules(ROOT).values()
                  if not (path.endswith("__init__.py") and not (ROOT / path).read_text(encoding="utf-8").strip()))


def own_readme(path: str) -> str | None:
    """``tasks/<task>/README.md`` of a task package's module, where the package has one."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tasks" or not (ROOT / "tasks" / parts[1] / "README.md").is_file():
        return None
    return f"tasks/{parts[1]}/README.md"


@pytest.mark.parametrize("path", documented_modules())
def test_every_module_is_named_in_the_architecture_doc(path):
    readme = own_readme(path)
    if readme is not None:
        inside = path.removeprefix(readme.removesuffix("README.md"))
        assert f"`{inside}`" in (ROOT / readme).read_text(encoding="utf-8"), (
            f"{path} is not named in {readme}: add one line on what it does")
        return
    named = is_named(path, DOC.read_text(encoding="utf-8"))
    assert named, (
        f"{path} is not named in docs/ARCHITECTURE.md: add one line on what it does under its folder's heading")


def test_the_doc_lists_the_layers_in_the_enforced_order():
    text = DOC.read_text(encoding="utf-8")
    order = re.sub(r" \([^)]*\)", "", next(line for line in text.splitlines() if line.startswith("heads < ")))
    assert order == ORDER
    folders = list(sections(text))
    expected = [next(f for f in folders_ if not f.endswith(".py")) if name != TASKS else "tasks/<task>"
                for name, folders_ in LAYERS]
    layer_headings = [f for f in folders if f in expected]
    assert layer_headings == expected, "the layer headings of docs/ARCHITECTURE.md are not in LAYERS order"


def test_the_checker_sees_a_missing_module():
    text = "### core: `tasks/core/`\n\n- `errors.py`: ...\n\n### runs: `tasks/runs/`\n\n- `tasks/core/paths.py`\n"
    assert is_named("tasks/core/errors.py", text)
    assert is_named("tasks/core/paths.py", text)  # a full path counts anywhere
    assert not is_named("tasks/runs/errors.py", text)  # a bare name counts only in its folder's section
    assert not is_named("tasks/core/settings.py", text)
