"""What running an int8 ONNX graph one example at a time costs, against running it on whole padded
batches, and how much a sentence's probabilities move with its batch when it is batched; in one run.

``sesame-predict --int8`` on an ONNX folder runs ``model.int8.onnx`` example by example
(``tasks/inference/onnx_session.py``: ``run_session_by_row``), because onnxruntime's dynamic int8 quantises
activations with one scale per call from the whole activation tensor. Both ways are timed interleaved,
on the same SST-2 dev batches, best of ``--repeats``.

    sesame-export outputs/glue/<run> exported/ --format onnx --int8
    python benchmarks/int8_by_row.py exported/ --batch-size 32 --threads 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from sesame.tasks.core.paths import shipped_path
from sesame.tasks.inference.onnx_runner import OnnxRunner
from sesame.tasks.inference.onnx_session import run_session, run_session_by_row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", type=Path, help="a sesame-export --format onnx --int8 folder of a GLUE single-sentence run")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runner = OnnxRunner.from_folder(args.export, int8=True, threads=args.threads)
    axes = runner.task_export.output_axes()
    lines = Path(shipped_path("glue/sst2/dev.tsv")).read_text(encoding="utf-8").splitlines()[1:]
    texts = [line.split("\t")[0] for line in lines][: args.batch_size * args.batches]
    tokenizer = runner.tokenizer()
    batches = [dict(tokenizer(texts[i : i + args.batch_size], padding=True, truncation=True, max_length=128, return_tensors="pt"))
               for i in range(0, len(texts), args.batch_size)]
    ways = {"batched": lambda b: run_session(runner.session, b), "by row": lambda b: run_session_by_row(runner.session, b, axes)}
    best = {name: float("inf") for name in ways}
    for _ in range(args.repeats):
        for name, run in ways.items():
            start = time.perf_counter()
            for batch in batches:
                run(batch)
            best[name] = min(best[name], time.perf_counter() - start)
    # A sentence's probabilities batched with others against alone (at its own length).
    moved = 0.0
    flipped = 0
    for batch in batches:
        together = torch.softmax(run_session(runner.session, batch)[0], -1)
        alone = torch.softmax(run_session_by_row(runner.session, batch, axes)[0], -1)
        moved = max(moved, float((together - alone).abs().max()))
        flipped += int((together.argmax(-1) != alone.argmax(-1)).sum())
    print(f"{len(texts)} SST-2 dev sentences, batches of {args.batch_size}, {args.threads} thread(s), best of {args.repeats}:")
    for name, seconds in best.items():
        print(f"  {name:<8} {seconds * 1000:8.1f} ms  {seconds / best['batched']:5.2f}x batched")
    print(f"  batched against alone: probabilities moved by up to {moved:.4f}, {flipped} labels of {len(texts)} changed")


if __name__ == "__main__":
    main()
