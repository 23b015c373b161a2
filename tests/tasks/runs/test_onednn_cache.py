"""trainer.onednn_primitive_cache (tasks/runs/onednn_cache.py): oneDNN's primitive cache bounded for the run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.onednn_cache import CAPACITY_VARIABLE, bound_primitive_cache

# In a fresh process: the capacity is set the way the run sets it (after torch is imported, before any product),
# then the same bf16 product runs twice under oneDNN's verbose mode, which says whether the second found its
# primitive in the cache.
SCRIPT = (
    "import sys, torch\n"
    "from sesame.tasks.runs.onednn_cache import bound_primitive_cache\n"
    "print('capacity', bound_primitive_cache(None if sys.argv[1] == 'none' else int(sys.argv[1])), flush=True)\n"
    "a = torch.randn(2, 4, 40, 32, dtype=torch.bfloat16); b = torch.randn(2, 4, 32, 40, dtype=torch.bfloat16)\n"
    "with torch.backends.mkldnn.verbose(2):\n"
    "    for _ in range(2):\n"
    "        a @ b\n"
)


def cache_events(capacity: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """(the capacity line the script prints, oneDNN's create:cache_* events for the two products) in a fresh process
    whose environment lacks oneDNN's variable, plus ``env``."""
    run_env = {k: v for k, v in os.environ.items() if k != CAPACITY_VARIABLE} | (env or {})
    out = subprocess.run([sys.executable, "-c", SCRIPT, capacity], capture_output=True, text=True, check=True,
                         env=run_env).stdout
    events = [part for line in out.splitlines() for part in line.split(",") if part.startswith("create:cache_")]
    return out.splitlines()[0], events


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="bf16 products do not run in oneDNN here")
def test_a_bounded_cache_keeps_no_primitive_and_the_default_keeps_them():
    assert cache_events("none") == ("capacity None", ["create:cache_miss", "create:cache_hit"])
    assert cache_events("0") == ("capacity 0", ["create:cache_miss", "create:cache_miss"])
    # the environment's own setting wins over the config's
    assert cache_events("0", {CAPACITY_VARIABLE: "1024"}) == ("capacity 1024", ["create:cache_miss", "create:cache_hit"])


def test_the_setting_is_typed_and_a_bad_one_is_one_clear_error(make_cfg, monkeypatch):
    assert RunSettings.from_config(make_cfg("trainer.onednn_primitive_cache=64")).trainer.onednn_primitive_cache == 64
    assert RunSettings.from_config(make_cfg()).trainer.onednn_primitive_cache is None
    assert "onednn_primitive_cache" not in RunSettings.from_config(make_cfg()).trainer.trainer_kwargs()
    for bad in ("-1", "true", "'64'", "1.5"):
        with pytest.raises(ConfigError, match=r"onednn_primitive_cache=.*whole number of primitives >= 0"):
            RunSettings.from_config(make_cfg(f"trainer.onednn_primitive_cache={bad}"))
    monkeypatch.delenv(CAPACITY_VARIABLE, raising=False)
    assert bound_primitive_cache(None) is None and CAPACITY_VARIABLE not in os.environ
