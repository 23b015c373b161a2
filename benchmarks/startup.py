"""How long the console scripts take to start: ``--help`` of sesame-train / -eval / -predict, and
sesame-predict's first prediction on one input line, each as ratios to a floor measured in the same run.

Floors: ``python -c "import torch"`` for the ``--help`` lines (a --help that imported torch would cost at
least this), and for the first prediction a bare script that imports torch and transformers, builds the
run's encoder with ``AutoModel``, reads its checkpoint and runs the encoder once on a tokenised line
(what any predictor must do).
Each command runs in a fresh process, in interleaved rounds (every command once per round), and the
median CPU time (user + sys of the child; steadier than wall time on a shared machine) is reported.

    python benchmarks/startup.py --run outputs/glue/<run>          # a run folder of any GLUE model
    python benchmarks/startup.py --run outputs/glue/<run> --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENCODER_FLOOR = """
import sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModel, AutoTokenizer
run = Path(sys.argv[1])
model, tokenizer = AutoModel.from_config(AutoConfig.from_pretrained(run / "encoder")), AutoTokenizer.from_pretrained(run / "encoder")
torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)  # the trained weights are read, as any predictor must
with torch.inference_mode():
    model(**tokenizer(["a gorgeous, witty and moving film"], return_tensors="pt"))
"""


def timed(argv: list[str], stdin: str | None = None) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of one run of ``argv`` in a fresh process (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, input=stdin, text=True, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a trained GLUE run folder (its encoder/ and best.ckpt make the floor)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    py = sys.executable
    line = json.dumps({"text": "a gorgeous, witty and moving film"}) + "\n"
    commands = {
        "import torch (floor of --help)": ([py, "-c", "import torch"], None),
        "sesame-train --help": ([py, "-m", "sesame.tasks.cli.train", "--help"], None),
        "sesame-eval --help": ([py, "-m", "sesame.tasks.cli.eval", "--help"], None),
        "sesame-predict --help": ([py, "-m", "sesame.tasks.cli.predict", "--help"], None),
        "torch + transformers encoder, one line (floor of predict)": ([py, "-c", ENCODER_FLOOR, str(args.run)], None),
        "sesame-predict RUN, one line": ([py, "-m", "sesame.tasks.cli.predict", str(args.run)], line),
    }
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, (argv, stdin) in commands.items():
            times[name].append(timed(argv, stdin))
    cpu = {name: statistics.median(t for t, _ in runs) for name, runs in times.items()}
    wall = {name: statistics.median(w for _, w in runs) for name, runs in times.items()}
    help_floor, predict_floor = cpu["import torch (floor of --help)"], cpu["torch + transformers encoder, one line (floor of predict)"]
    print(f"| command | CPU s (median of {args.rounds}) | wall s | CPU x its floor |")
    print("|---|---|---|---|")
    for name in commands:
        floor = predict_floor if "predict RUN" in name else help_floor if "--help" in name else cpu[name]
        print(f"| {name} | {cpu[name]:.2f} | {wall[name]:.2f} | {cpu[name] / floor:.2f} |")


if __name__ == "__main__":
    main()
