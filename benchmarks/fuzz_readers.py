"""Fuzz every reader of user input with many random cases and count how each ended.

The readers, their inputs and the checks are those of the fuzz tests (``tests/fuzz_targets.py``): data
files, every task's ``sesame-predict`` input, ``sesame-score``'s files, numeric settings. Here each runs
``--examples`` random cases (hypothesis, not derandomised, seeded by ``--seed``) and the counts of
correct reads, user errors (one line naming file, line and field, or the setting) and internal errors
(anything else: a crash, a wrong result, a message that names nothing) are printed per reader, with the
first internal errors of each. The goal is no internal error. The predictors are tiny random models
trained here (``tests/tasks/inference/test_predictor.py``'s runs), so this needs no data beyond the
shipped slices.

    python benchmarks/fuzz_readers.py --examples 1000 --seed 0
    python benchmarks/fuzz_readers.py --examples 50 --targets glue_tsv,predict_qa   # quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (the targets and the tiny runs)

INTERNAL = "internal_error"


def _compose(tiny_bert: Path):
    from hydra import compose, initialize_config_module

    def make(*overrides: str) -> Any:
        base = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
                f"encoder.name_or_path={tiny_bert}"]
        with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
            return compose(config_name="config", overrides=[*base, *overrides])

    return make


def build_context(folder: Path, tasks: set[str]) -> Any:
    """The fuzz context: a tiny encoder, the tiny runs of the predict targets asked for, a composer."""
    from sesame.tasks.base.run_settings import RunSettings
    from sesame.tasks.cli.resolvers import register_resolvers
    from sesame.tasks.inference.predictor import Predictor
    from sesame.tasks.runs.runner import train
    from tests.conftest import build_tiny_bert
    from tests.fuzz_targets import PREDICT_RUNS, FuzzContext
    from tests.tasks.inference.test_predictor import RUNS

    register_resolvers()
    compose = _compose(build_tiny_bert(folder / "tiny_bert"))
    predictors = {}
    for task in sorted(tasks):
        run = folder / f"run_{task}"
        train(RunSettings.from_config(compose(*RUNS[PREDICT_RUNS[task]])), run)
        predictors[task] = Predictor.from_run(run, batch_size=2, chunk_size=3)
    return FuzzContext(predictors=predictors, compose=compose)


def fuzz_target(target: Any, context: Any, examples: int, seed: int, shown: int = 3) -> dict[str, Any]:
    """Run ``examples`` random cases of ``target``; ``{"counts": {...}, "failures": [...], "seconds": s}``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    counts: Counter[str] = Counter()
    failures: list[str] = []

    @hypothesis_seed(seed)
    @settings(max_examples=examples, derandomize=False, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(example=target.strategy)
    def run(example: Any) -> None:
        try:
            outcome = target.check(context, example)
        except Exception as err:  # noqa: BLE001 - counting internal errors is the point
            outcome = INTERNAL
            if len(failures) < shown:
                failures.append(f"{type(err).__name__}: {str(err)[:300]} | input {example!r:.300}")
        counts[outcome] += 1

    start = time.perf_counter()
    run()
    return {"counts": dict(counts), "failures": failures, "seconds": round(time.perf_counter() - start, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="random cases per reader (hypothesis max_examples)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    parser.add_argument("--targets", default="", help="comma-separated reader names (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import datasets

    datasets.utils.logging.set_verbosity_error()  # its reader logs each refused file before sesame's message
    from tests.fuzz_targets import READ, REFUSED, TARGETS

    chosen = [t for t in TARGETS if not args.targets or t.name in args.targets.split(",")]
    tasks = {t.name.removeprefix("predict_").replace("ner_tokens", "ner") for t in chosen if t.name.startswith("predict_")}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sesame_fuzz_bench_") as folder:
        context = build_context(Path(folder), tasks)
        print(f"| reader | cases | correct reads | user errors | internal errors | seconds |\n|---|---|---|---|---|---|")
        for target in chosen:
            result = fuzz_target(target, context, args.examples, args.seed)
            results[target.name] = result
            c = result["counts"]
            print(f"| {target.name} | {sum(c.values())} | {c.get(READ, 0)} | {c.get(REFUSED, 0)} | {c.get(INTERNAL, 0)} "
                  f"| {result['seconds']} |", flush=True)
    for name, result in results.items():
        for failure in result["failures"]:
            print(f"internal error in {name}: {failure}")
    total = sum(r["counts"].get(INTERNAL, 0) for r in results.values())
    print(f"internal errors in all: {total} (examples={args.examples}, seed={args.seed})")
    if args.json is not None:
        args.json.write_text(json.dumps({"examples": args.examples, "seed": args.seed, "results": results}, indent=1))


if __name__ == "__main__":
    main()
