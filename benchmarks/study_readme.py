"""The full-data study's sections of the pages (``full_data_study.py --readme``), rendered from the committed run
records: in docs/results.md the results table with published figures of other small encoders for context, the NER
test F1, the goals, and the commands that rebuild each task's best sesame model; in README.md a short headline table
that links there. ``SECTIONS`` names each page, its markers and its renderer: ``--readme`` writes them all, ``--readme
--check`` compares them all."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, NamedTuple

from readme_section import link
from study_goals import arm_points, final_metrics, goal_lines, in_points, points, speed_arm_reaches, speed_column
from study_time_to_target import SPEED_REF
from study_units import ORDER, REPO, SWEEP_TASKS, TASKS


README = REPO / "README.md"
#: The page of the documentation site that holds the study's full section.
RESULTS_PAGE = REPO / "docs" / "results.md"
README_BEGIN, README_END = "<!-- full-data-study:begin -->", "<!-- full-data-study:end -->"  # on RESULTS_PAGE
HEADLINE_BEGIN, HEADLINE_END = "<!-- full-data-headline:begin -->", "<!-- full-data-headline:end -->"  # on README
REPORT_PAGE = REPO / "docs" / "results" / "full_data_study.md"  # written by --report
RUN_RECORDS_FOLDER = REPO / "docs" / "results" / "full_data_study" / "runs"
#: Published dev-set figures of other small encoders, for context only (different models and recipes).
PUBLISHED: dict[str, str] = {
    "rte": "MiniLM-L6 68.8ᵃ, DistilBERT 59.9ᵇ",
    "mrpc": "MiniLM-L6 88.9ᵃ ᶜ, DistilBERT 87.5ᵇ ᶜ",
    "stsb": "DistilBERT 86.9ᵇ ᶜ",
    "cola": "MiniLM-L6 47.5ᵃ, DistilBERT 51.3ᵇ",
    "sst2": "MiniLM-L6 91.5ᵃ, DistilBERT 91.3ᵇ",
    "squad_v1": "DistilBERT 85.8 F1 (77.7 EM)ᵈ",
    "conll2003": "none found",
    "wnut17": "none found",
}
PUBLISHED_NOTES = [
    "sesame's encoder here is sentence-transformers' all-MiniLM-L6-v2: a sentence-embedding model (nreimers' "
    "MiniLM-L6-H384, the every-other-layer cut of MiniLM-L12-H384, trained further on 1B sentence pairs for "
    "embeddings; its model card, huggingface.co/sentence-transformers/all-MiniLM-L6-v2), not the distilled MiniLM "
    "or DistilBERT those papers fine-tune; their figures are context, not a target.",
    "ᵃ MiniLM-L6xH384 (22M parameters, distilled task-agnostically from a UniLMv2 base model), dev set: "
    "microsoft/unilm, `minilm/README.md`, table \"Fine-tuning on NLU tasks\" (Wang et al., 2020, arXiv:2002.10957).",
    "ᵇ DistilBERT (66M, 6 layers of 768), dev set, median of 5 runs: Sanh et al., 2019, arXiv:1910.01108, Table 1.",
    "ᶜ the source does not say which of the task's metrics (MRPC accuracy or F1; STS-B Pearson or Spearman).",
    "ᵈ same paper, Table 2 (SQuAD v1.1 dev).",
]


def study_section(records: list[dict[str, Any]]) -> str:
    """The study's section of RESULTS_PAGE, rendered from the run records (``--readme`` writes it)."""
    tta = speed_arm_reaches(records)
    final = functools.partial(final_metrics, records)
    lines = [
        "| task | dev metric | sesame default | Trainer | Trainer at its best | sesame best recipe | CPU time to the "
        "best Trainer's final metric (fastest sesame arm whose metric holds, one machine) | published, other small encoders |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in ORDER:
        main = next((r["main_metric"] for r in records if r["task"] == task), None)
        metric = main.removeprefix("val_").replace("matthews_correlation", "MCC") if main else "—"
        best = points(final(task, "sesame_best")) if task in SWEEP_TASKS else "(no sweep)"
        at_best = points(final(task, SPEED_REF)) if final(task, SPEED_REF) else "not run"
        lines.append(f"| {TASKS[task]['label']} | {metric} | {points(final(task, 'sesame'))} | {points(final(task, 'hf'))} | "
                     f"{at_best} | {best} | {speed_column(records, task, tta)} | {PUBLISHED[task]} |")
    return "\n".join([*README_INTRO, "", *lines, "", *ner_test_lines(records), *[note + "  " for note in PUBLISHED_NOTES[:-1]],
                      PUBLISHED_NOTES[-1], "", *goal_lines(records), "", *rebuild_lines(records)])


def ner_test_lines(records: list[dict[str, Any]]) -> list[str]:
    """The NER tasks' test F1 under the table (the best dev epoch's model, as the report gives it); none before any
    NER run has a test score."""
    test_f1 = {task: {arm: arm_points(records, task, arm, lambda r: r["best"].get("test_f1")) for arm in ("sesame", "hf")}
               for task in ORDER}
    cells = [f"{TASKS[task]['label']} sesame {points(f1['sesame'])}, Trainer {points(f1['hf'])}"
             for task, f1 in test_f1.items() if f1["sesame"] or f1["hf"]]
    return [f"Test F1 of the NER tasks (the best dev epoch's model): {'; '.join(cells)}.", ""] if cells else []


def headline_table(records: list[dict[str, Any]]) -> str:
    """The README's headline: each task's dev metric for sesame's default and best recipes against the Trainer, and
    a link to the full section on RESULTS_PAGE."""
    final = functools.partial(final_metrics, records)
    lines = ["| task | dev metric | sesame default | transformers `Trainer` | sesame best recipe |", "|---|---|---|---|---|"]
    for task in ORDER:
        main = next((r["main_metric"] for r in records if r["task"] == task), None)
        metric = main.removeprefix("val_").replace("matthews_correlation", "MCC") if main else "—"
        best = points(final(task, "sesame_best")) if task in SWEEP_TASKS else "—"
        lines.append(f"| {TASKS[task]['label']} | {metric} | {points(final(task, 'sesame'))} | "
                     f"{points(final(task, 'hf'))} | {best} |")
    return "\n".join([
        "all-MiniLM-L6-v2 fine-tuned on each task's whole training set and scored on its official dev set, side by side "
        "with transformers' `Trainer` given the same examples, batches, seeds and recipe. Points, mean ± std over seeds "
        "(their count in brackets); \"best recipe\" is the winner of a sweep scored on held-out training data (GLUE tasks).", "",
        *lines, "",
        f"CPU time to the Trainer's metric, memory, the goals, the causes traced and how to rerun every number: "
        f"[Results]({link(RESULTS_PAGE, README)}).",
    ])


class Section(NamedTuple):
    """A generated section: the page, its markers, the heading of a section made where the page has no markers yet,
    and the renderer of its text from the run records."""

    page: Path
    begin: str
    end: str
    heading: str
    render: Callable[[list[dict[str, Any]]], str]


#: Every section ``--readme`` writes and ``--readme --check`` compares.
SECTIONS = (
    Section(RESULTS_PAGE, README_BEGIN, README_END, "Full-data results", study_section),
    Section(README, HEADLINE_BEGIN, HEADLINE_END, "Results", headline_table),
)


#: What the study's section says before its table (part of the rendered section, so it cannot drift from it).
README_INTRO = [
    "Every task trained on its whole training set with the default encoder (all-MiniLM-L6-v2), scored on the "
    "official dev set (NER also on test), side by side with transformers' `Trainer` (`AutoModelFor...` on sesame's "
    "own examples and batches, with the same seeds, epochs, learning rate, batch size, warm-up, weight decay and "
    "clipping, scored by sesame's scorer). One preset per task holds the recipe, run_glue / run_ner / run_qa style: "
    "3 epochs GLUE and NER, 2 SQuAD, SQuAD at 384 tokens with stride 128. One run is "
    "`sesame-train +experiment=full_<task> seed=<k>`; the study runs unit by unit, each resumable where it stopped "
    "(`--help` lists the options; `benchmarks/README.md` says more):",
    "",
    "```bash",
    "python benchmarks/full_data_study.py --tasks rte --arms sesame,hf --out /tmp/study   # needs $SESAME_DATA_DIR/rte",
    "```",
    "",
    f"`--report --out <folder>` writes [the full report]({link(REPORT_PAGE, RESULTS_PAGE)}) (per-epoch dev curves "
    "against CPU time, costs, memory, the recipe sweeps chosen on held-out training data), and each run's record "
    f"under `{RUN_RECORDS_FOLDER.relative_to(REPO)}/` (config, seed, commit, versions, per-validation metrics and times); "
    "`python benchmarks/full_data_study.py --readme` writes this section and the README's headline table from those "
    "records, and `--readme --check` says whether both still hold what the records render. Figures are points, mean ± std over seeds (their count in "
    "brackets). `Trainer` trains as transformers' reference scripts do (fp32, randomly ordered batches); `Trainer at "
    "its best` (`hf_fast`) turns on its own length grouping and bf16, the switches that match sesame's speed arms. "
    "The CPU ratio is sesame's CPU time until its dev curve first reaches the final metric of the Trainer at its best, "
    "over that Trainer's CPU time to the same point, both arms validated at the same points and run on one machine.",
]


#: Overrides of the study's bookkeeping, not of the model: left out of the rebuild commands.
BOOKKEEPING = ("trainer.enable_progress_bar=", "trainer.enable_model_summary=", "checkpoint.every_n_train_steps=", "resume=")


def rebuild_lines(records: list[dict[str, Any]]) -> list[str]:
    """The command that rebuilds each task's best sesame model (the run of any sesame arm with the highest final
    dev metric): the models stay out of git, their recipes do not."""
    lines = ["The best sesame run per task (highest final dev metric of any sesame arm); its model is not in git, "
             "this rebuilds it (`SESAME_DATA_DIR` pointing at the data, default `../shared/data`):", "", "```bash"]
    for task in ORDER:
        runs = [r for r in records if r["task"] == task and r["arm"].startswith("sesame")
                and r["final"].get(r["main_metric"]) is not None]
        if runs:
            r = max(runs, key=lambda x: x["final"][x["main_metric"]])
            overrides = [o for o in r["overrides"] if not o.startswith(BOOKKEEPING)]
            metric = r["main_metric"].removeprefix("val_")
            folder = TASKS[task]["files"][0].split("/")[0]  # the README's command check wants it named
            lines.append(f"sesame-train {' '.join(overrides)} hydra.run.dir=outputs/full/{task}   "
                         f"# needs $SESAME_DATA_DIR/{folder}; {r['arm']}, {metric} "
                         f"{in_points(task, r['final'][r['main_metric']]):.2f}")
    return [*lines, "```"]
