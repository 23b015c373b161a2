"""``sesame-score``: official SQuAD v1.1 / v2.0 scores of a predictions file, printed as one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from sesame.tasks.qa.metrics import compute, gold_from_dataset

EPILOG = """\
examples:
  sesame-score squad_v1 outputs/run/predictions.json dev-v1.1.json
  sesame-score squad_v2 outputs/run/predictions.json dev-v2.0.json --na-prob-file outputs/run/null_odds.json

PREDICTIONS.json maps question id -> answer text ("" = no answer), as written by sesame-train /
sesame-eval (predictions.json). DATASET.json is the SQuAD-format file with the gold answers.
squad_v1 prints {"exact_match", "f1"}; squad_v2 adds total, HasAns_*/NoAns_* (exact, f1, total),
best_exact, best_exact_thresh, best_f1, best_f1_thresh. Scores are on a 0-100 scale.
Exit status: 0 on success, 2 on unreadable or malformed input.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sesame-score",
        description="Score SQuAD predictions with the official v1.1 / v2.0 evaluation (EM and F1).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("version", choices=["squad_v1", "squad_v2"], help="which official script to follow")
    parser.add_argument("predictions", type=Path, metavar="PREDICTIONS.json", help="{question id: answer text}")
    parser.add_argument("dataset", type=Path, metavar="DATASET.json", help="SQuAD-format gold file")
    parser.add_argument(
        "--na-prob-file", type=Path, default=None, metavar="NULL_ODDS.json",
        help="squad_v2: {question id: no-answer probability or null odds} (e.g. null_odds.json); default 0 for all",
    )
    parser.add_argument(
        "--na-prob-thresh", type=float, default=1.0, metavar="T",
        help='squad_v2: predict "" where the no-answer probability exceeds T (default 1.0)',
    )
    return parser


def _die(message: str) -> NoReturn:
    print(f"sesame-score: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read_json(path: Path, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        _die(f"{what} file not found: {path}")
    except IsADirectoryError:
        _die(f"{what} file {path} is a directory; pass the JSON file in it")
    except UnicodeDecodeError as exc:
        _die(f"{what} file {path} is not UTF-8 text ({exc.reason} at byte {exc.start}); re-save it as UTF-8")
    except json.JSONDecodeError as exc:
        _die(f"{what} file {path} is not valid JSON: {exc}")


def _check_mapping(obj: Any, path: Path, what: str, value_type: type | tuple[type, ...]) -> dict:
    if not isinstance(obj, dict):
        _die(f"{what} file {path} must hold a JSON object {{question id: value}}, got {type(obj).__name__}")
    bad = [k for k, v in obj.items() if not isinstance(v, value_type) or isinstance(v, bool)]
    if bad:
        _die(f"{what} file {path}: value for id {bad[0]!r} has the wrong type ({len(bad)} such ids)")
    return obj


def _without_answers(dataset: dict, version: str) -> tuple[Any, str] | None:
    """The first question ``version`` cannot score, ``(id, what its 'answers' field is)``, or None.

    v1.1 scores each question against at least one answer; v2.0 takes ``[]`` as "no answer" (as its
    official script does) and a missing or null field only with ``is_impossible: true``.
    """
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = qa.get("answers")
                if answers or (version == "squad_v2" and (answers == [] or qa.get("is_impossible") is True)):
                    continue
                return qa["id"], "'answers' is missing" if "answers" not in qa else f"'answers' is {json.dumps(answers)}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    predictions = _check_mapping(_read_json(args.predictions, "predictions"), args.predictions, "predictions", str)
    dataset = _read_json(args.dataset, "dataset")
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        _die(f"dataset file {args.dataset} is not SQuAD format: expected {{\"data\": [articles]}}")
    try:
        gold = gold_from_dataset(dataset)
    except (KeyError, TypeError) as exc:
        _die(f"dataset file {args.dataset} is not SQuAD format (missing field {exc})")
    unanswered = _without_answers(dataset, args.version)
    if unanswered is not None:
        fix = ("give it its answers [{\"text\": ..., \"answer_start\": N}], or score unanswerable questions with squad_v2"
               if args.version == "squad_v1" else
               "give it its answers, or mark it unanswerable with \"is_impossible\": true and \"answers\": []")
        _die(f"dataset file {args.dataset}: question {unanswered[0]!r} has no gold answers: {unanswered[1]}. Fix: {fix}")
    bad = next(((qid, a) for qid, answers in gold.items() for a in answers if not isinstance(a, str)), None)
    if bad is not None:
        _die(f"dataset file {args.dataset}: question {bad[0]!r} has an answer text {bad[1]!r} that is not a string; "
             "answers are {\"text\": \"...\", \"answer_start\": N}")
    na_probs = None
    if args.na_prob_file is not None:
        if args.version == "squad_v1":
            _die("--na-prob-file only applies to squad_v2")
        na_probs = _check_mapping(_read_json(args.na_prob_file, "na-prob"), args.na_prob_file, "na-prob", (int, float))
    try:
        result = compute(args.version, gold, predictions, na_probs, args.na_prob_thresh)
    except ValueError as exc:
        _die(f"{exc}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
