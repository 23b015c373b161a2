"""The transformers 4.x ``pipeline("question-answering")``, served over stdin/stdout for the QA benchmarks.

Runs in a separate interpreter with transformers < 5 (the pipeline was removed in v5), e.g.
``/work/venv-tf4/bin/python benchmarks/qa_tf4_pipeline_worker.py --model FOLDER``; it imports nothing
from sesame. Protocol: one JSON object per line. The worker loads the model, answers
``{"ready": true, ...}``, then for each request
``{"squad_json": PATH, "batch_size": 16, "kwargs": {...pipeline call arguments...}}`` reads that
SQuAD file, answers every question and replies
``{"seconds": <read + pipeline time>, "predictions": {id: {"answer", "start", "end", "score"} | null}}``.
An empty line or EOF ends it. Replies are prefixed with ``@@`` so stray library output cannot be
mistaken for one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def read_questions(path: str) -> list[dict[str, str]]:
    """``[{id, question, context}]`` of a SQuAD JSON file, in file order."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [
        {"id": qa["id"], "question": qa["question"], "context": para["context"]}
        for article in data for para in article["paragraphs"] for qa in para["qas"]
    ]


def reply(obj: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a ...ForQuestionAnswering folder with its tokenizer")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    if int(transformers.__version__.split(".")[0]) >= 5:
        raise SystemExit(f"needs transformers < 5 (has the QA pipeline); this interpreter has {transformers.__version__}")
    t0 = time.perf_counter()
    qa = pipeline("question-answering", model=args.model, tokenizer=args.model, device=-1)
    reply({"ready": True, "load_s": time.perf_counter() - t0, "transformers": transformers.__version__,
           "torch": torch.__version__, "threads": torch.get_num_threads()})

    for line in sys.stdin:
        if not line.strip():
            break
        request = json.loads(line)
        start = time.perf_counter()
        questions = read_questions(request["squad_json"])
        inputs = [{"question": q["question"], "context": q["context"]} for q in questions]
        outputs = qa(inputs, batch_size=int(request.get("batch_size", 1)), **request.get("kwargs", {}))
        seconds = time.perf_counter() - start
        if isinstance(outputs, dict):  # a single question comes back unwrapped
            outputs = [outputs]
        # top_k=1 gives a dict per question, or [] when every candidate was filtered out.
        predictions = {
            q["id"]: ({k: out[k] for k in ("answer", "start", "end", "score")} if isinstance(out, dict) else None)
            for q, out in zip(questions, outputs)
        }
        reply({"seconds": seconds, "predictions": predictions})


if __name__ == "__main__":
    main()
