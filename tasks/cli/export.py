"""``sesame-export``: write a trained model as a transformers folder or an ONNX graph.

    sesame-export outputs/glue/<run> exports/sst2-hf --format hf
    sesame-export outputs/ner/<run> exports/ner-onnx --format onnx --int8
    sesame-predict exports/ner-onnx < sentences.jsonl          # runs the ONNX folder with onnxruntime

--format hf: a save_pretrained folder that transformers' AutoModelFor{SequenceClassification,
QuestionAnswering,TokenClassification} and pipelines load, with the label names in config.id2label.
Only where sesame's network is exactly that model: fusion=last, pooling=pooler (classification),
no CRF (tagging); otherwise the error names each setting that does not map and why.

--format onnx: the whole network (encoder, fusion, pooling, head) as model.onnx with dynamic batch
and length axes, checked with onnxruntime against PyTorch; --int8 adds model.int8.onnx.

Each export writes README.md (a model card: task, labels, encoder, settings, training data, the
run's metrics, this command) and prints a JSON report with the largest difference from sesame's
outputs. The output folder must be new or empty; it appears only when complete.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from typing import NoReturn

from sesame.tasks.cli.errors import user_errors_are_messages


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one ``error:`` line and exit code 2, like every other user error."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sesame-export", description="Write a trained sesame model as a transformers folder (hf) or an ONNX graph (onnx).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("run", help="a sesame run folder (its checkpoints/best.ckpt) or a .ckpt file")
    parser.add_argument("output", help="the folder to write (new, or empty)")
    parser.add_argument("--format", required=True, choices=("hf", "onnx"), dest="fmt",
                        help="hf: transformers' own task model; onnx: the whole network for onnxruntime")
    parser.add_argument("--int8", action="store_true", help="onnx: also write model.int8.onnx (dynamic int8 quantisation)")
    parser.add_argument("--int8-weights", choices=("per_channel", "per_tensor"), default="per_channel",
                        help="onnx --int8: one weight scale per output column (default; as fast, and keeps SQuAD F1) "
                             "or one per matrix (sesame's scheme before)")
    parser.add_argument("--attention", choices=("eager", "model"), default="eager",
                        help="onnx: trace the encoder's eager attention (default: the same function without SDPA's "
                             "guard for fully masked rows, which onnxruntime runs at every layer) or the one the "
                             "model runs with in torch")
    parser.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo",
                        help="onnx: torch's exporter, dynamo (torch.export, the default) or torchscript (older, faster)")
    parser.add_argument("--opset", type=int, default=None, help="onnx: the ONNX opset (default: the exporter's)")
    parser.add_argument("--threads", type=int, default=None, help="onnx: onnxruntime threads for the check (default: all cores)")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.fmt == "hf" and (args.int8 or args.opset is not None or args.attention != "eager"):
        build_parser().error("--int8, --opset and --attention are for --format onnx")
    if args.int8_weights != "per_channel" and not args.int8:
        build_parser().error("--int8-weights is for --int8")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("sesame").setLevel(logging.INFO)  # not the exporters' per-initializer INFO lines
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    command = shlex.join(["sesame-export", *argv])
    from sesame.tasks.core.known_noise import library_progress_bars_off

    library_progress_bars_off()
    with user_errors_are_messages():
        if args.fmt == "hf":
            from sesame.tasks.export.hf import export_hf

            report = export_hf(args.run, args.output, command=command)
        else:
            from sesame.tasks.export.onnx import export_onnx

            report = export_onnx(args.run, args.output, int8=args.int8, exporter=args.exporter, opset=args.opset,
                                 threads=args.threads, command=command, int8_weights=args.int8_weights,
                                 attention=args.attention)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
