"""A pruned Optuna search against the same search unpruned: CPU time to reach the unpruned search's best.

Both searches are ``sesame-train --multirun +experiment=optuna_sst2`` (head learning rate, pooling and fusion
over a frozen MiniLM-L6 with cached features) on SST-2's training file with 10% held out for validation
(``data.holdout_fraction=0.1``; the dev set is never read), the same TPE seed and the same number of trials;
one with ``hydra.sweeper.pruner=none``, one with the median pruner. Each trial's CPU time is the sweep
process's over its job (``batch_cpu_s`` in the trial ledger: the basic launcher runs one job at a time, in
process). A trial's score is the best held-out accuracy it validated (what its ``best.ckpt`` holds).

Reported: each search's CPU time and best trial, the pruned search's CPU time until a trial reaches the
unpruned search's best score (goal: at most half the unpruned search's time to its best), and whether both
searches pick the same recipe. The feature cache is built first, by a one-step run, so neither search pays it.

    python benchmarks/optuna_pruning.py                                    # 16 trials, 3 epochs, 8,000 examples
    python benchmarks/optuna_pruning.py --trials 24 --epochs 4 --max-train-examples 20000
    python benchmarks/optuna_pruning.py --sampler random   # both searches try the same recipes in the same order
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def common(args: argparse.Namespace) -> list[str]:
    return ["data=sst2", "data.holdout_fraction=0.1", f"data.max_train_examples={args.max_train_examples}",
            "finetune=frozen", "cache.enabled=true", "cache.layers=all", f"cache.dir={args.cache_dir}",
            "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]


def sesame_train(overrides: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "sesame.tasks.cli.train", *overrides],
                          env={**os.environ, **ENV}, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"sesame-train {' '.join(overrides)} failed:\n{done.stderr[-4000:]}")


def search(args: argparse.Namespace, pruner: str, sweep: Path) -> list[dict[str, Any]]:
    """Run one search; its trials from the ledger, in order."""
    sesame_train(["--multirun", "+experiment=optuna_sst2", *common(args), f"hydra/sweeper/sampler={args.sampler}",
                  "hydra.sweeper.sampler.seed=42", f"hydra.sweeper.n_trials={args.trials}",
                  f"hydra.sweeper.pruner={pruner}", f"trainer.max_epochs={args.epochs}",
                  f"trainer.val_check_interval={args.val_every}", f"hydra.sweep.dir={sweep}",
                  "~hydra.callbacks.sweep_report"])
    trials = json.loads((sweep / "optuna_trials.json").read_text())["trials"]
    return sorted(trials, key=lambda t: t["number"])


def score(trial: dict[str, Any]) -> float:
    """The best held-out accuracy the trial validated (-inf if it never validated)."""
    return max(trial["intermediate"].values(), default=float("-inf"))


def cpu_to_reach(trials: list[dict[str, Any]], target: float) -> float | None:
    """CPU seconds until the first trial scoring at least ``target`` has finished (None: none does)."""
    spent = 0.0
    for trial in trials:
        spent += trial["batch_cpu_s"]
        if score(trial) >= target - 1e-12:
            return spent
    return None


def summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(trials, key=score)
    return {"cpu_s": round(sum(t["batch_cpu_s"] for t in trials), 1), "best_score": score(best),
            "best_trial": best["number"], "best_params": best["params"],
            "pruned": sum(t["state"] == "PRUNED" for t in trials),
            "validations": sum(len(t["intermediate"]) for t in trials)}


def seed_noise(args: argparse.Namespace, params: dict[str, Any], out: Path) -> dict[str, Any]:
    """The unpruned best recipe trained again with ``args.noise_seeds`` other seeds: how far its score moves
    with the seed alone (what "within seed noise of the best" means here)."""
    scores = []
    for seed in range(1, args.noise_seeds + 1):
        run = out / f"seed{seed}"
        sesame_train([*common(args), *(f"{k}={v}" for k, v in params.items()), f"seed={seed}",
                      f"trainer.max_epochs={args.epochs}", f"trainer.val_check_interval={args.val_every}",
                      f"hydra.run.dir={run}", "overwrite=true"])
        scores.append(json.loads((run / "metrics.json").read_text())["val_accuracy"])
    std = statistics.stdev(scores) if len(scores) > 1 else 0.0
    return {"seeds": list(range(1, args.noise_seeds + 1)), "scores": scores, "std": std}


def trial_rows(trials: list[dict[str, Any]]) -> list[tuple]:
    return [(t["number"], t["state"], score(t), len(t["intermediate"]), t["batch_cpu_s"]) for t in trials]


def compare(plain: list[dict[str, Any]], pruned: list[dict[str, Any]], noise: float) -> dict[str, Any]:
    """The pruned search against the unpruned one: CPU time of each until a trial reaches the unpruned best
    (strict), and until one reaches it less one seed standard deviation (within seed noise)."""
    ours, theirs = summary(pruned), summary(plain)
    best = theirs["best_score"]
    result: dict[str, Any] = {"summary": ours, "trials": trial_rows(pruned),
                              "ratio_total": round(ours["cpu_s"] / theirs["cpu_s"], 3),
                              "same_recipe": theirs["best_params"] == ours["best_params"]}
    for name, target in (("best", best), ("within_noise", best - noise)):
        plain_s, pruned_s = cpu_to_reach(plain, target), cpu_to_reach(pruned, target)
        result[name] = {"target": target, "unpruned_cpu_s": plain_s, "pruned_cpu_s": pruned_s,
                        "ratio": None if pruned_s is None else round(pruned_s / plain_s, 3),
                        "ratio_to_whole_unpruned_search": None if pruned_s is None
                        else round(pruned_s / theirs["cpu_s"], 3)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--val-every", type=int, default=75, help="validate every N training batches")
    parser.add_argument("--max-train-examples", type=int, default=8000, help="of SST-2 train (10%% held out)")
    parser.add_argument("--pruner", action="append", default=None,
                        help="a pruned search with this pruner (repeatable; default: median), e.g. "
                        "'{name:successive_halving,min_resource:1,reduction_factor:3}'")
    parser.add_argument("--sampler", default="tpe", choices=("tpe", "random"),
                        help="Optuna's sampler of both searches, seed 42 (default tpe). With random the searches try "
                        "the same recipes in the same order, whatever the pruner stops; TPE proposes from what it saw, "
                        "pruned trials included")
    parser.add_argument("--pruned-first", action="store_true",
                        help="run the pruned searches before the unpruned one (default after): which goes first "
                        "changes what the machine and its page cache give each")
    parser.add_argument("--noise-seeds", type=int, default=3,
                        help="retrain the unpruned best recipe with this many other seeds to measure seed noise (0: none)")
    parser.add_argument("--cache-dir", default=None, help="feature cache (default: <out>/cache)")
    parser.add_argument("--out", default="benchmark_optuna_pruning", help="folder for both searches")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    args.pruner = args.pruner or ["median"]
    out = Path(args.out)
    args.cache_dir = args.cache_dir or str(out / "cache")
    load_before = os.getloadavg()
    start = time.perf_counter()
    # the cache, built once for every search (one training step)
    sesame_train([*common(args), "trainer.max_steps=1", f"hydra.run.dir={out / 'cache_build'}", "overwrite=true"])
    if args.pruned_first:  # the search that runs second reads the feature cache from a warm page cache
        pruned = {p: search(args, p, out / f"pruned{i}") for i, p in enumerate(args.pruner)}
        plain = search(args, "none", out / "unpruned")
    else:
        plain = search(args, "none", out / "unpruned")
        pruned = {p: search(args, p, out / f"pruned{i}") for i, p in enumerate(args.pruner)}
    noise = seed_noise(args, summary(plain)["best_params"], out / "noise") if args.noise_seeds else None
    results = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "json", "cache_dir")},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.perf_counter() - start, 1),
        "unpruned": {"summary": summary(plain), "trials": trial_rows(plain)},
        "seed_noise": noise,
        "pruned": {p: compare(plain, trials, noise["std"] if noise else 0.0) for p, trials in pruned.items()},
    }
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
