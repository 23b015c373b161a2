"""``sesame-compress prune --rounds N --recover KEY=VALUE``: prune a little, recover, repeat.

    sesame-compress prune outputs/glue/<run> outputs/glue/<run>-pruned --heads 0.3 --ffn 0.4 \\
        --rounds 3 --recover trainer.max_epochs=1 [--recover distill.cache=true ...]

Round ``k`` (of ``N``) prunes the previous round's model (the source in round 1) so that, counted in the
source's heads and neurons, ``round(k / N * C)`` are gone after it, ``C`` being the count one-shot pruning
removes (``round(--heads * all heads)``, as ``tasks/compression/prune_importance.py``'s ``select`` rounds):
each round's fraction is of what remains, so the last round ends with exactly one-shot pruning's counts.
The scores are computed again in every round, on the model that round prunes
(``tasks/compression/prune.py``). With ``--recover`` the pruned model then trains
(``tasks/runs/runner.py``'s ``train``, what ``sesame-train encoder.name_or_path=<pruned>/encoder
distill.teacher=<source>`` runs): its config is the source run's, with the pruned encoder,
``distill.teacher`` the unpruned source in every round, and the ``--recover`` overrides (Hydra's
syntax; only keys the config has; ``--recover distill.teacher=<run>`` names another teacher). The next round prunes that recovered run. Without ``--recover`` the
rounds only prune (the scores recomputed between cuts). ``--rounds 1`` without ``--recover`` is
one-shot pruning (:func:`sesame.tasks.compression.prune.prune`), unchanged.

Output folder:
- ``schedule.json``: the arguments (written first, when the folder is made);
- ``rounds/<k>/pruned/`` (a pruned run folder, with that round's ``compression.json``) and, with
  ``--recover``, ``rounds/<k>/recovered/`` (a training run folder);
- the last round's run (recovered, else pruned) hard-linked (copied across file systems) into the
  output itself, which is so a run folder ``sesame-eval model=<output>``, ``sesame-predict <output>`` and
  ``sesame-export <output>`` read;
- ``compression.json``, written last: every round (its fractions, kept counts, parameters, the
  recovered run's dev metric) and the totals. Its presence means the schedule finished.

Rerunning the same command on an output folder without ``compression.json`` continues the schedule: a
finished round (its ``pruned/`` folder, written whole or not at all, and its ``recovered/metrics.json``) is
kept, a recovery training that was killed resumes from its ``checkpoints/last.ckpt`` (``resume=true``).
Other arguments on an existing output folder are refused, naming what differs; a finished schedule
rerun with its arguments returns its report.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.compression.prune import NOTHING_WRITTEN, check_arguments, prune, refuse_existing
from sesame.tasks.core.atomic_files import staged_folder, write_json_atomic
from sesame.tasks.core.errors import ConfigError, RunStopped, UserError
from sesame.tasks.runs.run_lock import LOCK_NAME, run_folder_lock
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import checkpoint_config, read_checkpoint

log = logging.getLogger(__name__)

#: The arguments of a schedule, in its output folder.
SCHEDULE_FILE = "schedule.json"
#: The report, written last: a schedule whose output holds it has finished.
REPORT_FILE = "compression.json"
#: Settings the schedule sets itself in each recovery run: ``--recover`` may not name them.
SET_BY_SCHEDULE = ("encoder.name_or_path", "init_from", "resume", "overwrite")
_MISSING = object()


def recover_overrides(items: Sequence[str], cfg: dict[str, Any]) -> list[tuple[str, Any]]:
    """``--recover KEY=VALUE`` items as ``(key, value)``, values read as ``sesame-train`` reads them (Hydra's
    override syntax); a :class:`ConfigError` for an item without ``=``, a sweep, an added or deleted key,
    a key ``cfg`` does not have, a whole group (``trainer=debug``), or one the schedule sets."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    config = OmegaConf.create(cfg)
    parsed = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--recover {item}: give KEY=VALUE, a setting of the recovery training "
                              "(e.g. --recover trainer.max_epochs=1)")
        if item.lstrip()[:1] in ("+", "~"):
            raise ConfigError(f"--recover {item}: only settings the run's config has can be changed (no + or ~)")
        try:
            override = parser.parse_override(item)
        except HydraException as err:
            raise ConfigError(f"--recover {item}: not a KEY=VALUE override ({str(err).splitlines()[0]})") from None
        if override.is_sweep_override():
            raise ConfigError(f"--recover {item}: one value per key (a sweep of values is for sesame-train --multirun)")
        key = override.key_or_group
        if key in SET_BY_SCHEDULE:
            raise ConfigError(f"--recover {item}: the schedule sets {key} itself in every recovery run")
        if OmegaConf.select(config, key, default=_MISSING) is _MISSING:
            group = key.rpartition(".")[0]
            known = OmegaConf.select(config, group, default=None) if group else None
            hint = f" (its {group} keys: {', '.join(map(str, known))})" if OmegaConf.is_dict(known) else ""
            raise ConfigError(f"--recover {item}: the run's config has no key {key}{hint}")
        if OmegaConf.is_dict(OmegaConf.select(config, key)):
            raise ConfigError(f"--recover {item}: {key} is a group of settings, not a setting; a trained run's config "
                              f"has no group choices to make. Set its keys (--recover {key}.<key>=...)")
        parsed.append((key, override.value()))
    return parsed


def removal_counts(total: int, fraction: float, rounds: int) -> list[int]:
    """How many of ``total`` are gone after each round: ``round(k / rounds * C)``, ``C`` the count one-shot
    pruning of ``fraction`` removes (``select``'s rounding: to the nearest, halves up)."""
    final = int(fraction * total + 0.5)
    return [int(k * final / rounds + 0.5) for k in range(1, rounds + 1)]


def round_fraction(remove: int, present: int) -> float:
    """The fraction of ``present`` that ``select`` turns into exactly ``remove`` (``int(f * n + 0.5)``)."""
    fraction = remove / present if present else 0.0
    assert int(fraction * present + 0.5) == remove, (remove, present)
    return fraction


def prune_schedule(source: str | Path, output_dir: str | Path, heads: float = 0.0, ffn: float = 0.0,
                   batches: int = 32, rounds: int = 1, recover: Sequence[str] = ()) -> dict[str, Any]:
    """Prune ``source`` in ``rounds`` rounds, each followed by recovery training with the ``recover``
    overrides when any are given (see the module doc); returns the report (``<output_dir>/compression.json``).
    ``rounds=1`` without ``recover`` is :func:`prune`."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"--rounds {rounds}: prune in at least 1 round (3: a third of the target each round)")
    heads, ffn = check_arguments(heads, ffn, batches)
    recover = list(recover)
    if rounds == 1 and not recover:
        return prune(source, output_dir, heads=heads, ffn=ffn, batches=batches)
    ckpt, checkpoint = read_checkpoint(source)
    overrides = recover_overrides(recover, checkpoint_config(checkpoint))
    del checkpoint

    output = Path(output_dir).expanduser()
    arguments = {"source": str(ckpt.resolve()), "heads": heads, "ffn": ffn, "batches": batches, "rounds": rounds,
                 "recover": recover}
    report = _start_or_continue(output, arguments)
    if report is not None:
        return report
    with run_folder_lock(output):
        return _run(output, ckpt.resolve(), arguments, overrides)


def _start_or_continue(output: Path, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """Make ``output`` with its ``schedule.json``, or check an existing one was started with ``arguments``;
    the report of a finished schedule (else None)."""
    if output.exists():
        try:
            started = json.loads((output / SCHEDULE_FILE).read_text())
        except (OSError, ValueError):
            raise UserError(f"the output {str(output)!r} exists and holds no pruning schedule ({SCHEDULE_FILE}); "
                            "sesame-compress prune writes only a new folder. Fix: name a new folder, or remove that one") from None
        differ = [f"{_flag(k)} {_shown(started.get(k))} there, {_shown(v)} here" for k, v in arguments.items()
                  if started.get(k) != v]
        if differ:
            raise UserError(f"the output {str(output)!r} holds a pruning schedule started with other arguments ("
                            f"{'; '.join(differ)}). Fix: rerun with its arguments to continue it, or name a new folder")
        if (output / REPORT_FILE).is_file():
            log.info("%s: this schedule has finished; its report is %s", output, output / REPORT_FILE)
            return json.loads((output / REPORT_FILE).read_text())
        log.info("%s: continuing the schedule from its finished rounds", output)
        return None
    with staged_folder(output, refuse_existing, NOTHING_WRITTEN) as staging:  # it appears with its arguments
        write_json_atomic(staging / SCHEDULE_FILE, arguments)
    return None


def _flag(key: str) -> str:
    return "source" if key == "source" else f"--{key}"


def _shown(value: Any) -> str:
    return " ".join(value) if isinstance(value, list) and value else "(none)" if value == [] else str(value)


def _run(output: Path, source: Path, arguments: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    rounds, recovering = arguments["rounds"], bool(arguments["recover"])
    done: list[dict[str, Any]] = []
    current: Path = source
    for k in range(1, rounds + 1):
        folder = output / "rounds" / str(k)
        pruned_dir = folder / "pruned"
        if (pruned_dir / REPORT_FILE).is_file():  # written whole (prune renames its folder into place) or absent
            pruned = json.loads((pruned_dir / REPORT_FILE).read_text())
        else:
            present_heads, present_neurons = _present(current, done)
            original = ({"heads": done[0]["heads"]["before"], "neurons": done[0]["neurons"]["before"]} if done
                        else {"heads": present_heads, "neurons": present_neurons})
            heads_fraction = round_fraction(*_this_round(original["heads"], present_heads, arguments["heads"], rounds, k))
            ffn_fraction = round_fraction(*_this_round(original["neurons"], present_neurons, arguments["ffn"], rounds, k))
            log.info("round %d of %d: pruning %s (--heads %.4g --ffn %.4g of what it has)", k, rounds, current,
                     heads_fraction, ffn_fraction)
            try:
                pruned = prune(current, pruned_dir, heads=heads_fraction, ffn=ffn_fraction, batches=arguments["batches"])
            except ConfigError as err:
                raise ConfigError(f"round {k} of {rounds} (pruning {current}): {err}") from None
        entry = _round_entry(k, pruned, pruned_dir)
        current = pruned_dir
        if recovering:
            recovered_dir = folder / "recovered"
            if not (recovered_dir / "metrics.json").is_file():
                log.info("round %d of %d: recovery training of %s -> %s", k, rounds, pruned_dir, recovered_dir)
                _recover(pruned_dir, recovered_dir, source, overrides, k, rounds, output)
            entry.update(_recovered_entry(recovered_dir))
            current = recovered_dir
        done.append(entry)
    _check_totals(done, arguments, rounds)
    _link_run(current, output)
    report = _report(output, source, arguments, done, current)
    write_json_atomic(output / REPORT_FILE, report)
    log.info("pruned in %d rounds%s: %d -> %d heads, %d -> %d neurons -> %s", rounds,
             " with recovery training" if recovering else "", report["heads"]["before"], report["heads"]["after"],
             report["neurons"]["before"], report["neurons"]["after"], output)
    return report


def _present(current: Path, done: list[dict[str, Any]]) -> tuple[int, int]:
    """The heads and neurons the model of ``current`` has: the last round's counts after it, or the source's."""
    if done:
        return done[-1]["heads"]["after"], done[-1]["neurons"]["after"]
    from sesame.tasks.encoders.families import prune_layout
    from sesame.tasks.encoders.pruning import present
    from sesame.tasks.saved.checkpoints import load_trained

    model = load_trained(current).module.encoder.model
    heads, neurons = present(model, prune_layout(model.config, "sesame-compress prune"))
    return sum(heads), sum(neurons)


def _this_round(original: int, present: int, fraction: float, rounds: int, k: int) -> tuple[int, int]:
    """(how many to remove in round ``k``, how many there are) for one kind (heads or neurons)."""
    gone_after = removal_counts(original, fraction, rounds)[k - 1]
    return gone_after - (original - present), present


def _round_entry(k: int, pruned: dict[str, Any], pruned_dir: Path) -> dict[str, Any]:
    return {
        "round": k, "pruned": str(pruned_dir),
        "heads_fraction": pruned["heads_fraction"], "ffn_fraction": pruned["ffn_fraction"],
        "heads": {key: pruned["heads"][key] for key in ("before", "after", "per_layer", "kept_per_layer")},
        "neurons": {key: pruned["neurons"][key] for key in ("before", "after", "per_layer", "kept_per_layer")},
        "parameters": pruned["parameters"],
    }


def _recover(pruned_dir: Path, run_dir: Path, teacher: Path, overrides: list[tuple[str, Any]], k: int, rounds: int,
             output: Path) -> None:
    """Train the pruned run of ``pruned_dir`` into ``run_dir``: its config (the source's, its encoder the
    pruned one), ``distill.teacher`` the unpruned source, the ``--recover`` overrides; a killed training
    there resumes."""
    _, checkpoint = read_checkpoint(pruned_dir)
    cfg = OmegaConf.create(copy.deepcopy(checkpoint_config(checkpoint)))
    del checkpoint
    cfg.distill.teacher = str(teacher)
    for key, value in overrides:
        OmegaConf.update(cfg, key, value, merge=False)
    cfg.encoder.name_or_path = str((pruned_dir / "encoder").resolve())
    cfg.init_from = str(pruned_dir.resolve())  # the pruned run's head too, not a new one
    cfg.overwrite = False
    # A training killed here resumes from its last checkpoint (one killed before its first starts over).
    cfg.resume = True if (run_dir / "config.yaml").is_file() else None
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the training's metrics: stdout is the command's report
            train(RunSettings.from_config(cfg), run_dir)
    except RunStopped as stop:
        raise RunStopped(f"round {k} of {rounds}: {str(stop).split('. Continue it', 1)[0]}. Continue the schedule "
                         f"with the same sesame-compress prune command (output {output})", stop.exit_code - 128) from None


def _recovered_entry(run_dir: Path) -> dict[str, Any]:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    cfg = OmegaConf.load(run_dir / "config.yaml")
    main = OmegaConf.select(cfg, "task.main_metric", default=None)
    return {"recovered": str(run_dir), "teacher": OmegaConf.select(cfg, "distill.teacher", default=None), "metric": main,
            "recovered_score": metrics.get(main) if main else None, "recovered_metrics": metrics}


def _check_totals(done: list[dict[str, Any]], arguments: dict[str, Any], rounds: int) -> None:
    """After the last round the counts are one-shot pruning's (a check of the fractions above)."""
    for kind, flag in (("heads", "heads"), ("neurons", "ffn")):
        original = done[0][kind]["before"]
        wanted = original - removal_counts(original, arguments[flag], rounds)[-1]
        if done[-1][kind]["after"] != wanted:
            raise AssertionError(f"{kind}: {done[-1][kind]['after']} left after {rounds} rounds, one-shot leaves {wanted}")


def _link_run(run: Path, output: Path) -> None:
    """Every file of the run folder ``run`` at the same place under ``output`` (hard links; copies where
    the file system has none), replacing what an interrupted earlier link left; not its report."""
    for path in sorted(run.rglob("*")):
        relative = path.relative_to(run)
        if path.is_dir() or relative.name == LOCK_NAME or relative == Path(REPORT_FILE):
            continue
        target = output / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _original_positions(done: list[dict[str, Any]]) -> list[list[int]]:
    """The kept neurons of each layer as positions among the source's neurons (each round's report gives
    them among the neurons of the model that round pruned)."""
    kept = done[0]["neurons"]["kept_per_layer"]
    for entry in done[1:]:
        kept = [[layer[p] for p in positions] for layer, positions in zip(kept, entry["neurons"]["kept_per_layer"], strict=True)]
    return kept


def _report(output: Path, source: Path, arguments: dict[str, Any], done: list[dict[str, Any]],
            final: Path) -> dict[str, Any]:
    first, last = done[0], done[-1]
    return {
        "source": str(source), "method": "structured_pruning", "schedule": "iterative",
        "heads_fraction": arguments["heads"], "ffn_fraction": arguments["ffn"], "batches": arguments["batches"],
        "rounds_count": arguments["rounds"], "recover": arguments["recover"],
        "teacher": last.get("teacher"),  # the source, unless --recover distill.teacher=... named another
        "final_run": str(final),
        "heads": {"before": first["heads"]["before"], "after": last["heads"]["after"],
                  "per_layer": last["heads"]["per_layer"], "kept_per_layer": last["heads"]["kept_per_layer"]},
        "neurons": {"before": first["neurons"]["before"], "after": last["neurons"]["after"],
                    "per_layer": last["neurons"]["per_layer"], "kept_per_layer": _original_positions(done)},
        "parameters": {"before": first["parameters"]["before"], "after": last["parameters"]["after"],
                       "encoder_before": first["parameters"]["encoder_before"],
                       "encoder_after": last["parameters"]["encoder_after"]},
        "metric": last.get("metric"), "score": last.get("recovered_score"),
        "rounds": [{**entry, "heads_removed_share": 1 - entry["heads"]["after"] / first["heads"]["before"],
                    "neurons_removed_share": 1 - entry["neurons"]["after"] / first["neurons"]["before"]}
                   for entry in done],
        "output": str(output),
    }
