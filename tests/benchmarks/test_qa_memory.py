"""benchmarks/qa_memory.py: each phase reports its own peak (VmHWM reset between phases), and a whole run
in a child process reports every phase of sesame-train in order (tiny random BERT, a few questions).
Nothing here is timed or compared with a memory budget."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.benchmarks import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def qm():
    return load_benchmark("qa_memory")


#: In a fresh process: a test worker's own high-water mark (the tests it ran before) would hide a 64 MiB step.
PHASES_PROBE = """
import json, sys
import numpy as np
sys.path.insert(0, {benchmarks!r})
import qa_memory as qm
phases = qm.Phases()
phases.mark("big")
block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
del block
phases.mark("small")
phases.mark("end")
print(json.dumps(phases.rows))
"""


def test_a_phase_reports_its_own_peak_not_an_earlier_one():
    done = subprocess.run([sys.executable, "-c", PHASES_PROBE.format(benchmarks=str(BENCHMARKS))],
                          capture_output=True, text=True, check=True)
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    big, small = rows[1], rows[2]
    assert (big["phase"], small["phase"]) == ("big", "small")
    assert big["peak_mib"] >= big["start_mib"] + 60
    assert small["peak_mib"] < big["peak_mib"] - 50  # the reset: the 64 MiB are not counted again
    assert all(r["peak_mib"] >= r["end_mib"] for r in rows)


def test_a_run_reports_every_phase_in_order(qm, tiny_bert_dir):
    result = qm.run_one("squad_v2", [f"encoder.name_or_path={tiny_bert_dir}", "data.max_train_examples=16",
                                     "data.max_eval_examples=8", "data.max_seq_length=192", "trainer.max_steps=2"], None)
    names = [r["phase"] for r in result["phases"]]
    assert names[:6] == ["imports", "tokenizer", "data: validation windows", "data: train windows", "model",
                         "trainer setup"]
    assert names[6:] == ["training steps", "validation: forward", "validation: decode + score", "validation: end",
                         "training steps", "after fit: checkpoint, metrics"]
    assert result["peak_rss_mib"] == max(r["peak_mib"] for r in result["phases"])
    assert "val_f1" in result["metrics"]
