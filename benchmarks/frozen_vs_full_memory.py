"""Peak memory and time of one training step: finetune=frozen against finetune=full, in one run.

Each mode runs in its own fresh process (peak RSS is per process), on the default encoder, with the
same batch of real SST-2 sentences padded to the same length. Memory is the rise of the peak resident
set over the process's state after loading the model and running one warm-up step.

    python benchmarks/frozen_vs_full_memory.py [--batch-size 16] [--seq-len 128] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from sesame.tasks.base.run_settings import RunSettings


def measure(mode: str, batch_size: int, seq_len: int, steps: int) -> dict:
    import torch

    from hydra import compose, initialize_config_module

    from sesame.tasks.encoders.encoder import load_tokenizer
    from sesame.tasks.glue.module import SentenceClassificationModule
    from sesame.tasks.core.paths import shipped_path
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):  # the real default config
        cfg = compose(config_name="config", overrides=[f"finetune={mode}", "data.label_names=[0,1]"])
    torch.manual_seed(0)
    module = SentenceClassificationModule(RunSettings.from_config(cfg)).train()
    tokenizer = load_tokenizer("minilm_l6")
    lines = open(shipped_path("glue/sst2/train.2k.tsv")).read().splitlines()[1 : batch_size + 1]
    texts = [line.split("\t")[0] for line in lines]
    batch = dict(tokenizer(texts, padding="max_length", truncation=True, max_length=seq_len, return_tensors="pt"))
    labels = torch.tensor([int(line.split("\t")[1]) for line in lines])
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        module.head.loss(module(batch), labels).backward()
        optimizer.step()

    step()  # warm-up: allocator pools and optimiser state exist before the baseline
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - start) / steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "step_seconds": seconds, "peak_rss_mib": peak / 1024, "step_rss_rise_mib": (peak - base) / 1024,
            "trainable_params": sum(p.numel() for p in params)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.batch_size, args.seq_len, args.steps)))
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    results = {}
    for mode in ("full", "frozen"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
             "--steps", str(args.steps)], capture_output=True, text=True, check=True, env=env,
        )
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    full, frozen = results["full"], results["frozen"]
    print(f"batch {args.batch_size} x {args.seq_len} tokens, MiniLM-L6, {args.steps} steps, CPU")
    print(f"{'mode':8} {'trainable':>12} {'step s':>8} {'peak RSS MiB':>13} {'peak RSS vs full':>17}")
    for r in (full, frozen):
        print(f"{r['mode']:8} {r['trainable_params']:>12,} {r['step_seconds']:>8.2f} {r['peak_rss_mib']:>13.0f} "
              f"{r['peak_rss_mib'] / full['peak_rss_mib']:>17.2f}")
    print(f"frozen/full: step time {frozen['step_seconds'] / full['step_seconds']:.2f}x, "
          f"peak memory {frozen['peak_rss_mib'] / full['peak_rss_mib']:.2f}x")


if __name__ == "__main__":
    main()
