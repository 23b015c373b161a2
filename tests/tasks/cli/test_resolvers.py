"""``tasks/cli/resolvers.py`` registers the generic resolvers and whatever each task package gives in
its optional ``tasks/<task>/resolvers.py``, naming no task itself."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import sesame.tasks
from sesame.tasks.cli import resolvers
from sesame.tasks.glue.specs import glue_main_metric

ROOT = Path(__file__).resolve().parents[3]


def test_the_glue_resolver_comes_from_the_glue_package():
    assert "sesame.tasks.glue.resolvers" in resolvers.task_resolver_modules()
    found = resolvers.all_resolvers()
    assert found["glue_main_metric"] is glue_main_metric
    assert {"shipped", "data_dir"} <= found.keys()


def test_glue_main_metric_resolves_in_a_config():
    resolvers.register_resolvers()
    cfg = OmegaConf.create({"data": {"task_name": "mrpc"}, "main_metric": "val_${glue_main_metric:${data.task_name}}"})
    assert cfg.main_metric == "val_f1"


def test_the_generic_module_names_no_task():
    text = (ROOT / "tasks" / "cli" / "resolvers.py").read_text(encoding="utf-8")
    confs = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "conf" / "task").glob("*.yaml"))
    tasks = set(re.findall(r"sesame\.tasks\.(\w+)\.", confs)) | {p.stem for p in (ROOT / "conf" / "task").glob("*.yaml")}
    assert {"glue", "qa", "ner", "squad_v1"} <= tasks
    for name in tasks:
        assert not re.search(rf"\b{name}\b", text), f"tasks/cli/resolvers.py names the task {name}"


def test_a_new_task_packages_resolvers_are_found_without_importing_other_packages(tmp_path, monkeypatch):
    (tmp_path / "newtask").mkdir()
    (tmp_path / "newtask" / "__init__.py").write_text("")
    (tmp_path / "newtask" / "resolvers.py").write_text("RESOLVERS = {'new_one': lambda x: x + '!'}\n")
    (tmp_path / "heavy").mkdir()  # a package without resolvers.py is never imported
    (tmp_path / "heavy" / "__init__.py").write_text("raise AssertionError('imported')\n")
    monkeypatch.setattr(sesame.tasks, "__path__", [str(tmp_path)])
    for name in ("sesame.tasks.newtask", "sesame.tasks.newtask.resolvers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert resolvers.task_resolver_modules() == ["sesame.tasks.newtask.resolvers"]
    assert resolvers.all_resolvers()["new_one"]("a") == "a!"
    for name in ("sesame.tasks.newtask", "sesame.tasks.newtask.resolvers"):
        sys.modules.pop(name, None)


def test_a_resolver_given_twice_is_named(monkeypatch):
    fake = types.ModuleType("fake_resolvers")
    fake.RESOLVERS = {"shipped": str}
    monkeypatch.setitem(sys.modules, "fake_resolvers", fake)
    monkeypatch.setattr(resolvers, "task_resolver_modules", lambda: ["fake_resolvers"])
    with pytest.raises(RuntimeError, match="'shipped' is given by both sesame.tasks.cli.resolvers and fake_resolvers"):
        resolvers.all_resolvers()


def test_task_resolvers_import_no_torch():
    probe = ("import sys; from sesame.tasks.cli.resolvers import all_resolvers; all_resolvers(); "
             "print(*[m for m in ('torch', 'lightning', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
