"""Full-data study: sesame against the transformers Trainer on every task's full data.

Each unit is one (task, arm, seed): a full training run of the task's recipe
(``conf/experiment/full_<task>.yaml``, what ``sesame-train +experiment=full_<task>`` runs) with a
dev evaluation after every epoch, in its own child process (one torch thread), so its peak RSS is its
own. Arms:
  sesame       sesame-train's own code (tasks/runs/runner.py ``train``) on the preset: the plain default
  hf           transformers' Trainer with AutoModelFor{SequenceClassification,TokenClassification,
               QuestionAnswering} on the very examples and batches sesame trains on (it reads sesame's
               data module; same tokenisation length, shuffle, seed, epochs, batch size, learning
               rate, warm-up, weight decay, clipping, AdamW implementation; benchmarks/train_speed.py).
               After each epoch the model is saved and scored by sesame's evaluation path
               (tasks/runs/evaluation.py, as `sesame-eval model=<folder>`), the scorer of sesame's arm.
  sesame_fast  (optional, not in the default --arms) sesame with what it ships for speed:
               data.group_by_length=true data.pad_to_multiple_of=32 trainer.precision=bf16-mixed,
               validated every half epoch
  sesame_cpu_speed  (optional) the task's recipe with sesame's speed preset, ``+experiment=cpu_speed`` (grouped,
               precision auto, sparse embeddings, fast dropout), validated every half epoch as hf_fast is
  sesame_grouped  (optional) sesame_fast without data.pad_to_multiple_of (grouped batches padded to their
               longest): the cheaper choice on short sentences (docs/results/fast_arm_ablation.md)
  hf_fast      (optional) the Trainer at its best on a CPU, the fair baseline of the speed arms: the hf arm plus its
               own length grouping (train_sampling_strategy="group_by_length") and bf16=True with use_cpu=True,
               validated every half epoch at the points sesame_fast validates; what took effect (sampler class,
               autocast dtype) is read inside the run and kept in its result (``switches``)
  sesame_best  (optional; GLUE) sesame_fast plus the task's winner of the recipe sweep (--sweep: pooling,
               fusion, full/LoRA, learning rate; 8 candidates chosen on a held-out 10% of the training
               file, never on dev), trained on the whole training file
Dev metric after each epoch, cumulative training wall and CPU seconds (process user+sys) at it, final
and best-epoch dev metrics, test metrics (NER, of the best dev epoch on both arms), peak RSS (per
child process: ru_maxrss), versions and the commit go to <out>/units/<task>/<arm>/seed<k>/result.json.
Training time EXCLUDES evaluation and checkpoint writing (both timed and reported separately); it
includes data loading, forward, backward, clipping, optimiser and scheduler steps, and logging.

Resumable: rerun the same command and finished units (result.json) are skipped; an interrupted
sesame unit resumes from its run folder's checkpoints/last.ckpt (`resume=true`; last.ckpt is written
after every validation and every --ckpt-steps steps of the big tasks), an interrupted Trainer unit
from its newest checkpoint-<step>/ (resume_from_checkpoint). The training clock and the per-epoch
history are stored inside each checkpoint, so time is summed over the segments that count (work
lost after the last checkpoint of a killed segment is not counted; every attempt's own wall / CPU is
in attempts.json). SIGTERM to the study stops the running unit at its next step with a checkpoint.
On a machine that never ran them, the committed run records (docs/results/full_data_study/runs) are put
back into <out> as finished units first, so a fresh clone resumes the study where the commit left it
(unfinished units' checkpoints live only in <out>: they resume on the machine that wrote them).
Units run small-first, the arms interleaved per seed (seed 1: sesame then hf, seed 2: hf then sesame,
...): RTE, MRPC, STS-B, CoLA, WNUT-17 (3 seeds), CoNLL-2003 (3), SST-2 (1), SQuAD v1.1 (1).

    python benchmarks/full_data_study.py --plan                    # the units and their state
    nohup nice -n 19 python benchmarks/full_data_study.py > study.log 2>&1 &   # the study
    python benchmarks/full_data_study.py --tasks rte --seeds 1     # one small real unit per arm
    python benchmarks/full_data_study.py --arms sesame_fast        # the speed arm
    python benchmarks/full_data_study.py --sweep                   # the recipe sweep, into <out>/sweep
    python benchmarks/full_data_study.py --arms sesame_best        # its winners on the full data
    python benchmarks/full_data_study.py --report                  # docs/results/full_data_study.md + PNGs
    python benchmarks/full_data_study.py --readme                  # then docs/results.md's section + README.md's headline
    python benchmarks/full_data_study.py --quick                   # pipeline check on shipped slices (~5 min)

Data: every file is read from $SESAME_DATA_DIR (default ../shared/data relative to the working
directory, i.e. run from the repository root; see its SOURCES.md for the layout). To use a copy
elsewhere: SESAME_DATA_DIR=/data/glue_and_co python benchmarks/full_data_study.py ... (the path is
made absolute and passed to every child). Results go to --out (default outputs/full_data_study in the
repository, or $SESAME_STUDY_DIR).
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from readme_section import section_in, with_section  # noqa: E402
from train_speed import OFFLINE  # noqa: E402

# The study is in modules by job (benchmarks/study_*.py); what the tests and benchmarks/holdout_overlap.py import
# from this script stays importable from here.
from study_arms import child, init_task_layer_as_sesame, validation_steps  # noqa: E402, F401
from study_clock import TrainClock  # noqa: E402, F401
from study_goals import (  # noqa: E402, F401
    SPEED_GOAL_ARMS,
    SPEED_GOAL_RATIO,
    SPEED_GOAL_TASKS,
    fastest_held_arm,
    goal_lines,
    speed_arm_reaches,
    speed_cell,
)
from study_readme import README, README_BEGIN, README_END, RESULTS_PAGE, SECTIONS, headline_table, study_section  # noqa: E402, F401
from study_records import (  # noqa: E402, F401
    NO_FINGERPRINT,
    attempts_cpu_cell,
    attempts_on_record,
    boot_time,
    finish_unit,
    load_records,
    machine_fingerprint,
    machines_of,
    one_machine,
    restore_from_records,
    write_json,
    write_run_records,
)
from study_report import sweep_section, write_report  # noqa: E402, F401
from study_time_to_target import goal_ratio, mean_time_to_accuracy, time_to_accuracy  # noqa: E402, F401
from study_units import (  # noqa: E402, F401
    ARMS,
    DEFAULT_OUT,
    DEFAULT_REPORT,
    ORDER,
    QUICK,
    QUICK_KILL_AT,
    REPO,
    RUN_RECORDS,
    SWEEP_GRID,
    SWEEP_TASKS,
    TASKS,
    arm_spec,
    chosen_recipes,
    plan,
    sweep_results,
    unit_dir,
    unit_overrides,
    unit_state,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"results folder, outside the repository (default {DEFAULT_OUT}; $SESAME_STUDY_DIR)")
    parser.add_argument("--tasks", default=",".join(ORDER), help="comma-separated, run in this order (default: all, "
                        "small first): " + ", ".join(ORDER))
    parser.add_argument("--arms", default="sesame,hf", help=f"comma-separated from {', '.join(ARMS)} (default sesame,hf)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds 1..N for every task (default: 3, and 1 for SST-2 and SQuAD)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child (default 1)")
    parser.add_argument("--retries", type=int, default=1,
                        help="times an interrupted or failed unit is resumed in this invocation (default 1)")
    parser.add_argument("--max-units", type=int, default=None, help="stop after running this many units")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for both arms (repeatable), e.g. data.max_seq_length=256; it becomes "
                        "part of the units' settings (use a fresh --out)")
    parser.add_argument("--task-override", action="append", default=[], metavar="TASK:KEY=VALUE",
                        help="Hydra override for one task, both arms, e.g. squad_v1:data.max_seq_length=256")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished unit's resume state (last.ckpt, Trainer checkpoints); best weights are kept anyway")
    parser.add_argument("--rerun-unfingerprinted", action="store_true",
                        help="rerun the planned units whose finished result carries no machine fingerprint (recorded "
                        "before attempts did), so that their CPU seconds can be divided by the other arms' of this "
                        "machine; the old result is kept beside it as result.unfingerprinted.json")
    parser.add_argument("--without-records", action="store_true",
                        help="do not put the committed run records back into --out: a study of its own, every unit run "
                        "here (so all its CPU seconds divide); use a --out of its own")
    parser.add_argument("--plan", action="store_true", help="list the units and their state, run nothing")
    parser.add_argument("--report", action="store_true", help="only write the report from the finished units")
    parser.add_argument("--report-file", type=Path, default=None,
                        help=f"report markdown (default {DEFAULT_REPORT.relative_to(REPO)} for --report, "
                        "<out>/report/full_data_study.md while running); PNGs go to a folder beside it")
    parser.add_argument("--quick", action="store_true",
                        help="pipeline check: shipped SST-2 / WNUT-17 / SQuAD slices, 3 steps x 2 epochs, both arms, "
                        "one seed, each unit killed once mid-epoch and resumed, then the report; into <out>/quick (fresh)")
    parser.add_argument("--sweep", action="store_true",
                        help="item 4: the recipe sweep instead (SWEEP_GRID: 8 candidates per GLUE task, seed 1, trained on "
                        "90%% of the training file and scored on the other 10%%) into <out>/sweep; its winners are the "
                        "sesame_best arm (--arms sesame_best)")
    parser.add_argument("--readme", action="store_true",
                        help=f"write the study's section of {RESULTS_PAGE.relative_to(REPO)} and the headline table of "
                        f"README.md from the committed run records ({RUN_RECORDS.relative_to(REPO)}; --report writes them); "
                        "`--readme --check` exits 1 when a page does not hold what they render")
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    for names, known, what in ((args.tasks, TASKS, "task"), (args.arms, ARMS, "arm")):
        bad = [n for n in names if n not in known]
        if bad:
            parser.error(f"unknown {what}(s) {bad}; choose from {', '.join(known)}")
    if args.quick:
        args.tasks = [t for t in args.tasks if t in QUICK] if args.tasks != ORDER else list(QUICK)
        args.seeds = 1
        args.out = args.out / "quick"
    args.base_out = args.out.expanduser().resolve()  # the study's folder: its units feed the report
    if args.sweep:
        args.tasks = [t for t in args.tasks if t in SWEEP_TASKS]
        if not args.tasks:
            parser.error(f"--sweep: the sweep is for the GLUE tasks {', '.join(SWEEP_TASKS)}")
        args.out = args.out / "sweep"
    per_task: dict[str, list[str]] = {}
    for item in args.task_override:
        task, _, override = item.partition(":")
        if task not in TASKS or "=" not in override:
            parser.error(f"--task-override {item!r}: use TASK:KEY=VALUE with a task from {', '.join(TASKS)}")
        per_task.setdefault(task, []).append(override)
    args.per_task = per_task
    args.out = args.out.expanduser().resolve()
    return args


# The parent --------------------------------------------------------------------------------------------
def git_commit() -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


class Stop:
    """SIGTERM / SIGINT to the study: pass it to the running child (which checkpoints and exits), then stop."""

    def __init__(self) -> None:
        self.requested = False
        self.child: subprocess.Popen | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        print(f"[study] signal {signum}: stopping the running unit at its next step (checkpointed)", flush=True)
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


def run_attempt(args: argparse.Namespace, unit: dict[str, Any], folder: Path, attempt: int, stop: Stop,
                meta: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    task = unit["task"]
    spec = {**unit, **arm, "hf": TASKS[task]["hf"], "overrides": unit_overrides(args, task, unit["seed"], arm.get("presets", ())),
            "ckpt_steps": 2 if args.quick else TASKS[task]["ckpt_steps"], "threads": args.threads,
            "attempt": attempt, "kill_at_step": QUICK_KILL_AT if args.quick else None, "quick": args.quick,
            "commit": meta["commit"], "data_dir": meta["data_dir"]}
    write_json(folder / "spec.json", spec)
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "SESAME_DATA_DIR": meta["data_dir"], "PYTHONUNBUFFERED": "1"}
    started = time.time()
    with open(folder / "child.log", "a") as log:
        log.write(f"\n===== attempt {attempt} {datetime.datetime.now().isoformat(timespec='seconds')} =====\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(folder / "spec.json")],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        stop.child = proc
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stop.child = None
    record = {"attempt": attempt, "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
              "boot": boot_time(), "machine": machine_fingerprint(),
              "wall_s": time.time() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
              "peak_rss_mib": usage.ru_maxrss / 1024, "returncode": proc.returncode}
    attempts = json.loads((folder / "attempts.json").read_text()) if (folder / "attempts.json").is_file() else []
    write_json(folder / "attempts.json", [*attempts, record])
    return record


def describe(result: dict[str, Any]) -> str:
    main = result["main_metric"]
    value = result["final"].get(main)
    return (f"{main} {value:.4f} (final epoch), train {result['train_wall_s'] / 60:.1f} min wall / "
            f"{result['train_cpu_s'] / 60:.1f} min CPU, eval {result['eval_wall_s'] / 60:.1f} min, peak RSS "
            f"{result['peak_rss_mib']:.0f} MiB, {len(result['attempts'])} attempt(s)") if value is not None else "no metric"


def run_study(args: argparse.Namespace) -> None:
    from sesame.tasks.core.paths import data_dir_path

    data_dir = str(Path(data_dir_path()).resolve())
    if not args.quick:
        missing = [f"{data_dir}/{f}" for t in args.tasks for f in TASKS[t]["files"] if not Path(data_dir, f).is_file()]
        if missing:
            sys.exit(f"error: missing data files {missing}; set SESAME_DATA_DIR (now {data_dir}) or use --quick")
    if args.quick:  # a fresh check: this invocation's units start from nothing
        for unit in plan(args):
            shutil.rmtree(unit_dir(args.out, unit), ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    lock_file = open(args.out / ".study.lock", "w")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"error: another study process is running in {args.out} (see its RUNNING.md / study.log)")
    lock_file.write(f"{os.getpid()}\n")
    lock_file.flush()
    meta = {"commit": git_commit(), "data_dir": data_dir}
    units = plan(args)
    if args.rerun_unfingerprinted:
        for unit in units:
            result_file = unit_dir(args.out, unit) / "result.json"
            if result_file.is_file() and all(m.endswith(NO_FINGERPRINT) for m in machines_of(json.loads(result_file.read_text()))):
                result_file.rename(result_file.with_name("result.unfingerprinted.json"))
    stop = Stop()
    ran = 0
    print(f"[study] {len(units)} units into {args.out}; data {data_dir}; commit {meta['commit']}", flush=True)
    for i, unit in enumerate(units, 1):
        folder = unit_dir(args.out, unit)
        name = f"{unit['task']}/{unit['arm']}/seed{unit['seed']}"
        if (folder / "result.json").is_file():
            print(f"[study] {i}/{len(units)} {name}: done, skipped", flush=True)
            continue
        if stop.requested or (args.max_units is not None and ran >= args.max_units):
            break
        arm = arm_spec(args, unit["arm"], unit["task"])
        if arm is None:
            print(f"[study] {i}/{len(units)} {name}: skipped, the {unit['task']} sweep has no winner yet "
                  f"(run --sweep first; {args.base_out / 'sweep'})", flush=True)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        ran += 1
        print(f"[study] {i}/{len(units)} {name}: {unit_state(folder)} -> running", flush=True)
        for attempt in range(1, args.retries + 2):
            previous = json.loads((folder / "attempts.json").read_text()) if (folder / "attempts.json").is_file() else []
            record = run_attempt(args, unit, folder, len(previous) + 1, stop, meta, arm)
            if record["returncode"] == 0 and (folder / "result.child.json").is_file():
                result = finish_unit(args, folder)
                print(f"[study] {name}: {describe(result)}", flush=True)
                break
            print(f"[study] {name}: attempt exited {record['returncode']} after {record['wall_s']:.0f} s "
                  f"({folder / 'child.log'})", flush=True)
            if stop.requested:
                break
        else:
            tail = (folder / "child.log").read_text()[-3000:]
            write_json(folder / "failed.json", {"error": tail.strip().splitlines()[-1] if tail.strip() else "?",
                                                "log_tail": tail, "time": time.time()})
            print(f"[study] {name}: FAILED, moving on; {folder / 'child.log'}:\n{tail[-1500:]}", flush=True)
        if stop.requested:
            print("[study] stopped on request; rerun the same command to resume", flush=True)
            break
        safe_report(args)
    safe_report(args)
    print(f"[study] finished this invocation: {ran} unit(s) run", flush=True)


def safe_report(args: argparse.Namespace) -> None:
    """The running report (<out>/report/): a failure to write it never stops the study."""
    try:
        write_report(args, args.report_file or args.base_out / "report" / "full_data_study.md")
    except Exception as error:  # noqa: BLE001
        print(f"[study] could not write the report: {error!r}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    if not (args.quick or args.readme or args.without_records):  # a committed run is a finished unit, also on a machine that never ran it
        restored = restore_from_records(args)
        if restored:
            print(f"[study] restored {len(restored)} finished unit(s) into {args.base_out} from {RUN_RECORDS.relative_to(REPO)}",
                  flush=True)
    if args.plan:
        for i, unit in enumerate(plan(args), 1):
            print(f"{i:3d} {unit['task']:10s} {unit['arm']:12s} seed {unit['seed']}: {unit_state(unit_dir(args.out, unit))}")
        return
    if args.readme:
        records, stale = load_records(), []
        for section in SECTIONS:
            text, page = section.render(records), section.page.read_text(encoding="utf-8")
            if args.check:
                same = section_in(page, section.begin, section.end) == text
                print(f"{section.page.relative_to(REPO)}: " + ("up to date" if same else "differs: run --readme"))
                stale += [] if same else [section.page]
            else:
                section.page.write_text(with_section(page, section.begin, section.end, text, section.heading), encoding="utf-8")
                print(f"wrote the study's section into {section.page.relative_to(REPO)}")
        if args.check:
            sys.exit(1 if stale else 0)
        return
    if args.report:
        if args.without_records and not args.report_file:
            sys.exit("error: --without-records --report needs a --report-file of its own (the default is the committed study's)")
        path = write_report(args, args.report_file or (args.base_out / "report" / "full_data_study.md" if args.quick else DEFAULT_REPORT))
        print(f"wrote {path}")
        return
    run_study(args)
    if args.quick:
        units = plan(args)
        results = [json.loads((unit_dir(args.out, u) / "result.json").read_text()) for u in units
                   if (unit_dir(args.out, u) / "result.json").is_file()]
        expected = len(units)
        problems = [f"{len(results)} of {expected} units finished"] if len(results) != expected else []
        for r in results:
            if len(r["attempts"]) < 2:
                problems.append(f"{r['task']}/{r['arm']}: was not resumed ({len(r['attempts'])} attempt)")
            if not r["history"] or r["final"].get(r["main_metric"]) is None:
                problems.append(f"{r['task']}/{r['arm']}: no dev metric")
        for t in time_to_accuracy(results):
            if not t["same_batches"]:
                problems.append(f"{t['task']}: the arms trained on different batches")
        print(f"[quick] report: {args.base_out / 'report' / 'full_data_study.md'}")
        if problems:
            sys.exit("[quick] FAILED: " + "; ".join(problems))
        mirrored = [a for a in args.arms if ARMS[a]["side"] == "sesame" and ARMS[a].get("mirrored", True)]
        print(f"[quick] passed: {len(results)} units, each killed once mid-run and resumed"
              + (f"; {', '.join(mirrored)} and hf trained on the same batches" if mirrored and "hf" in args.arms and not args.sweep else ""))


if __name__ == "__main__":
    main()
