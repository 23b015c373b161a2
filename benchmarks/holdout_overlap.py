"""How much of a recipe sweep's held-out split is text its training split already holds, and how each candidate
scores on that part and on the rest.

SST-2's training file holds the phrases of its parse trees beside whole sentences, so a random held-out 10% is
mostly phrases that occur inside training examples; its dev set is whole sentences that occur in no training
example. The full-data study's sweep (``benchmarks/full_data_study.py --sweep``) chooses on such a split; this
reads each candidate's held-out predictions (``run/val_<task>.tsv``: the best held-out epoch, indexed by
training-file row) and the data, and writes a table (default ``docs/results/sst2_holdout_overlap.md``).

    python benchmarks/holdout_overlap.py --study outputs/full_data_study      # needs the study's SST-2 sweep and $SESAME_DATA_DIR/sst2
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from full_data_study import DEFAULT_OUT as STUDY_DIR
from full_data_study import REPO, RUN_RECORDS, load_records
from omegaconf import OmegaConf

from sesame.tasks.core.paths import data_dir_path
from sesame.tasks.glue.readers import read_glue_tsv
from sesame.tasks.glue.specs import glue_spec

DATA_DIR = Path(data_dir_path())


def read_predictions(path: Path) -> dict[int, int]:
    """A run's ``val_<task>.tsv``: predicted label id by example index (the reader's ``index`` column)."""
    with path.open(encoding="utf-8", newline="") as f:
        return {int(row["index"]): int(row["prediction"]) for row in csv.DictReader(f, delimiter="\t")}


def contained(texts: list[str], corpus: list[str]) -> list[bool]:
    """Per text, whether it occurs inside one of ``corpus`` (as a whole example or a phrase of one)."""
    joined = "\n".join(t.strip() for t in corpus)
    return [t.strip() in joined for t in texts]


def split_accuracy(labels: dict[int, int], predictions: dict[int, int], inside: set[int]) -> tuple[float, float, float]:
    """Accuracy over all held-out rows, over those inside a training example, and over the rest."""
    def acc(rows: list[int]) -> float:
        return sum(predictions[i] == labels[i] for i in rows) / len(rows) if rows else float("nan")

    rows = sorted(predictions)
    return acc(rows), acc([i for i in rows if i in inside]), acc([i for i in rows if i not in inside])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=STUDY_DIR,
                        help=f"the full-data study's folder (default {STUDY_DIR}; $SESAME_STUDY_DIR)")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR,
                        help=f"holds sst2/train.tsv and sst2/dev.tsv (default {DATA_DIR}; $SESAME_DATA_DIR)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "sst2_holdout_overlap.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # sesame's own reader: the same texts, labels and indices the sweep trained and predicted on
    train, dev = (read_glue_tsv(args.data_dir / "sst2" / name, glue_spec("sst2")) for name in ("train.tsv", "dev.tsv"))
    train_text, train_labels = train["text_a"], train["label"]
    files = sorted((args.study / "sweep" / "units" / "sst2").glob("sweep-*/seed1/run/val_SST-2.tsv"))
    if not files:
        sys.exit(f"no held-out predictions under {args.study}/sweep/units/sst2: run "
                 "benchmarks/full_data_study.py --sweep --tasks sst2 first")
    candidates = {f.parts[-4].removeprefix("sweep-"): read_predictions(f) for f in files}
    held = sorted(next(iter(candidates.values())))
    if any(sorted(p) != held for p in candidates.values()):
        sys.exit("the candidates' held-out rows differ: they must share data.holdout_seed and the training slice")
    seen = set(held)
    # the sweep trains on the first data.max_train_examples rows less the held-out ones
    limit = OmegaConf.load(files[0].parent / "config.yaml").data.max_train_examples or len(train)
    corpus = [train_text[i] for i in range(limit) if i not in seen]
    inside = {i for i, hit in zip(held, contained([train_text[i] for i in held], corpus)) if hit}
    dev_inside = sum(contained(dev["text_a"], train_text))
    labels = {i: train_labels[i] for i in held}
    lines = [
        "# SST-2: the sweep's held-out split against the dev set", "",
        f"Written by `python benchmarks/holdout_overlap.py --study <study folder>`.", "",
        f"{len(inside)} of the {len(held)} held-out training examples ({len(inside) / len(held):.0%}) occur inside an "
        f"example of the sweep's training part (a phrase of a training sentence, or the sentence itself); "
        f"{dev_inside} of the {len(dev)} dev sentences occur inside any of the {len(train)} training examples. "
        "Held-out accuracy of each candidate's best held-out epoch, on all held-out rows, on those inside a training "
        "example, and on the rest:", "",
        "| candidate | all | inside a training example | the rest |", "|---|---|---|---|",
    ]
    scores = {name: split_accuracy(labels, predictions, inside) for name, predictions in candidates.items()}
    for name, split in sorted(scores.items(), key=lambda kv: -kv[1][0]):
        lines.append("| " + " | ".join([name, *(f"{a:.4f}" for a in split)]) + " |")
    lines += ["", f"On the dev set ({len(dev)} sentences), the study's full-training runs (final epoch, seed 1, from "
              f"`{RUN_RECORDS.relative_to(REPO)}`):", "", "| arm | dev accuracy | sentences right |", "|---|---|---|"]
    for record in load_records():
        if record["task"] == "sst2" and record["seed"] == 1:
            accuracy = record["final"]["val_accuracy"]
            lines.append(f"| {record['arm']} | {accuracy:.4f} | {round(accuracy * len(dev))} |")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
