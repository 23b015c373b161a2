"""``sesame-predict``: a trained model's predictions on raw input, JSON lines in and out.

The predictors are ``tasks/inference/predictor.py`` (``Predictor.from_run``, also the Python API) and the
tasks' ``predict.py``; this file reads the command line and the input, and writes the output.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from sesame.tasks.core.atomic_files import atomic_open
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError

log = logging.getLogger(__name__)

EPILOG_HEAD = """\
MODEL is a run folder (its checkpoints/best.ckpt, else last.ckpt), a .ckpt file, or an ONNX export
folder (sesame-export; holds model.onnx). INPUT is a file of JSON lines, or - / nothing for stdin.
One JSON object comes out per input line, in input order; an input's "id" is copied to its output.
"""

EPILOG_FOOT = """\
--set KEY=VALUE changes a decoding or data setting of the trained model (head.*, data.*, encoder.*;
not those its weights depend on), e.g. --set head.max_answer_length=50 --set data.doc_stride=64.
Exit status: 0 on success; 2 on bad input or settings (one line naming the input line and the fix).
"""

#: The module-level string each task's predictor module (``task.predictor`` of ``conf/task/*.yaml``) gives its
#: input and output in, with an example: read from the file, not imported (``--help`` loads no torch).
TASK_HELP = "PREDICT_HELP"


def task_help_sections() -> list[str]:
    """Every task's ``PREDICT_HELP``, one per predictor module, in the order of the task confs' names."""
    import ast
    from importlib.resources import files

    from omegaconf import OmegaConf

    tasks_root = Path(importlib.import_module("sesame.tasks").__path__[0])
    sections: dict[str, str] = {}
    for conf in sorted((Path(str(files("sesame.conf"))) / "task").glob("*.yaml")):
        module = str(OmegaConf.load(conf)["task"]["predictor"]).rsplit(".", 1)[0]
        parts = module.split(".")
        if module in sections or parts[:2] != ["sesame", "tasks"]:
            continue
        tree = ast.parse((tasks_root.joinpath(*parts[2:]).with_suffix(".py")).read_text(encoding="utf-8"))
        sections[module] = next((node.value.value for node in tree.body if isinstance(node, ast.Assign)
                                 and any(getattr(t, "id", None) == TASK_HELP for t in node.targets)
                                 and isinstance(node.value, ast.Constant)), f"(task {conf.stem}: no {TASK_HELP} in {module})")
    return [text.strip("\n") for text in sections.values()]


def epilog() -> str:
    """``--help``'s text after the options: what MODEL and INPUT are, each task's inputs, the exit status."""
    return "\n\n".join([EPILOG_HEAD.rstrip("\n"), *task_help_sections(), EPILOG_FOOT.rstrip("\n")]) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sesame-predict",
        description="Predict with a trained sesame model on raw input: JSON lines in, JSON lines out.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL", help="run folder, .ckpt file or ONNX export folder")
    parser.add_argument("input", metavar="INPUT", nargs="?", default="-", help="JSON-lines file; - or nothing: stdin")
    parser.add_argument("-o", "--output", metavar="OUTPUT", default=None,
                        help="write JSON lines here (whole or not at all; missing folders are made); default: stdout")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N",
                        help="windows run at once (default: the model's data.eval_batch_size)")
    parser.add_argument("--n-best", type=int, default=0, metavar="K", help="QA: list the K best answers (\"nbest\")")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a head.* / data.* / encoder.* setting of the model (repeatable)")
    parser.add_argument("--int8", action="store_true",
                        help="run in int8: an ONNX folder's model.int8.onnx (sesame-export --int8), or a run's linear "
                             "layers quantised to dynamic int8 on load (CPU; as sesame-compress quantize)")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when INPUT is a file and stderr a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["head.n_best_size=5", "data.doc_stride=64"]`` -> ``{"head.n_best_size": 5, ...}`` (values read as YAML)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or "." not in key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set head.max_answer_length=50")
        try:
            overrides[key.strip()] = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            overrides[key.strip()] = value
    return overrides


def count_lines(path: Path) -> int:
    """Non-blank lines of ``path`` (the progress bar's total)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return sum(1 for line in handle if line.strip())


def readable_stdin() -> IO[str]:
    """``sys.stdin``; a :class:`MissingFileError` where it is closed (``0<&-``: Python then sets it to None)."""
    if sys.stdin is None:
        raise MissingFileError("INPUT -: standard input is closed, there is nothing to read. Fix: pipe the "
                               "JSON lines in (... | sesame-predict MODEL) or name a JSON-lines file as INPUT")
    return sys.stdin


@contextlib.contextmanager
def open_input(name: str) -> Iterator[tuple[IO[str], str, Path | None]]:
    """``(text handle, its name for errors, the file or None for stdin)``."""
    if name == "-":
        yield readable_stdin(), "<stdin>", None
        return
    path = Path(name).expanduser()
    with open(path, encoding="utf-8") as handle:
        yield handle, str(path), path


def utf8_lines(handle: IO[str], source: str) -> Iterator[str]:
    """The lines of ``handle``; text that is not UTF-8 is a :class:`DataError`, not a crash."""
    try:
        yield from handle
    except UnicodeDecodeError as err:
        raise DataError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start} of a read block). "
                        "Fix: re-save it as UTF-8") from None


@contextlib.contextmanager
def open_output(name: str | None) -> Iterator[IO[str]]:
    if name is None or name == "-":
        yield sys.stdout
        return
    with atomic_open(Path(name).expanduser()) as handle:
        yield handle


def run(args: argparse.Namespace) -> None:
    import inspect

    from sesame.tasks.inference.predictor import Predictor, runner_for  # torch, transformers: not needed for --help

    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size}: must be at least 1")
    if args.n_best < 0:
        raise ConfigError(f"--n-best {args.n_best}: must be 0 or more")
    if not Path(args.model).expanduser().exists():
        raise MissingFileError(f"MODEL {args.model!r}: no such run folder, .ckpt file or ONNX folder")
    if args.input != "-" and not Path(args.input).expanduser().is_file():  # before the model loads
        raise MissingFileError(f"INPUT {args.input!r}: no such file (give a JSON-lines file, or - for stdin)")
    if args.input == "-":
        readable_stdin()  # a closed stdin fails before the model loads
    runner = runner_for(args.model, parse_overrides(args.overrides), int8=args.int8)
    kwargs: dict[str, Any] = {"batch_size": args.batch_size}
    chosen = Predictor.class_of(runner)
    if args.n_best:  # an option of the predictors that list n-best answers (question answering)
        if "n_best" not in inspect.signature(chosen).parameters:
            raise ConfigError(f"--n-best applies to question answering models; {args.model} is a "
                              f"{runner.settings.task.name} model")
        kwargs["n_best"] = args.n_best
    predictor = chosen(runner, **kwargs)
    with open_input(args.input) as (handle, source, path):
        show = args.progress if args.progress is not None else path is not None and sys.stderr.isatty()
        total = count_lines(path) if show and path is not None else None
        outputs = predictor.predict_json_lines(utf8_lines(handle, source), source=source, progress=show, total=total)
        written = 0
        with open_output(args.output) as out:
            for written, output in enumerate(outputs, start=1):
                out.write(json.dumps(output, ensure_ascii=False, allow_nan=False) + "\n")
    if not written:  # not an error (an empty file gives an empty output), but perhaps nothing was piped in
        log.warning("no input lines in %s: nothing to predict", source)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_intermixed_args(argv)  # MODEL --n-best 3 INPUT works too
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from sesame.tasks.core.known_noise import library_progress_bars_off

    library_progress_bars_off()
    with user_errors_are_messages():
        run(args)


if __name__ == "__main__":
    main()
