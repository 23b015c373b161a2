"""``trainer.precision=auto``: bf16-mixed where the CPU has bf16 instructions (faked flag sets here), fp32
elsewhere, logged; an explicit precision is passed on as it is."""

from __future__ import annotations

import logging

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import precision
from sesame.tasks.runs.precision import auto_precision, cpu_flags, resolve_precision


@pytest.mark.parametrize(("flags", "expected"), [
    ({"avx2", "avx512f", "avx512_bf16"}, "bf16-mixed"),
    ({"avx2", "amx_bf16", "amx_tile"}, "bf16-mixed"),
    ({"avx2", "avx512f", "avx512_vnni"}, "32-true"),
    (set(), "32-true"),
])
def test_the_cpu_choice_follows_its_bf16_flags(flags, expected):
    assert auto_precision(False, False, flags) == expected


def test_a_gpu_picks_bf16_only_where_it_supports_it():
    assert auto_precision(True, True, ()) == "bf16-mixed"
    assert auto_precision(True, False, {"amx_bf16"}) == "32-true"


def test_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\nbugs\t\t: none\n", encoding="utf-8")
    assert cpu_flags(info) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize(("flags", "expected"), [({"amx_bf16"}, "bf16-mixed"), ({"avx2"}, "32-true")])
def test_auto_resolves_with_a_log_line_and_explicit_values_win(monkeypatch, caplog, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))
    with caplog.at_level(logging.INFO, logger=precision.__name__):
        assert resolve_precision("auto", "cpu") == expected
    assert f"trainer.precision=auto: {expected}" in caplog.text
    assert resolve_precision("32-true", "cpu") == "32-true"
    assert resolve_precision("bf16-mixed", "cpu") == "bf16-mixed"


def test_a_run_builds_its_trainer_with_the_resolved_precision(make_cfg, monkeypatch, tmp_path):
    from sesame.tasks.runs.runner import build_trainer

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    trainer = build_trainer(RunSettings.from_config(make_cfg("trainer.precision=auto", "trainer.accelerator=cpu")), tmp_path, None)
    assert trainer.precision == "bf16-mixed"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2"}))
    trainer = build_trainer(RunSettings.from_config(make_cfg("trainer.precision=auto", "trainer.accelerator=cpu")), tmp_path / "b", None)
    assert trainer.precision == "32-true"
