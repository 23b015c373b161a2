"""``sesame-report MULTIRUN_FOLDER``: one table (Markdown + CSV) and one chart for a sweep.

    sesame-report multirun/glue/2026-12-02_14-00-00
    sesame-report multirun/ner_layers --metric val_f1 --out reports/ner
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sesame.tasks.atomic_files import write_text_atomic
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.sweep_report import bar_chart, csv_table, main_metric, markdown_table, read_jobs, variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sesame-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, help="a --multirun folder (holds one sub-folder per job)")
    parser.add_argument("--metric", help="metric to sort and plot by (default: the task's main metric)")
    parser.add_argument("--out", type=Path, help="where to write report.md/.csv/.png (default: the sweep folder)")
    args = parser.parse_args(argv)
    with user_errors_are_messages():
        jobs = read_jobs(args.sweep_dir)
        metric = main_metric(jobs, args.metric)
        rows = variants(jobs, metric)
        out = args.out or args.sweep_dir
        table = markdown_table(rows, metric)
        write_text_atomic(out / "report.md", table)
        write_text_atomic(out / "report.csv", csv_table(rows, metric))
        chart = bar_chart(rows, metric, out / "report.png")
    print(table)
    print(f"wrote {out / 'report.md'}, {out / 'report.csv'}" + (f", {chart}" if chart else ""))


if __name__ == "__main__":
    main()
