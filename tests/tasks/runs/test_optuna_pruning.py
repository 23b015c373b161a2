"""hydra/sweeper=pruning_optuna: jobs report each validation to their Optuna trial and stop when pruned."""

import csv
import fcntl
import json
import sys

import pytest
import yaml

from tests.conftest import require
from tests import preloaded_commands as preloaded

LEDGER = "optuna_trials.json"


def _search(tmp_path, tiny_bert_dir, sweep, *extra, launcher=()):
    """A pruning search over pooling (tiny encoder, frozen + feature cache, 32 examples: one step an epoch)."""
    return preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "hydra/sweeper=pruning_optuna", *launcher,
         "finetune=frozen", "cache.enabled=true", "cache.layers=all", f"cache.dir={tmp_path / 'cache'}",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.max_epochs=3",
         "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
         "data.max_train_examples=32", "data.max_eval_examples=32", "hydra.sweeper.sampler.seed=0",
         "hydra.sweeper.params={pooling:'choice(cls,mean)'}", f"hydra.sweep.dir={sweep}",
         "~hydra.callbacks.sweep_report", *extra],
        capture_output=True, text=True,
    )


def _trials(sweep):
    return {t["number"]: t for t in json.loads((sweep / LEDGER).read_text())["trials"]}


def _logged_val(job):
    """The job's val_accuracy at each validation, in order (its logs/metrics.csv)."""
    with (job / "logs" / "metrics.csv").open(newline="") as handle:
        return [float(row["val_accuracy"]) for row in csv.DictReader(handle) if row.get("val_accuracy")]


def _seed_ledger(sweep):
    """A study whose one finished trial scored 1.0 at every validation: the median pruner stops any trial of the
    tiny random encoder (which cannot score 1.0) at its first validation."""
    from optuna.distributions import CategoricalDistribution, distribution_to_json

    sweep.mkdir(parents=True)
    record = {"number": 0, "state": "COMPLETE", "params": {"pooling": "cls"},
              "distributions": {"pooling": distribution_to_json(CategoricalDistribution(["cls", "mean"]))},
              "value": 1.0, "intermediate": {"1": 1.0, "2": 1.0, "3": 1.0}, "system_attrs": {}, "pruned_at": None}
    (sweep / LEDGER).write_text(json.dumps({"format": "sesame-optuna-trials/1", "study": "sesame",
                                            "direction": "maximize", "pruner": {"name": "none"}, "trials": [record]}))


def test_pruned_search_stops_bad_trials_and_a_rerun_continues_the_study(tiny_bert_dir, tmp_path):
    require("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    _seed_ledger(sweep)
    pruner = "hydra.sweeper.pruner={name:median,n_startup_trials:1}"
    done = _search(tmp_path, tiny_bert_dir, sweep, "hydra.sweeper.n_trials=3", pruner)
    assert done.returncode == 0, done.stderr[-3000:]
    trials = _trials(sweep)
    assert sorted(trials) == [0, 1, 2] and trials[0]["value"] == 1.0  # the study went on from its trial 0
    for number in (1, 2):
        trial, job = trials[number], sweep / str(number)  # a trial's folder is its number
        assert trial["state"] == "PRUNED" and trial["pruned_at"] == 1  # stopped before its third validation
        record = json.loads((job / "optuna_trial.json").read_text())
        assert record["pruned_at"] == 1 and record["trial"] == number
        assert json.loads((job / "metrics.json").read_text())["optuna_pruned"] == 1
        logged = _logged_val(job)
        assert len(logged) == 1  # the run validated once, then stopped
        assert [trial["intermediate"][k] for k in sorted(trial["intermediate"])] == pytest.approx(logged)
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["trials"]["pruned"] == 2 and results["best_trial"] == 0

    # the same command with a larger n_trials and no pruner: one more trial, numbered on, run to its end
    again = _search(tmp_path, tiny_bert_dir, sweep, "hydra.sweeper.n_trials=4", "hydra.sweeper.pruner=none")
    assert again.returncode == 0, again.stderr[-3000:]
    trials_after = _trials(sweep)
    assert sorted(trials_after) == [0, 1, 2, 3]
    assert all(trials_after[n]["intermediate"] == trials[n]["intermediate"] for n in (0, 1, 2))
    last = trials_after[3]
    assert last["state"] == "COMPLETE" and last["pruned_at"] is None
    logged = _logged_val(sweep / "3")  # the fit's three validations, then (if any) the best checkpoint's evaluation
    assert len(last["intermediate"]) == 3 and len(logged) in (3, 4)
    assert [last["intermediate"][k] for k in sorted(last["intermediate"])] == pytest.approx(logged[:3])
    assert last["value"] == pytest.approx(max(logged))
    assert json.loads((sweep / "3" / "metrics.json").read_text())["optuna_pruned"] == 0


def test_parallel_jobs_share_the_ledger(tiny_bert_dir, tmp_path):
    require("hydra_plugins.hydra_optuna_sweeper")
    require("hydra_plugins.hydra_joblib_launcher")
    sweep = tmp_path / "parallel"
    done = _search(tmp_path, tiny_bert_dir, sweep, "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2",
                   "hydra.sweeper.pruner=median", "trainer.max_epochs=2",
                   launcher=("hydra/launcher=local_parallel", "hydra.launcher.n_jobs=2"))
    assert done.returncode == 0, done.stderr[-3000:]
    trials = _trials(sweep)
    assert sorted(trials) == [0, 1]
    for number, trial in trials.items():  # both workers wrote their reports into the one ledger
        logged = _logged_val(sweep / str(number))
        assert trial["state"] == "COMPLETE" and len(trial["intermediate"]) == 2
        assert [trial["intermediate"][k] for k in sorted(trial["intermediate"])] == pytest.approx(logged[:2])


def test_an_unknown_pruner_ends_the_search_with_one_line(tmp_path):
    require("hydra_plugins.hydra_optuna_sweeper")
    done = _search(tmp_path, "unused", tmp_path / "sweep", "hydra.sweeper.pruner=fastest")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert any(line.startswith("error: hydra.sweeper.pruner='fastest' is not a pruner") for line in lines[-3:])
    assert not (tmp_path / "sweep" / "0").exists()  # refused before any job


def test_a_damaged_or_locked_ledger_is_a_config_error(tmp_path):
    from sesame.tasks.core.errors import ConfigError
    from sesame.tasks.runs.trial_ledger import TrialLedger

    header = {"study": "s", "direction": "maximize", "pruner": {"name": "none"}}
    damaged = tmp_path / "damaged.json"
    damaged.write_bytes(b"SQLite format 3\x00" + bytes(range(256)))  # a database, or half of one: not a ledger
    with pytest.raises(ConfigError, match="is not an Optuna trial ledger"):
        with TrialLedger(damaged).open(create=header):
            pass
    ledger = TrialLedger(tmp_path / "held.json", lock_timeout_s=0.2)
    with ledger.open(create=header) as content:
        content["trials"].append({"number": 0})
    with open(tmp_path / "held.json.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as another search writing to it would
        with pytest.raises(ConfigError, match="stayed locked by another process for 0.2 s"):
            with ledger.open():
                pass
    with ledger.open() as content:  # free again: what was written stands
        assert content["trials"] == [{"number": 0}]
    with pytest.raises(ConfigError, match="no such trial ledger"):
        with TrialLedger(tmp_path / "missing.json").open():
            pass


def test_the_halving_preset_is_the_measured_search_random_sampling_and_successive_halving():
    """+experiment=optuna_sst2_halving: optuna_sst2's search with the sampler and pruner the 0.5x measurement ran
    (docs/results/optuna_pruning.md); the hydra config as Hydra composes it."""
    require("hydra_plugins.hydra_optuna_sweeper")
    shown = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.train", "+experiment=optuna_sst2_halving",
                           "--cfg", "hydra"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-3000:]
    sweeper = yaml.safe_load(shown.stdout)["hydra"]["sweeper"]
    assert sweeper["sampler"] == {"_target_": "optuna.samplers.RandomSampler", "seed": 42}
    assert (sweeper["pruner"], sweeper["n_trials"]) == ("successive_halving", 24)
    assert set(sweeper["params"]) == {"finetune.head_lr", "pooling", "fusion"}  # optuna_sst2's search space
