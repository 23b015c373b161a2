"""Every command in a fenced ```bash block of README.md and of the documentation site's pages (``docs/*.md``; the
reports under ``docs/results/`` are records of what was run, and are not checked) runs on a fresh clone, or says
beside it what it needs.

A fresh clone has the slices shipped in ``data/`` and no ``$SESAME_DATA_DIR`` (here: an empty folder).
Each command is one of:

- marked with a trailing ``# needs ...`` comment: it needs data or something else a clone lacks. The
  marker must name every ``$SESAME_DATA_DIR/<folder>`` the command reads (from its composed config, or
  a benchmark's ``TASKS``), and the command's arguments must parse (Hydra's compose for sesame-train /
  sesame-eval, every job of a ``--multirun``; the benchmark's ``parse_args``);
- ``make <target>``: the target exists (``make -n``); ``make run`` / ``make test`` install and run
  everything, which this test cannot do from inside the suite;
- anything else: run for real with bash in a workspace holding ``data/`` and ``benchmarks/``, small
  limits appended (the tiny encoder, ``trainer=debug``, a few examples), ``$SESAME_DATA_DIR`` empty.
  ``outputs/<task>/<run>`` and ``multirun/.../<time>`` are run and sweep folders made once by fixtures;
  the commands of one block run in order (``sesame-compress`` makes what the distillation reads).

In a block with ``$ `` prompts, the lines after a command are what it prints: each must parse (JSON, or a Python
literal) and the command, run here, must print as many lines of the same shape (the same keys, lists of the same
items, strings and numbers where the page has them). The numbers are the tiny models' here, so the pages call theirs
illustrative.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from tests.benchmarks import load_benchmark
from tests.preloaded_commands import command_server

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: The pages whose commands are checked: the README and the documentation site's own pages.
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
#: The page with the layout of $SESAME_DATA_DIR (its "## Data" section).
DATA_PAGE = REPO / "docs" / "configuration.md"
DATA_DIR_MARK = "/sesame-data-dir"  # $SESAME_DATA_DIR while composing: files under it are the preset's
NEEDS = re.compile(r"^needs\s+\S")
HYDRA_CONFIGS = {"sesame-train": "config", "sesame-eval": "eval"}
#: Programs a marked command may start with although no dry parse exists for them, and why.
UNPARSED = {"tensorboard": "a server that runs until Ctrl-C; not sesame's",
            "ray": "starts a node of a Ray cluster (hydra/launcher=ray); not sesame's"}
#: Launchers a marked command may start with: their options are not checked, the sesame command they start is.
LAUNCHERS = {"srun": "SLURM's", "torchrun": "torch's (--no-python <command>)"}
#: Arguments appended to a benchmark run: the tiny encoder, one task, sesame against the reference only.
SCRIPT_LIMITS = {"benchmarks/train_speed.py": ["--tasks", "sst2", "--arms", "sesame", "--encoder", "{tiny}"]}
#: Appended to sesame-train where the command does not set the key itself.
TRAIN_LIMITS = {"encoder.name_or_path": "{tiny}", "trainer": "debug", "trainer.enable_progress_bar": "false",
                "data.max_train_examples": "32", "data.max_eval_examples": "32"}
#: Commands run side by side, each a single-threaded process (OMP_NUM_THREADS=1).
WORKERS = min(2, os.cpu_count() or 1)
EVAL_LIMITS = {"trainer.enable_progress_bar": "false", "data.max_eval_examples": "32"}


@dataclass(frozen=True)
class Command:
    text: str  # continuations joined, the trailing comment removed
    comment: str  # the trailing comment's text, "" if none
    line: int  # line of its page where it starts
    block: int = 0  # which ```bash block (0, 1, ...) of its page holds it
    page: str = "README.md"  # the page, relative to the repository
    output: tuple[str, ...] = ()  # in a block with prompts: the lines shown as what it prints

    @property
    def needs(self) -> str | None:
        return self.comment if NEEDS.match(self.comment) else None

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def split_comment(line: str) -> tuple[str, str]:
    """``line`` without its trailing ``# comment`` (a ``#`` after white space, outside quotes), and the comment."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def readme_commands(text: str, page: str = "README.md") -> list[Command]:
    """The commands of every ```bash block. In a block with ``$ `` prompts only the prompted lines (and
    their continuations) are commands, the rest is their output; elsewhere every line but blanks and comments."""
    commands: list[Command] = []
    block: list[tuple[int, str]] | None = None
    blocks = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if block is None:
            if stripped.startswith("```bash"):
                block = []
            continue
        if stripped.startswith("```"):
            commands += _block_commands(block, blocks, page)
            block, blocks = None, blocks + 1
        else:
            block.append((number, stripped))
    assert block is None, f"{page}: a ```bash block is not closed"
    return commands


def _block_commands(block: list[tuple[int, str]], index: int, page: str) -> list[Command]:
    prompted = any(line.startswith("$ ") for _, line in block)
    commands, parts, start = [], [], 0
    for number, line in block:
        if not parts:  # not inside a continued command
            if prompted and not line.startswith("$ "):
                if commands and line:  # what the command before prints
                    commands[-1] = replace(commands[-1], output=(*commands[-1].output, line))
                continue
            line = line[2:] if prompted else line
            if not line or line.startswith("#"):
                continue
            start = number
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        text, comment = split_comment(line)
        commands.append(Command(" ".join([*parts, text.strip()]), comment, start, index, page))
        parts = []
    return commands


COMMANDS = [c for path in PAGES
            for c in readme_commands(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())]
def same_command(command: Command) -> str:
    """What two commands shown alike share: their words (``a  b`` and ``a b`` are one command)."""
    try:
        return shlex.join(shlex.split(command.text))
    except ValueError:
        return command.text


UNIQUE = list({same_command(c): c for c in COMMANDS}.values())  # a command shown twice (on any page) runs once
MARKED = [c for c in UNIQUE if c.needs]
MAKE = [c for c in UNIQUE if not c.needs and c.words[0] == "make"]
#: Unmarked commands another test of the suite runs end to end with the same arguments (the call it makes), so
#: they are not run a second time here; :func:`test_a_command_run_elsewhere_is_run_there` checks the call is there.
RUN_ELSEWHERE = {
    "python benchmarks/step_profile.py --quick": ("tests/benchmarks/test_step_profile.py", 'sp.main(["--quick", "--out"'),
}
RUN = [c for c in UNIQUE if not c.needs and c.words[0] != "make" and same_command(c) not in RUN_ELSEWHERE]


def test_the_readme_parser_reads_prompts_continuations_comments_and_output():
    text = "\n".join([
        "```bash", "sesame-train a=1 \\", "    b='x # y'   # needs $SESAME_DATA_DIR/rte", "# a comment line", "", "```",
        "```", "not bash", "```",
        "  ```bash", "  $ echo hi | sesame-predict run \\", "      --n-best 2", "  {\"out\": 1}", "  $ make test", "  ```",
    ])
    assert readme_commands(text, "docs/x.md") == [
        Command("sesame-train a=1 b='x # y'", "needs $SESAME_DATA_DIR/rte", 2, 0, "docs/x.md"),
        Command("echo hi | sesame-predict run --n-best 2", "", 11, 1, "docs/x.md", ('{"out": 1}',)),
        Command("make test", "", 14, 1, "docs/x.md")]
    assert Command("x", "needs a GPU", 1).needs and not Command("x", "official EM/F1", 1).needs
    assert len(COMMANDS) > 30 and MARKED and MAKE and RUN  # the pages' own blocks were read
    pages = {c.page for c in COMMANDS}
    assert {"README.md", "docs/tasks.md", "docs/use.md"} <= pages, pages
    assert any(c.output for c in RUN), "the shown outputs of the pages were read"


def shape(value: object) -> object:
    """What a printed value is made of: a dict's keys and their shapes, a list's first item's shape, a string or a
    number (``None`` stands for a number that is missing)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return "number" if value is None else "bool"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def same_shape(shown: object, printed: object) -> bool:
    """``printed`` is made as ``shown`` is; an empty list matches any list (a tiny model may find no entity)."""
    if isinstance(shown, dict) and isinstance(printed, dict):
        return shown.keys() == printed.keys() and all(same_shape(shown[k], printed[k]) for k in shown)
    if isinstance(shown, list) and isinstance(printed, list):
        return not shown or not printed or same_shape(shown[0], printed[0])
    return shown == printed


def parsed(line: str) -> object:
    """A line of output as JSON, or else as a Python literal (what ``print`` shows of a list of dicts)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return ast.literal_eval(line)


def output_differs(command: Command, stdout: str) -> str | None:
    """Why what the command printed is not shaped as its page shows, or None."""
    printed = [line for line in stdout.splitlines() if line.strip()]
    if len(printed) != len(command.output):
        return f"printed {len(printed)} line(s), the page shows {len(command.output)}:\n" + "\n".join(printed[-5:])
    for shown_line, line in zip(command.output, printed):
        try:
            value = parsed(line)
        except (ValueError, SyntaxError):
            return f"printed a line that is neither JSON nor a Python literal: {line}"
        if not same_shape(shape(parsed(shown_line)), shape(value)):
            return f"printed\n  {line}\nwhich is not shaped as the page's\n  {shown_line}"
    return None


def test_the_shape_check_reads_json_and_python_literals():
    command = Command("x", "", 1, output=('{"label": "1", "probabilities": {"0": 0.1, "1": 0.9}}',
                                          "[{'label': '1', 'score': 0.98}]"))
    assert output_differs(command, '{"label": "0", "probabilities": {"0": 0.6, "1": 0.4}}\n[{"label": "0", "score": 1}]\n') is None
    assert "not shaped" in output_differs(command, '{"label": 0, "probabilities": {"0": 0.6, "1": 0.4}}\n[]\n')
    assert "printed 1 line(s)" in output_differs(command, '{"label": "0"}\n')
    entities = Command("x", "", 1, output=('{"entities": [{"type": "person"}], "tags": ["O"]}',))
    assert output_differs(entities, '{"entities": [], "tags": ["O", "O"]}') is None  # a tiny model finds none
    assert output_differs(entities, '{"entities": [{"kind": "person"}], "tags": []}') is not None
    for text in (c.output for c in COMMANDS if c.output):  # every shown output parses
        for line in text:
            parsed(line)


# --- what a marked command needs, and that its arguments parse ----------------------------------------


def hydra_jobs(words: list[str]) -> list[list[str]]:
    """The override list of every job a sesame-train / -eval command line starts (one without --multirun)."""
    overrides = [w for w in words[1:] if w not in ("--multirun", "-m")]
    loader = GlobalHydra.instance().config_loader()
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    for override in parsed:
        override.config_loader = loader  # glob(*) lists the group's options through it
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
               else [o.input_line] for o in parsed]
    return [list(job) for job in itertools.product(*choices)]


def data_dir_folders(words: list[str], monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The ``$SESAME_DATA_DIR`` folders a command reads: composed (every job), or a benchmark's ``TASKS``."""
    while re.match(r"[A-Z_][A-Z0-9_]*=", words[0]):  # NAME=value before the command: its environment
        words = words[1:]
    if words[0] in LAUNCHERS:  # srun / torchrun ... sesame-train <overrides>: the sesame command's
        started = next((i for i, w in enumerate(words) if w in HYDRA_CONFIGS), None)
        assert started is not None, f"{words[0]} starts no sesame command that this test can parse"
        words = words[started:]
    if words[0] in HYDRA_CONFIGS:
        monkeypatch.setenv("SESAME_DATA_DIR", DATA_DIR_MARK)
        folders = set()
        with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
            for job in hydra_jobs(words):
                data = OmegaConf.to_container(compose(config_name=HYDRA_CONFIGS[words[0]], overrides=job).data,
                                              resolve=True)
                folders |= {v[len(DATA_DIR_MARK) + 1:].split("/")[0] for k, v in data.items()
                            if k.endswith("_file") and isinstance(v, str) and v.startswith(DATA_DIR_MARK + "/")}
        return folders
    if words[:2] == ["python", words[1]] and words[1].startswith("benchmarks/"):
        script = load_benchmark(Path(words[1]).stem)
        args = script.parse_args(words[2:])
        return {f.split("/")[0] for t in args.tasks for f in script.TASKS[t]["files"]}
    assert words[0] in UNPARSED, f"no dry parse for {words[0]}: run the command here or add one"
    return set()


@pytest.mark.parametrize("command", MARKED, ids=[f"{c.page}:{c.line}" for c in MARKED])
def test_a_marked_command_parses_and_names_every_data_folder_it_reads(command, monkeypatch):
    named = set(re.findall(r"\$SESAME_DATA_DIR/([\w.-]+)", command.needs))
    needed = data_dir_folders(shlex.split(fill_placeholders(command.text)), monkeypatch)
    assert needed <= named, f"{command}: the marker '# {command.needs}' does not name " + \
        ", ".join(f"$SESAME_DATA_DIR/{f}" for f in sorted(needed - named))
    assert named <= needed or not needed, f"{command}: the marker names folders the command does not read"
    assert needed or not named, f"{command}: reads nothing under $SESAME_DATA_DIR; the marker should say what it needs"


@pytest.mark.parametrize("text", sorted(RUN_ELSEWHERE))
def test_a_command_run_elsewhere_is_run_there(text):
    """A page's command left to another test: the page still shows it, and that test makes the same call."""
    assert text in {same_command(c) for c in UNIQUE if not c.needs}, f"no page shows {text!r} any more: drop it here"
    test_file, call = RUN_ELSEWHERE[text]
    assert call in (REPO / test_file).read_text(encoding="utf-8"), f"{test_file} no longer runs {text!r} ({call})"


@pytest.mark.parametrize("command", MAKE, ids=[f"{c.page}:{c.line}" for c in MAKE])
def test_a_make_command_names_a_target_of_the_makefile(command):
    out = subprocess.run(["make", "-n", *command.words[1:]], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, f"{command}: {out.stderr}"


def test_the_data_table_lists_every_file_a_preset_reads(monkeypatch):
    """The layout of $SESAME_DATA_DIR (docs/configuration.md, "Data") names each data preset and every file it
    reads there."""
    text = DATA_PAGE.read_text(encoding="utf-8")
    start = text.index("\n## Data\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    monkeypatch.setenv("SESAME_DATA_DIR", DATA_DIR_MARK)
    presets = sorted(p.stem for p in (REPO / "conf" / "data").glob("*.yaml"))
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        for preset in presets:
            data = OmegaConf.to_container(compose(config_name="config", overrides=[f"data={preset}"]).data,
                                          resolve=False)
            files = [re.fullmatch(r"\$\{data_dir:(.+)\}", v).group(1) for k, v in data.items()
                     if k.endswith("_file") and isinstance(v, str) and v.startswith("${data_dir:")]
            if not files:
                continue  # shipped slices, or the user's own files
            assert f"`{preset}`" in section, f"{DATA_PAGE.name} 'Data' has no row for the preset {preset}"
            for file in files:
                folder, name = file.split("/", 1)
                assert f"`{file}`" in section or (f"`{folder}/" in section and f"/{name}`" in section), \
                    f"{DATA_PAGE.name} 'Data' does not list {file} (data={preset})"


# --- commands that run ---------------------------------------------------------------------------------


def _env(tmp: Path) -> dict[str, str]:
    empty = tmp / "no_data"
    empty.mkdir(exist_ok=True)
    return {**os.environ, "SESAME_DATA_DIR": str(empty), "SESAME_CACHE_DIR": str(tmp / "cache"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def _shell(line: str, workspace: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=workspace, env=SERVED[workspace], capture_output=True, text=True,
                          timeout=600)


#: The environment of a workspace's commands: sesame's console scripts served preloaded (tests/preloaded_commands.py).
SERVED: dict[Path, dict[str, str]] = {}


def _limits(words: list[str], limits: dict[str, str], tiny: Path) -> list[str]:
    keys = {w.split("=", 1)[0].lstrip("+~") for w in words if "=" in w}
    return [f"{k}={v.format(tiny=tiny)}" for k, v in limits.items() if k not in keys]


def fill_placeholders(text: str) -> str:
    """``<run>``, ``<task>`` and a sweep's ``<time>`` as the workspace fixture names them."""
    text = re.sub(r"multirun/\S*<time>", "multirun/glue/sweep", text)
    return text.replace("<task>", "glue").replace("<run>", "run")


def with_limits(command: Command, tiny: Path, n: int) -> str:
    """The command line as run here: placeholders filled, small limits appended to a training,
    evaluation or benchmark, its output folder numbered (two runs in one second would share one)."""
    text = fill_placeholders(command.text)
    words = shlex.split(text)
    extra: list[str] = []
    if words[0] == "sesame-train":
        extra = _limits(words, TRAIN_LIMITS, tiny)
        extra.append(f"hydra.sweep.dir=multirun/readme/{n}" if "--multirun" in words else f"hydra.run.dir=outputs/readme/{n}")
    elif words[0] == "sesame-eval":
        extra = [*_limits(words, EVAL_LIMITS, tiny), f"hydra.run.dir=outputs/readme/{n}"]
    elif words[0] == "python" and words[1] in SCRIPT_LIMITS:
        extra = [a.format(tiny=tiny) for a in SCRIPT_LIMITS[words[1]]] + ["--out", f"outputs/readme/{n}"]
    return " ".join([text, *map(shlex.quote, extra)])


@pytest.fixture(scope="module")
def workspace(tiny_bert_dir, tmp_path_factory) -> Iterator[Path]:
    """A folder like a fresh clone's root (``data/``, ``benchmarks/``) holding a tiny GLUE sweep
    (``multirun/glue/sweep``, ``pooling=pooler,cls``: its first job is ``outputs/glue/run``, as ``make run``
    makes one (``pooling=pooler``, the default, which ``--format hf`` exports)) and tiny SQuAD, NER and
    multiple-choice runs (``outputs/<task>/run``)."""
    workspace = tmp_path_factory.mktemp("readme") / "clone"
    workspace.mkdir()
    with command_server(workspace.parent / "commands", _env(workspace.parent)) as SERVED[workspace]:
        yield _made(workspace, tiny_bert_dir)
    del SERVED[workspace]


def _made(workspace: Path, tiny_bert_dir: Path) -> Path:
    for folder in ("data", "benchmarks"):
        (workspace / folder).symlink_to(REPO / folder)
    limits = " ".join(_limits([], TRAIN_LIMITS, tiny_bert_dir) + ["trainer.log_every_n_steps=1"])
    lines = (f"sesame-train --multirun pooling=pooler,cls {limits} hydra.sweep.dir=multirun/glue/sweep",
             f"sesame-train task=squad_v1 {limits} hydra.run.dir=outputs/squad_v1/run",
             f"sesame-train task=ner {limits} hydra.run.dir=outputs/ner/run",
             f"sesame-train task=multiple_choice {limits} hydra.run.dir=outputs/multiple_choice/run")
    with ThreadPoolExecutor(WORKERS) as pool:  # independent runs
        for line, out in zip(lines, pool.map(lambda line: _shell(line, workspace), lines)):
            assert out.returncode == 0, f"{line}\n{out.stderr[-3000:]}"
    (workspace / "outputs" / "glue").mkdir()
    (workspace / "outputs" / "glue" / "run").symlink_to(workspace / "multirun" / "glue" / "sweep" / "0")
    return workspace


def test_every_unmarked_command_runs_on_a_fresh_clone(workspace, tiny_bert_dir):
    """A block's commands in page order (its later commands read what its earlier ones made); blocks
    side by side, as each command is one single-threaded process. Each failure is reported with its
    page and line, the command as run and its last output; a command shown with its output must print
    lines of that shape."""
    numbered = list(enumerate(RUN))
    keys = dict.fromkeys((c.page, c.block) for c in RUN)
    blocks = [[(n, c) for n, c in numbered if (c.page, c.block) == key] for key in keys]

    def run_block(block: list[tuple[int, Command]]) -> list[str]:
        failures = []
        for n, command in block:
            line = with_limits(command, tiny_bert_dir, n)
            start = time.monotonic()
            out = _shell(line, workspace)
            print(f"{time.monotonic() - start:6.1f} s  {command}")  # pytest -s shows where the time goes
            if out.returncode != 0:
                failures.append(f"{command}\n  ran: {line}\n  exit {out.returncode}: {(out.stderr or out.stdout)[-1500:]}")
            elif command.output and (why := output_differs(command, out.stdout)):
                failures.append(f"{command}\n  ran: {line}\n  {why}")
        return failures

    with ThreadPoolExecutor(WORKERS) as pool:
        failures = [f for block_failures in pool.map(run_block, blocks) for f in block_failures]
    assert not failures, "\n\n".join(failures)
