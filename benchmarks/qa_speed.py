"""Speed of sesame's extractive QA: end-to-end evaluation against the transformers 4.x pipeline and the
forward-pass floor, and the vectorised span decoder against a Python loop.

(a) End to end (--skip-e2e to leave out): a SQuAD JSON file in, predictions out, on the same weights
(MiniLM-L6 with a seeded random ``qa_outputs``, saved as a ``BertForQuestionAnswering`` folder), the
same questions (the first --n-questions of the real dev set) and batch size, in one run:
  floor     the encoder alone over the same windows, longest first, padded per batch (pre-built),
            no head and no decoding: what any evaluation must at least spend
  sesame    what ``sesame-eval task=squad_v1 model=<folder>`` does after loading the model:
            read + validate the file, tokenise windows, Lightning validate (forward, decode, official
            metrics), write predictions.json, nbest_predictions.json and metrics.json
  pipeline  transformers 4.x ``pipeline("question-answering")`` (batch_size, max_seq_len 384,
            doc_stride 128, max_answer_len 30) in its own interpreter: read the file, answer all
Timers run inside each process around exactly that work: interpreter start-up and model loading
are excluded on both sides, and so is one warm-up round (the first ``datasets`` read of a file
builds its Arrow cache; allocators warm up). Rounds interleave the three so background load hits
them alike; the ratios of the per-side minima are reported.

(b) Decoder alone (--skip-decoder to leave out): ``tasks/qa/predictions.py`` ``decode_predictions``
against the plain-loop reference in tests/heads/reference_span_decoder.py, n_best 20, max answer 30,
on random-normal logits of 1-3 windows (~150 tokens, question + context + padding) per question;
prints the speedup and whether every answer and n-best list is identical.

    python benchmarks/qa_speed.py [--n-questions 200] [--batch-size 16] [--rounds 5] [--threads 1] [--decoder-sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS.parent))  # the shared reference decoder lives in tests/heads
from qa_common import (  # noqa: E402
    PipelineWorker, SesameQA, build_minilm_qa, default_dev_file, dev_questions, tf4_python, write_squad,
)


# (a) end to end --------------------------------------------------------------------------------------
def end_to_end(args: argparse.Namespace) -> dict[str, Any]:
    python = tf4_python()
    if python is None:
        raise SystemExit("no transformers 4.x interpreter: create /work/venv-tf4 (see benchmarks/README.md) or set $SESAME_TF4_PYTHON")
    with tempfile.TemporaryDirectory(prefix="sesame_qa_speed_") as tmp_name:
        tmp = Path(tmp_name)
        folder = build_minilm_qa(tmp / "minilm_qa", seed=args.seed)
        rows = dev_questions(args.data, args.n_questions)
        squad_json = write_squad(rows, tmp / "questions.json")
        sesame = SesameQA(folder, batch_size=args.batch_size)
        batches = sesame.floor_batches(squad_json, args.batch_size)
        n_windows = sum(len(b["input_ids"]) for b in batches)
        times: dict[str, list[float]] = {"floor": [], "sesame": [], "pipeline": []}
        with PipelineWorker(python, folder, threads=args.threads) as worker:
            print(f"{len(rows)} questions, {n_windows} windows, batch size {args.batch_size}, {args.threads} torch threads "
                  f"per side; pipeline: transformers {worker.info['transformers']}", flush=True)
            for r in range(args.rounds + 1):  # round 0 is the warm-up
                t_floor = sesame.floor(batches)
                t_sesame, ours = sesame.predict(squad_json, tmp / f"run{r}")
                t_pipe, theirs = worker.predict(squad_json, args.batch_size)
                label = "warm-up" if r == 0 else f"round {r}"
                print(f"  {label}: floor {t_floor:.2f}s  sesame {t_sesame:.2f}s  pipeline {t_pipe:.2f}s", flush=True)
                if r:
                    for key, value in (("floor", t_floor), ("sesame", t_sesame), ("pipeline", t_pipe)):
                        times[key].append(value)
        agree = sum((a.text, a.start, a.end) == ((b.text, b.start, b.end) if b else None) for a, b in
                    ((ours[q], theirs[q]) for q in rows["id"]))
    best = {k: min(v) for k, v in times.items()}
    median_ratio = {k: statistics.median(t / f for t, f in zip(times[k], times["floor"])) for k in ("sesame", "pipeline")}
    print(f"end to end, best of {args.rounds} rounds: floor {best['floor']:.2f}s, sesame {best['sesame']:.2f}s, "
          f"pipeline {best['pipeline']:.2f}s")
    print(f"  sesame/floor   {best['sesame'] / best['floor']:.3f}  (per-round median {median_ratio['sesame']:.3f}; target <= 1.05)")
    print(f"  pipeline/floor {best['pipeline'] / best['floor']:.3f}  (per-round median {median_ratio['pipeline']:.3f})")
    print(f"  pipeline/sesame {best['pipeline'] / best['sesame']:.3f}")
    print(f"  identical answers: {agree}/{len(rows)} (questions with several windows may differ: see qa_pipeline_parity.py)")
    return {"times": times, "best": best, "agree": agree, "questions": len(rows), "windows": n_windows}


# (b) decoder alone -----------------------------------------------------------------------------------
def synthetic_windows(n_questions: int, seed: int = 0, window: int = 150, question: int = 12,
                      stride: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[str], list[str]]:
    """Random-normal start/end logits of 1-3 windows per question, SQuAD-shaped: [CLS] question [SEP]
    context-chunk [SEP] (~``window`` tokens, consecutive chunks overlapping by ``stride``), padded to
    the longest window; offsets point into a context of one short word per token."""
    from tests.heads.reference_span_decoder import words_with_offsets

    rng = random.Random(seed)
    chunk = window - question - 3
    rows: list[tuple[int, list[tuple[int, int]]]] = []
    contexts, ids = [], []
    for q in range(n_questions):
        n_win = rng.randint(1, 3)
        n_tok = chunk + (n_win - 1) * (chunk - stride) - rng.randint(0, chunk // 3)
        context, spans = words_with_offsets([f"w{rng.randint(0, 999)}" for _ in range(n_tok)])
        contexts.append(context)
        ids.append(f"q{q}")
        lo = 0
        while True:
            q_len = question + rng.randint(-4, 4)
            rows.append((q, [(-1, -1)] * (q_len + 2) + spans[lo : lo + chunk] + [(-1, -1)]))
            if lo + chunk >= len(spans):
                break
            lo += chunk - stride
    width = max(len(r[1]) for r in rows)
    offsets = torch.tensor([r[1] + [(-1, -1)] * (width - len(r[1])) for r in rows], dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    start = torch.randn(len(rows), width, generator=generator) * 3
    end = torch.randn(len(rows), width, generator=generator) * 3
    return start, end, offsets, [r[0] for r in rows], contexts, ids


def decoder_speed(n_questions: int, seed: int) -> dict[str, Any]:
    from sesame.tasks.qa.predictions import decode_predictions
    from tests.heads.reference_span_decoder import reference_decode

    start, end, offsets, ex_index, contexts, ids = synthetic_windows(n_questions, seed)
    t0 = time.perf_counter()
    got = decode_predictions(start, end, offsets, ex_index, contexts, ids, n_best_size=20, max_answer_length=30)
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = reference_decode(start.tolist(), end.tolist(), offsets.tolist(), ex_index, contexts, ids, 20, 30, False, 0.0)
    t_ref = time.perf_counter() - t0
    same_answers = sum(got[q].text == ref[q][0] for q in ids)
    same_nbest = sum([(c["text"], c["score"], c["start_logit"], c["end_logit"]) for c in got[q].nbest] == ref[q][2] for q in ids)
    print(f"decoder, {n_questions} questions ({len(ex_index)} windows of {start.shape[1]} tokens): "
          f"vectorised {t_vec:.2f}s, Python loop {t_ref:.2f}s, speedup {t_ref / t_vec:.1f}x; "
          f"identical answers {same_answers}/{n_questions}, identical n-best lists {same_nbest}/{n_questions}", flush=True)
    return {"questions": n_questions, "windows": len(ex_index), "vectorised_s": t_vec, "reference_s": t_ref,
            "speedup": t_ref / t_vec, "same_answers": same_answers, "same_nbest": same_nbest}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="SQuAD v1.1 dev file (default $SESAME_DATA_DIR/squad_v1.1/dev-v1.1.json)")
    parser.add_argument("--n-questions", type=int, default=200, help="end to end: the first N dev questions")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="timed end-to-end rounds after one warm-up round")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads on both sides (0: torch's default; see benchmarks/README.md)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decoder-sizes", default="1000,10000", help="question counts for the decoder comparison")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-decoder", action="store_true")
    args = parser.parse_args(argv)
    args.data = args.data or default_dev_file()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.threads = torch.get_num_threads()
    if not args.skip_e2e:
        if not args.data.is_file():
            parser.error(f"no SQuAD dev file at {args.data}; set $SESAME_DATA_DIR or pass --data")
        end_to_end(args)
    if not args.skip_decoder:
        for n in (int(x) for x in args.decoder_sizes.split(",") if x):
            decoder_speed(n, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
