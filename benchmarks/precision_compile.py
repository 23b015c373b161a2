"""bf16 autocast and ``torch.compile`` against eager fp32, for a training step and an evaluation pass.

One process, the default encoder (MiniLM-L6) in sesame's SQuAD module (``task=squad_v1``), the same
real SQuAD v1.1 windows for every arm (the shipped slice, ``--max-seq-length`` tokens): a training
step (forward, loss, backward, fused AdamW step) on ``--train-batch`` windows and a no-grad
evaluation forward on ``--eval-batch`` windows. Arms (what ``trainer.precision`` and
``trainer.compile`` select in a run):

  fp32            eager, float32 (the default)
  bf16            eager, ``torch.autocast("cpu", torch.bfloat16)`` (``trainer.precision=bf16-mixed``)
  compiled        ``nn.Module.compile(dynamic=True)`` on the encoder (``trainer.compile=true``), float32
  compiled_static ``nn.Module.compile(dynamic=False)``: one graph per batch shape, as batches padded to a
                  multiple of N tokens (``data.pad_to_multiple_of``) would allow; the timed batches have one
                  shape each, so this is compile at its best

Each arm has its own copy of the module, built from the same weights. After ``--warmup`` untimed
rounds (compilation happens there; its time is reported separately), ``--rounds`` timed rounds each
run every arm once in rotating order, so machine load hits all arms alike. Reported: median seconds
per training step and per evaluation batch, their ratios to fp32, and how far each arm's evaluation
logits are from fp32's (max abs difference of start logits).

    python benchmarks/precision_compile.py
    python benchmarks/precision_compile.py --threads 1 --rounds 6 --arms fp32,bf16
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from pathlib import Path

import torch
from sesame.tasks.base.run_settings import RunSettings

ARMS = ("fp32", "bf16", "compiled", "compiled_static")


def build(max_seq_length: int):  # noqa: ANN201
    from hydra import compose, initialize_config_module

    from sesame.tasks.saved.checkpoints import build_module
    from sesame.tasks.cli.resolvers import register_resolvers
    from sesame.tasks.runs.runner import build_datamodule

    register_resolvers()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["task=squad_v1", f"data.max_seq_length={max_seq_length}",
                                                        "data.train_windows=all"])
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    return build_module(RunSettings.from_config(cfg)), datamodule


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(line for line in __doc__.splitlines() if line.startswith("    python")))
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--max-seq-length", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=12)
    parser.add_argument("--eval-batch", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/precision_compile"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    arms = [a for a in args.arms.split(",") if a]
    torch.manual_seed(0)
    base, datamodule = build(args.max_seq_length)
    train_batch = next(iter(datamodule.train_dataloader()))
    train_batch = {k: v[: args.train_batch] for k, v in train_batch.items()}
    eval_batch = next(iter(datamodule.val_dataloader()))
    eval_batch = {k: v[: args.eval_batch] for k, v in eval_batch.items()}
    modules, optimizers = {}, {}
    compile_seconds = {}
    for arm in arms:
        module = copy.deepcopy(base)
        if arm in ("compiled", "compiled_static"):
            module.encoder.model.compile(dynamic=arm == "compiled")
        modules[arm] = module
        optimizers[arm] = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=1e-5, fused=True)

    def autocast(arm: str):  # noqa: ANN202
        return torch.autocast("cpu", dtype=torch.bfloat16) if arm == "bf16" else contextlib.nullcontext()

    def train_step(arm: str) -> float:
        module, optimizer = modules[arm], optimizers[arm]
        module.train()
        start = time.perf_counter()
        with autocast(arm):
            start_logits, end_logits = module(train_batch)
        loss = module.head.loss(start_logits, end_logits, train_batch["start_positions"], train_batch["end_positions"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    def eval_pass(arm: str) -> tuple[float, torch.Tensor]:
        module = modules[arm]
        module.eval()
        start = time.perf_counter()
        with torch.no_grad(), autocast(arm):
            start_logits, _ = module(eval_batch)
        return time.perf_counter() - start, start_logits.float()

    times: dict[str, dict[str, list[float]]] = {arm: {"train": [], "eval": []} for arm in arms}
    for round_ in range(args.warmup + args.rounds):
        order = arms[round_ % len(arms):] + arms[: round_ % len(arms)]
        for arm in order:
            t_eval, _ = eval_pass(arm)
            t_train = train_step(arm)
            if round_ < args.warmup:
                compile_seconds[arm] = compile_seconds.get(arm, 0.0) + t_eval + t_train
            else:
                times[arm]["eval"].append(t_eval)
                times[arm]["train"].append(t_train)
        print(f"round {round_ + 1}/{args.warmup + args.rounds} done", flush=True)
    # the same weights for the logits comparison: every arm's module gets fp32's current weights
    reference_state = modules[arms[0]].state_dict()
    for arm in arms[1:]:
        modules[arm].load_state_dict(reference_state)
    logits = {arm: eval_pass(arm)[1] for arm in arms}
    rows = []
    for arm in arms:
        train_s, eval_s = statistics.median(times[arm]["train"]), statistics.median(times[arm]["eval"])
        rows.append({"arm": arm, "train_step_s": train_s, "eval_batch_s": eval_s,
                     "warmup_s": compile_seconds.get(arm, 0.0),
                     "max_abs_logit_diff": float((logits[arm] - logits[arms[0]]).abs().masked_fill(
                         ~eval_batch["context_mask"], 0).max())})
    ref = rows[0]
    lines = [f"MiniLM-L6 SQuAD windows of {args.max_seq_length} tokens; train batch {args.train_batch}, eval batch "
             f"{args.eval_batch}; {args.rounds} timed rounds after {args.warmup} warm-up rounds; threads "
             f"{torch.get_num_threads()}", "",
             "| arm | train step (s) | × fp32 | eval batch (s) | × fp32 | warm-up incl. compile (s) | max abs logit diff vs fp32 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['train_step_s']:.3f} | {r['train_step_s'] / ref['train_step_s']:.2f} "
                     f"| {r['eval_batch_s']:.3f} | {r['eval_batch_s'] / ref['eval_batch_s']:.2f} | {r['warmup_s']:.0f} "
                     f"| {r['max_abs_logit_diff']:.2e} |")
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision_compile.md").write_text(text + "\n")
    (args.out / "precision_compile.json").write_text(json.dumps({"rows": rows, "times": times, "args": vars(args)},
                                                                 indent=2, default=str))
    print(text)


if __name__ == "__main__":
    main()
