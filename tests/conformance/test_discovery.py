"""The suite finds its tasks: every ``conf/task/*.yaml`` is one, with defaults where its tests folder
declares nothing; declarations name real tasks of their own package and known keys only; and the
suite's code names no task (a new task gets every check without editing a test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conformance import specs
from tests.conformance.specs import SPECS, DeclarationError, discover, read_declarations

SUITE = Path(__file__).parent


def test_every_task_config_is_a_task_of_the_suite():
    assert [s.name for s in SPECS] == sorted(p.stem for p in specs.TASK_CONFIGS.glob("*.yaml")) != []


def test_every_declaration_names_a_task_of_its_own_package_and_a_function_that_exists():
    packages = {s.name: s.package for s in SPECS}
    files = sorted(specs.TASK_TESTS.glob(f"*/{specs.DECLARATIONS}"))
    assert files
    for path in files:
        for task in read_declarations(path):
            assert packages.get(task) == path.parent.name, f"{path}: {task} is no task of tasks/{path.parent.name}/"
    for spec in SPECS:
        assert spec.predict is None or callable(spec.expectations()), spec


def test_the_suites_code_names_no_task():
    names = {s.name for s in SPECS} | {s.package for s in SPECS}
    for path in SUITE.glob("*.py"):
        if path.name == "__init__.py":  # its docstring shows an example declaration
            continue
        code = path.read_text(encoding="utf-8")
        named = sorted(n for n in names if re.search(rf"\b{re.escape(n)}\b", code))
        assert not named, f"{path.name} names {named}: the suite must reach tasks through conf/task/ only"


def _task(configs: Path, name: str, package: str) -> None:
    (configs / f"{name}.yaml").write_text(f"# @package _global_\ntask:\n  name: {name}\n  module: "
                                          f"sesame.tasks.{package}.module.Module\n")


def test_a_new_task_without_declarations_gets_the_defaults_and_a_typo_is_refused(tmp_path):
    configs, tests = tmp_path / "conf", tmp_path / "tests"
    configs.mkdir()
    (tests / "pos").mkdir(parents=True)
    _task(configs, "pos", "pos")
    _task(configs, "chunking", "pos")
    (spec_chunking, spec_pos) = discover(configs, tests)
    assert (spec_chunking.name, spec_chunking.package, spec_chunking.overrides, spec_chunking.refuses) == ("chunking", "pos", (), {})
    assert spec_pos.declared_in is None and spec_pos.expectations() is None
    declared = tests / "pos" / specs.DECLARATIONS
    declared.write_text("pos:\n  overrides: [data.max_seq_length=32]\n  refuses:\n    hf_export: 'no tagger'\n")
    assert discover(configs, tests)[1].overrides == ("data.max_seq_length=32",)
    for wrong, words in (("pos:\n  override: [a=1]\n", "unknown key"), ("pos:\n  refuses:\n    hf: x\n", "none of"),
                         ("pos:\n  ddp:\n    unequal_metrics: [val_loss]\n", "say why")):
        declared.write_text(wrong)
        with pytest.raises(DeclarationError, match=words):
            discover(configs, tests)
