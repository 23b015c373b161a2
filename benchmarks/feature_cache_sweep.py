"""A six-variant fusion sweep (the NER layer study) with the frozen-feature cache against the same
sweep without it, in one run.

Each variant is a full ``sesame-train`` run (fit + validate) with ``finetune=frozen``; without the
cache every variant runs the encoder over the data every epoch, with it the encoder runs once for
the whole sweep (the first variant pays the build) and every variant trains its head on features
read from disk. Target: the cached sweep costs at most 1.5x one uncached variant.

    python benchmarks/feature_cache_sweep.py                   # shipped WNUT-17 slice, MiniLM-L6
    python benchmarks/feature_cache_sweep.py --data wnut17     # full WNUT-17 from $SESAME_DATA_DIR
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from hydra import compose, initialize_config_module  # noqa: E402

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.resolvers import register_resolvers  # noqa: E402
from sesame.tasks.runs.runner import train  # noqa: E402

VARIANTS = ("embeddings", "last", "second_to_last", "sum_last_4", "concat_last_4", "scalar_mix")


def run(fusion: str, cached: bool, args: argparse.Namespace, cache_dir: str, out: str) -> tuple[float, float]:
    overrides = [
        "task=ner", f"data={args.data}", f"fusion={fusion}", "finetune=frozen", f"trainer.max_epochs={args.epochs}",
        "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
        f"cache.enabled={str(cached).lower()}", f"cache.dir={cache_dir}", "cache.layers=all",  # one entry for every fusion
    ]
    if args.max_train_examples:
        overrides.append(f"data.max_train_examples={args.max_train_examples}")
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    start = time.perf_counter()
    metrics = train(RunSettings.from_config(cfg), os.path.join(out, f"{fusion}-{'cached' if cached else 'plain'}"))
    return time.perf_counter() - start, metrics["val_f1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="wnut17_slice", help="conf/data preset (default: the shipped WNUT-17 slice)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-train-examples", type=int, default=None)
    args = parser.parse_args()
    register_resolvers()
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as out:
        plain = {v: run(v, False, args, cache_dir, out) for v in VARIANTS}
        cached = {v: run(v, True, args, cache_dir, out) for v in VARIANTS}
    one = plain["last"][0]
    print(f"\nNER fusion sweep, data={args.data}, {args.epochs} epochs, MiniLM-L6 frozen, CPU")
    print(f"{'fusion':16} {'uncached s':>11} {'cached s':>9} {'F1 uncached':>12} {'F1 cached':>10}")
    for v in VARIANTS:
        print(f"{v:16} {plain[v][0]:>11.1f} {cached[v][0]:>9.1f} {plain[v][1]:>12.4f} {cached[v][1]:>10.4f}")
    total_plain, total_cached = sum(t for t, _ in plain.values()), sum(t for t, _ in cached.values())
    print(f"six variants: uncached {total_plain:.1f} s = {total_plain / one:.2f}x one uncached variant; "
          f"cached (build included) {total_cached:.1f} s = {total_cached / one:.2f}x one uncached variant; "
          f"cached/uncached sweep = {total_cached / total_plain:.2f}")


if __name__ == "__main__":
    main()
