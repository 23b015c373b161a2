"""Answer parity of sesame's extractive QA with the transformers 4.x ``pipeline("question-answering")``.

Both sides load the same ``BertForQuestionAnswering`` folder and answer the same real SQuAD v1.1 dev
questions; answers are compared exactly (text and character offsets). Two models:
  tiny    a tiny random BERT QA model over MiniLM's real vocabulary and tokenizer
  minilm  the default encoder (MiniLM-L6) with a seeded random ``qa_outputs`` head

The exact comparison uses questions whose context fits one 384-token window: there the pipeline's
score (softmax(start) x softmax(end) within the window) ranks spans exactly as sesame's raw
``start + end`` logits do. Questions with several windows are reported separately
(--multi-window-questions): the pipeline normalises each window on its own and adds the scores of
equal answer texts found in several windows, sesame compares raw logits across windows (as BERT's
run_squad and HF run_qa do), so they may differ; each such difference is checked against an
emulation of the pipeline's rule on sesame's logits.

sesame runs here (its venv, transformers 5); the pipeline runs in a transformers 4.x interpreter
($SESAME_TF4_PYTHON, default /work/venv-tf4/bin/python) started as a subprocess:

    python benchmarks/qa_pipeline_parity.py [--n-questions 1000] [--models tiny,minilm]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qa_common import (  # noqa: E402
    PIPELINE_KWARGS, Answer, PipelineWorker, SesameQA, build_minilm_qa, build_tiny_qa, default_dev_file,
    dev_questions, tf4_python, write_squad,
)

BUILDERS = {"tiny": build_tiny_qa, "minilm": build_minilm_qa}


def question_logits(sesame: SesameQA, row: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """sesame's unmasked start/end logits, offsets and context mask of each window of one question."""
    import datasets

    from sesame.tasks.qa.readers import SQUAD_FEATURES
    from sesame.tasks.qa.windows import encode_windows, window_collator

    ds = datasets.Dataset.from_list([row], features=SQUAD_FEATURES)
    windows = encode_windows(ds, sesame.tokenizer, max_seq_length=PIPELINE_KWARGS["max_seq_len"],
                             doc_stride=PIPELINE_KWARGS["doc_stride"], train=False)
    out = []
    for w in windows:
        batch = window_collator(sesame.tokenizer.pad_token_id)([w])
        with torch.inference_mode():
            logits = sesame.module.head.qa_outputs(sesame.module.encode(batch))[0].double().numpy()
        out.append({"start": logits[:, 0], "end": logits[:, 1], "offsets": w["offsets"], "context": w["context_mask"]})
    return out


def pipeline_rule(windows: list[dict[str, np.ndarray]], context: str, max_len: int) -> Answer:
    """The 4.x pipeline's decision (top_k=1, align_to_words=False) replayed on sesame's logits: per
    window a float32 softmax over context tokens and [CLS] (then [CLS] zeroed), best span by
    p_start x p_end; equal texts (case-insensitive) of several windows add their scores."""
    answers: list[dict[str, Any]] = []
    for w in windows:
        keep = w["context"].copy()
        keep[0] = True  # [CLS] stays in the softmax
        start = np.where(keep, w["start"], -10000.0).astype(np.float32)
        end = np.where(keep, w["end"], -10000.0).astype(np.float32)
        start = np.exp(start - start.max()); start /= start.sum()
        end = np.exp(end - end.max()); end /= end.sum()
        start[0] = end[0] = 0.0
        outer = np.tril(np.triu(np.outer(start, end)), max_len - 1)
        s, e = np.unravel_index(int(np.argmax(outer)), outer.shape)
        if not (w["context"][s] and w["context"][e]):
            continue
        cs, ce = int(w["offsets"][s][0]), int(w["offsets"][e][1])
        text, score = context[cs:ce], float(outer[s, e])
        same = next((a for a in answers if a["text"].lower() == text.lower()), None)
        if same:
            same["score"] += score
        else:
            answers.append({"text": text, "start": cs, "end": ce, "score": score})
    best = sorted(answers, key=lambda a: a["score"], reverse=True)[0]
    return Answer(best["text"], best["start"], best["end"])


def raw_score(windows: list[dict[str, np.ndarray]], answer: Answer, max_len: int) -> float:
    """Best raw ``start + end`` logit of the character span ``answer`` over the windows (-inf if absent)."""
    best = -np.inf
    for w in windows:
        ctx = w["context"]
        starts = np.flatnonzero(ctx & (w["offsets"][:, 0] == answer.start))
        ends = np.flatnonzero(ctx & (w["offsets"][:, 1] == answer.end))
        for s in starts:
            for e in ends:
                if 0 <= e - s < max_len:
                    best = max(best, w["start"][s] + w["end"][e])
    return float(best)


def compare(sesame: SesameQA, rows: Any, ours: dict[str, Answer], theirs: dict[str, Answer | None],
            multi: bool) -> tuple[int, list[dict[str, Any]]]:
    """(number of identical answers, the differences with their diagnosis)."""
    agree, diffs = 0, []
    max_len = PIPELINE_KWARGS["max_answer_len"]
    for row in rows:
        a, b = ours[row["id"]], theirs[row["id"]]
        if b is not None and (a.text, a.start, a.end) == (b.text, b.start, b.end):
            agree += 1
            continue
        windows = question_logits(sesame, row)
        diff: dict[str, Any] = {"id": row["id"], "windows": len(windows), "sesame": a.__dict__,
                                "pipeline": None if b is None else b.__dict__}
        if b is not None:
            ra, rb = raw_score(windows, a, max_len), raw_score(windows, b, max_len)
            emulated = pipeline_rule(windows, row["context"], max_len)
            diff.update(sesame_raw_score=ra, pipeline_answer_raw_score=rb,
                        emulated_pipeline_reproduces=(emulated.text, emulated.start, emulated.end) == (b.text, b.start, b.end))
            if multi and diff["emulated_pipeline_reproduces"]:
                diff["cause"] = "per-window softmax (+ summing equal texts across windows) vs raw logits across windows"
            elif abs(ra - rb) <= 1e-5 * max(1.0, abs(ra)):
                diff["cause"] = "near-tie: the two spans' raw scores differ by less than float32 resolution"
            else:
                diff["cause"] = "unexplained"
        else:
            diff["cause"] = "the pipeline returned no answer"
        diffs.append(diff)
    return agree, diffs


def run_model(name: str, args: argparse.Namespace, python: str, tmp: Path) -> dict[str, Any]:
    folder = BUILDERS[name](tmp / name, seed=args.seed)
    sesame = SesameQA(folder, batch_size=args.batch_size)
    report: dict[str, Any] = {"model": name}
    with PipelineWorker(python, folder, threads=args.threads) as worker:
        for kind, n in (("single", args.n_questions), ("multi", args.multi_window_questions)):
            if n <= 0:
                continue
            rows = dev_questions(args.data, n, kind, sesame.tokenizer)
            squad_json = write_squad(rows, tmp / f"{name}_{kind}.json")
            _, ours = sesame.predict(squad_json, tmp / f"{name}_{kind}_run")
            _, theirs = worker.predict(squad_json, args.batch_size)
            agree, diffs = compare(sesame, rows, ours, theirs, multi=kind == "multi")
            report[kind] = {"questions": len(rows), "agree": agree, "differences": diffs}
            label = "one-window" if kind == "single" else "multi-window"
            print(f"{name}: {label} questions: {agree}/{len(rows)} identical answers (text and char offsets)", flush=True)
            causes: dict[str, int] = {}
            for d in diffs:
                causes[d["cause"]] = causes.get(d["cause"], 0) + 1
            for cause, count in causes.items():
                print(f"  {count} differ: {cause}")
            for d in diffs[: args.show]:
                print(f"  {d['id']} ({d['windows']} windows): sesame {d['sesame']} | pipeline {d['pipeline']} | "
                      f"raw scores {d.get('sesame_raw_score', float('nan')):.6f} vs {d.get('pipeline_answer_raw_score', float('nan')):.6f} | "
                      f"pipeline rule on sesame logits reproduces it: {d.get('emulated_pipeline_reproduces')} | {d['cause']}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="SQuAD v1.1 dev file (default $SESAME_DATA_DIR/squad_v1.1/dev-v1.1.json)")
    parser.add_argument("--n-questions", type=int, default=1000, help="one-window questions compared exactly (first N)")
    parser.add_argument("--multi-window-questions", type=int, default=50, help="multi-window questions, reported apart (0: none)")
    parser.add_argument("--models", default="tiny,minilm", help="comma list of: " + ", ".join(BUILDERS))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads on both sides (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--show", type=int, default=3, help="differences printed in full per model and kind")
    parser.add_argument("--json-out", type=Path, default=None, help="write the full report here")
    args = parser.parse_args(argv)
    args.data = args.data or default_dev_file()
    python = tf4_python()
    if python is None:
        parser.error("no transformers 4.x interpreter: create /work/venv-tf4 (see benchmarks/README.md) or set $SESAME_TF4_PYTHON")
    if not args.data.is_file():
        parser.error(f"no SQuAD dev file at {args.data}; set $SESAME_DATA_DIR or pass --data")
    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()  # the pipeline side uses the same count
    reports = []
    with tempfile.TemporaryDirectory(prefix="sesame_qa_parity_") as tmp:
        for name in args.models.split(","):
            reports.append(run_model(name.strip(), args, python, Path(tmp)))
    if args.json_out:
        args.json_out.write_text(json.dumps(reports, indent=2), encoding="utf-8")
    exact = all(r["single"]["agree"] == r["single"]["questions"] for r in reports if "single" in r)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
