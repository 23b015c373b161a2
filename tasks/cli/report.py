"""``sesame-report MULTIRUN_FOLDER``: one table (Markdown + CSV) and one chart for a sweep, and with
``--curves`` its training curves.

    sesame-report multirun/glue/2026-12-02_14-00-00
    sesame-report multirun/ner_layers --metric val_f1 --out reports/ner
    sesame-report multirun/ner/<time> --baseline layer_study=last --alpha 0.01
    sesame-report multirun/init_study/sst2 --curves train_loss --smooth 10

Table: one row per variant (the jobs' overrides, less those all jobs share; jobs differing only in
seed are one variant: mean ± std and the 95% Student-t interval over its seeds), best first ->
report.md, report.csv, report.png.

Which differences are real: each variant against a baseline (the best variant, or --baseline KEY=VALUE),
its difference and two tests, Holm-corrected over the table's comparisons; * marks a difference that
holds at --alpha:
  p, dev examples: a paired bootstrap over the dev examples (--bootstrap resamples, --seed): each run's
    metric recomputed on the same resamples from the prediction files it wrote (val_<TASK>.tsv,
    predictions.json, val_predictions.conll, val_predictions.jsonl) by its task's own scorer, and the
    gold of its data.validation_file; a variant's value is the mean over its seeds.
  p, seeds: a permutation test of the per-seed metrics (metrics.json), or with --seed-test aso Almost
    Stochastic Order (ε_min; needs deepsig: pip install 'sesame[report]'). Needs 2 seeds a side.
A test that cannot run (one seed, no prediction files, a metric the task cannot recompute per example)
says so in its cell and under the table.

Curves (--curves METRIC): every job's <job>/logs/metrics.csv (written by every run) read for METRIC
(train_loss, or any column logged there: val_loss, val_accuracy, ...) against the optimiser step; one
line per variant, the mean over its seeds (with a min-max band when there are several), labelled by
the variant's overrides -> curves_METRIC.png (needs matplotlib: pip install 'sesame[plot]') and
curves_METRIC.csv (the drawn values). Jobs without that log are named and left out. Set
trainer.log_every_n_steps=1 in the sweep for a point every step (the default logs every 10).
--curves with no METRIC lists the values the jobs logged (train_loss, lr_head, grad_norm, val_*, ...).

Every --multirun ends by writing this table into its sweep folder (conf/config.yaml: hydra.callbacks).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sesame.tasks.core.atomic_files import write_text_atomic
from sesame.tasks.cli.errors import OneLineParser, user_errors_are_messages
from sesame.tasks.core.errors import MissingFileError
from sesame.tasks.runs.sweep_comparisons import check_options
from sesame.tasks.runs.sweep_report import Curve, curve_figure, curves_csv, logged_columns, read_curves, save_figure, write_table_report


def _title(args: argparse.Namespace) -> str:
    return args.title if args.title is not None else "/".join(Path(args.sweep_dir).resolve().parts[-2:])


def _table(args: argparse.Namespace, out: Path) -> list[Path]:
    table, written = write_table_report(args.sweep_dir, out, args.metric, title=_title(args), baseline=args.baseline,
                                        alpha=args.alpha, resamples=args.bootstrap, seed=args.seed,
                                        seed_test=args.seed_test)
    print(table)
    return written


def _curves(args: argparse.Namespace, metric: str, curves: list[Curve], out: Path) -> list[Path]:
    written = [write_text_atomic(out / f"curves_{metric}.csv", curves_csv(curves, metric))]
    fig = curve_figure(curves, metric, args.smooth, title=_title(args))
    if fig is None:
        print(f"note: no matplotlib, so no curves_{metric}.png (pip install 'sesame[plot]'); the values are in "
              f"curves_{metric}.csv", file=sys.stderr)
    else:
        written.append(save_figure(fig, out / f"curves_{metric}.png"))
    for c in curves:
        jobs = f"{len(c.jobs)} jobs" if len(c.jobs) > 1 else f"job {c.jobs[0]}"
        print(f"{metric} {c.label} ({jobs}): {len(c.steps)} points, steps {c.steps[0]}-{c.steps[-1]}, "
              f"first {c.values[0]:.4f}, last {c.values[-1]:.4f}")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="sesame-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="a --multirun folder (holds one sub-folder per job)")
    parser.add_argument("--metric", help="metric to sort and plot by (default: the task's main metric)")
    parser.add_argument("--out", type=Path, help="folder to write report.* and curves_* into (default: the sweep folder)")
    parser.add_argument("--curves", nargs="*", action="extend", metavar="METRIC", default=None,
                        help="also draw these logged values (e.g. train_loss) against the step, one line per variant, "
                             "from each job's logs/metrics.csv: curves_METRIC.png and curves_METRIC.csv; "
                             "--curves alone lists the values the jobs logged")
    parser.add_argument("--smooth", type=int, default=1, metavar="N",
                        help="draw each curve as a trailing moving average of N logged points, the raw values faint "
                             "behind it (default 1: raw; the CSV always holds the raw values)")
    parser.add_argument("--title", help="title of the charts (default: the sweep folder's last two names)")
    parser.add_argument("--baseline", action="append", metavar="KEY=VALUE",
                        help="compare every variant with the one that has this setting, e.g. fusion=last (repeat for "
                             "several keys; or a variant's whole label); default: the best variant")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="significance level of the marks, after Holm's correction (default 0.05)")
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                        help="resamples of the paired bootstrap over dev examples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the resamples and permutations (default 0)")
    parser.add_argument("--seed-test", default="permutation", metavar="{permutation,aso}",
                        help="the test over seeds: permutation (default) or aso (Almost Stochastic Order, deepsig)")
    args = parser.parse_args(argv)
    if args.smooth < 1:
        parser.error(f"--smooth {args.smooth}: the window is a number of logged points, at least 1")
    with user_errors_are_messages():
        check_options(args.alpha, args.bootstrap, args.seed_test)  # before anything is read or written
        if args.curves == []:  # --curves without a metric: which ones there are
            print(f"values logged in {args.sweep_dir}/*/logs/metrics.csv (draw one with --curves NAME):")
            print("\n".join(f"  {column}" for column in logged_columns(args.sweep_dir)))
            return
        args.curves = args.curves or []
        out = args.out or args.sweep_dir
        curves = {}
        for metric in args.curves:  # read first: a metric no job logged fails before anything is written
            curves[metric], skipped = read_curves(args.sweep_dir, metric)
            for note in skipped:
                print(f"note: {note}", file=sys.stderr)
        written: list[Path] = []
        try:
            written += _table(args, out)
        except MissingFileError as err:
            if not args.curves:
                raise
            print(f"note: no table: {err}", file=sys.stderr)  # curves of running jobs still draw
        for metric, drawn in curves.items():
            written += _curves(args, metric, drawn, out)
    print("wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    main()
