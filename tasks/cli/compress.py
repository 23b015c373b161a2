"""``sesame-compress``: make a trained model smaller or faster.

    sesame-compress quantize outputs/glue/<run> outputs/glue/<run>-int8
    sesame-eval task=glue model=outputs/glue/<run>-int8          # evaluates on CPU
    sesame-compress drop-layers outputs/glue/<run> student --keep every_other
    sesame-compress drop-layers minilm_l6 student-l3 --keep bottom --num-layers 3
    sesame-train encoder.name_or_path=student/encoder distill.teacher=outputs/glue/<run>
    sesame-compress prune outputs/glue/<run> outputs/glue/<run>-pruned --heads 0.3 --ffn 0.4
    sesame-train encoder.name_or_path=outputs/glue/<run>-pruned/encoder distill.teacher=outputs/glue/<run>
    sesame-compress prune outputs/glue/<run> outputs/glue/<run>-pruned3 --heads 0.3 --ffn 0.4 \\
        --rounds 3 --recover trainer.max_epochs=1      # prune a third, recover (distilled from <run>), repeat

Each command prints a JSON report (also written as ``<output>/compression.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from sesame.tasks.cli.errors import user_errors_are_messages


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sesame-compress", description="Make a trained sesame model smaller or faster.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{quantize,drop-layers,prune}")
    q = commands.add_parser(
        "quantize", help="dynamic int8 quantisation of every linear layer (CPU inference)",
        description="Dynamic int8 quantisation (torch.ao.quantization.quantize_dynamic) of the encoder's and the "
        "head's linear layers. Writes a run folder that sesame-eval evaluates (on CPU).",
    )
    q.add_argument("checkpoint", help="a sesame .ckpt file or run folder (its checkpoints/best.ckpt)")
    q.add_argument("output", help="folder to write (checkpoints/best.ckpt, config.yaml, compression.json)")
    d = commands.add_parser(
        "drop-layers", help="keep k of the encoder's layers (a student initialisation)",
        description="Write an encoder with only some of the source's transformer layers (renumbered), as "
        "<output>/encoder; from a sesame checkpoint also the task model with the teacher's head copied "
        "(<output>/checkpoints/best.ckpt).",
    )
    d.add_argument("source", help="a sesame .ckpt file or run folder, a Hugging Face encoder folder, or an alias (minilm_l6)")
    d.add_argument("output", help="folder to write")
    d.add_argument("--keep", default="every_other",
                   help="every_other (the top layer and every second one below: 6 -> 1,3,5), bottom, top, "
                   "or layer indices such as 0,2,4 (default: every_other)")
    d.add_argument("--num-layers", type=int, default=None, help="how many layers to keep, with --keep bottom/top")
    d.add_argument("--encoder-only", action="store_true", help="from a sesame checkpoint: write only the encoder folder")
    p = commands.add_parser(
        "prune", help="remove the least important attention heads and feed-forward neurons (structured pruning)",
        description="Score every attention head and feed-forward neuron by |dL/dmask| on the run's own training "
        "batches (Michel et al. 2019), remove the lowest-scoring ones across all layers, and write the smaller "
        "model as a run folder: <output>/encoder (compact weights; config.json records what each layer keeps), "
        "checkpoints/best.ckpt, config.yaml and compression.json. Families: bert, roberta, xlm-roberta, electra. With "
        "--rounds N and --recover: N rounds of pruning, each followed by training distilled from the source; rounds/<k>/ "
        "holds each round's pruned and recovered runs, the output is the last one's run folder.",
    )
    p.add_argument("checkpoint", help="a sesame .ckpt file or run folder (its checkpoints/best.ckpt), float (not int8)")
    p.add_argument("output", help="folder to write (must not exist; with --rounds or --recover it may hold a stopped "
                   "schedule of the same arguments, which then continues)")
    p.add_argument("--heads", type=float, default=0.0, help="share of all attention heads to remove, in [0, 1) (default 0)")
    p.add_argument("--ffn", type=float, default=0.0,
                   help="share of all feed-forward neurons to remove, in [0, 1) (default 0)")
    p.add_argument("--batches", type=int, default=32, help="training batches to score on (default 32)")
    p.add_argument("--rounds", type=int, default=1,
                   help="prune in this many rounds, each removing an equal part of the target counts of the source's heads "
                   "and neurons, scored again on the model it prunes (default 1: one-shot)")
    p.add_argument("--recover", action="append", default=[], metavar="KEY=VALUE",
                   help="after each round, train the pruned model (the source run's config, distill.teacher=<the source>) "
                   "with this override of a key the config has, e.g. trainer.max_epochs=1 (repeatable; without it the "
                   "rounds only prune). Rerun the same command to continue a schedule that was stopped")
    return parser


def short_prune_report(report: dict, path: str) -> dict:
    """The report without the per-neuron lists (scores, kept positions), which stay in the file ``path``."""
    def short(entry: dict) -> dict:
        return {**entry, "neurons": {k: v for k, v in entry["neurons"].items() if k != "kept_per_layer"}}

    shorter = short(report)
    if "importance" in report:
        shorter["importance"] = path
    if isinstance(report.get("rounds"), list):
        shorter["rounds"] = [short(entry) for entry in report["rounds"]]
    return shorter


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sesame.tasks.core.known_noise import library_progress_bars_off

    library_progress_bars_off()
    with user_errors_are_messages():
        if args.command == "quantize":
            from sesame.tasks.compression.quantize import quantize_checkpoint

            report = quantize_checkpoint(args.checkpoint, args.output)
        elif args.command == "prune":
            from sesame.tasks.runs.prune_schedule import prune_schedule

            report = prune_schedule(args.checkpoint, args.output, heads=args.heads, ffn=args.ffn, batches=args.batches,
                                    rounds=args.rounds, recover=args.recover)
            report = short_prune_report(report, f"{args.output}/compression.json")
        else:
            from sesame.tasks.compression.drop_layers import drop_layers

            report = drop_layers(args.source, args.output, keep=args.keep, num_keep=args.num_layers,
                                 encoder_only=args.encoder_only)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
