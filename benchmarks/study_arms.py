"""A full-data study unit's child process (``full_data_study.py --child <unit>/spec.json``): one segment of one
(task, arm, seed), trained by sesame's own code or by transformers' Trainer on sesame's batches, validated at the
arm's points on the training clock, resumed from its checkpoint where it has one, its result written for the
parent."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from compression import compose
from study_clock import TrainClock, peak_rss_mib
from study_records import write_json
from study_units import TASKS
from train_speed import (
    HF_KEYS,
    HFExamples,
    TrainerSwitches,
    check_mirrorable,
    evaluate_hf,
    hf_model,
    precision_arguments,
    sampling_argument,
    sesame_optim,
    reference_trainer_class,
    settings_of,
)
from sesame.tasks.base.run_settings import RunSettings


EXIT_STOPPED = 75  # a child stopped by SIGTERM, with a checkpoint to resume from


def kill_now_if(spec: dict[str, Any], step: int) -> None:
    """--quick: the first attempt of a unit dies (SIGKILL, no clean-up) once it reaches the given step."""
    at = spec.get("kill_at_step")
    if at and spec["attempt"] == 1 and step >= at:
        print(f"[quick] killing this attempt at step {step} to exercise resuming", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def main_metric_of(cfg: Any) -> str:
    return str(cfg.task.main_metric)


def versions() -> dict[str, str]:
    import lightning
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "lightning": lightning.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname()}


# The sesame arm ---------------------------------------------------------------------------------------
def child_sesame(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    import lightning as L
    from sesame.tasks.runs import runner
    from sesame.tasks.runs.checkpoint_callbacks import AtomicCheckpointIO

    clock = TrainClock()
    run_dir = folder / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    overrides = [*spec["overrides"], *spec["arm_overrides"]]
    if spec.get("ckpt_steps"):
        overrides.append(f"checkpoint.every_n_train_steps={spec['ckpt_steps']}")
    resuming = last.is_file()
    if resuming:
        overrides.append("resume=true")
    elif run_dir.exists():
        overrides.append("overwrite=true")
    info: dict[str, Any] = {}

    class Study(L.Callback):
        def on_train_start(self, trainer, module):
            info["steps_per_epoch"] = int(trainer.num_training_batches)
            info["train_examples"] = len(trainer.datamodule.dataset("train"))
            info["restored_step"] = int(trainer.global_step)
            clock.start_segment()

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            kill_now_if(spec, trainer.global_step)
            clock.batch(trainer.current_epoch, batch)

        def on_validation_start(self, trainer, module):
            if trainer.state.fn == "fit" and not trainer.sanity_checking:
                clock.pause()

        def on_validation_end(self, trainer, module):
            if trainer.state.fn != "fit" or trainer.sanity_checking:
                return
            reading = clock.reading()
            spent = clock.resume()
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
            entry = clock.record(int(trainer.global_step), info["steps_per_epoch"], metrics, spent, reading)
            print(f"[validation] step {entry['step']} epoch {entry['epoch']}: {info['main']} "
                  f"{metrics.get(info['main'])}, train {reading[0]:.0f} s wall / {reading[1]:.0f} s CPU", flush=True)
            write_json(folder / "progress.json", {"history": clock.history, "time": time.time()})

        def on_save_checkpoint(self, trainer, module, checkpoint):
            checkpoint["study_clock"] = clock.state()

        def on_load_checkpoint(self, trainer, module, checkpoint):
            clock.restore(checkpoint.get("study_clock"), int(checkpoint.get("global_step", 0)))

        def on_train_end(self, trainer, module):
            info["train_reading"] = clock.reading()

    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, extra_callbacks=None, **kw: build(
        cfg, run_dir, monitor, [*(extra_callbacks or []), Study()], **kw)
    save = AtomicCheckpointIO.save_checkpoint

    def timed_save(self, checkpoint, path, storage_options=None):
        with clock.excluded():
            return save(self, checkpoint, path, storage_options)

    AtomicCheckpointIO.save_checkpoint = timed_save
    try:
        cfg = compose("config", overrides)
        if spec["mirrored"]:
            check_mirrorable(cfg)
        info["main"] = main_metric_of(cfg)
        print(f"[sesame] {'resuming from ' + str(last) if resuming else 'starting'}: {' '.join(overrides)}", flush=True)
        metrics = runner.train(RunSettings.from_config(cfg), run_dir)
    finally:
        runner.build_trainer = build
        AtomicCheckpointIO.save_checkpoint = save
    wall, cpu = info.get("train_reading", clock.reading())
    return {"settings": settings_of(cfg), "main_metric": main_metric_of(cfg), "overrides": overrides,
            "best": metrics, "best_step": metrics.get("best_step"), "train_wall_s": wall, "train_cpu_s": cpu,
            "eval_wall_s": clock.eval_total["wall"], "eval_cpu_s": clock.eval_total["cpu"],
            "save_wall_s": clock.save_total["wall"], "save_cpu_s": clock.save_total["cpu"],
            "history": clock.history, "fingerprints": clock.fingerprints,
            "steps_per_epoch": info.get("steps_per_epoch"), "train_examples": info.get("train_examples"),
            "restored_step": info.get("restored_step", 0), "peak_rss_before_eval_mib": clock.peak_rss_before_eval,
            "run_dir": str(run_dir)}


# The Trainer arm --------------------------------------------------------------------------------------
def rng_state() -> tuple[Any, ...]:
    import numpy as np
    import torch

    return torch.random.get_rng_state(), np.random.get_state(), random.getstate()


def set_rng_state(state: tuple[Any, ...]) -> None:
    import numpy as np
    import torch

    torch.random.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


def hf_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """The Trainer's checkpoint-<step> folders that are complete (hold the study clock), oldest first;
    incomplete ones (killed while being written) are removed."""
    found = []
    for path in output_dir.glob("checkpoint-*"):
        if (path / "study_clock.json").is_file():
            found.append((int(path.name.split("-")[1]), path))
        else:
            shutil.rmtree(path, ignore_errors=True)
    return sorted(found)


def init_task_layer_as_sesame(model: Any, kind: str) -> None:
    """The transformers model's task layer re-initialised as sesame's heads are (torch's default Linear
    init), in place of transformers' normal(0, 0.02) weights and zero biases (the hf_torch_init arm)."""
    import torch

    task_layer = model.qa_outputs if kind == "qa" else model.classifier
    for layer in (m for m in task_layer.modules() if isinstance(m, torch.nn.Linear)):
        layer.reset_parameters()


def child_hf(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    import torch
    from sesame.tasks.inputs.batching import ResumableShuffleSampler
    from sesame.tasks.encoders.encoder import resolve_name_or_path
    from omegaconf import OmegaConf
    from sesame.tasks.runs.runner import build_datamodule
    from transformers import (
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    kind = spec["hf"]
    overrides = list(spec["overrides"])
    cfg = compose("config", overrides)
    check_mirrorable(cfg)
    settings = settings_of(cfg)
    main = main_metric_of(cfg)
    epochs = int(cfg.trainer.max_epochs)
    optim = sesame_optim(cfg)
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    cfg = OmegaConf.merge(cfg, datamodule.config_updates())  # what the data decides (label sets)
    tokenizer = datamodule.tokenizer
    examples = HFExamples(datamodule.dataset("train"), HF_KEYS[kind])
    steps_per_epoch = math.ceil(len(examples) / settings["batch_size"])
    total_steps = steps_per_epoch * epochs
    set_seed(settings["seed"])
    model = hf_model(kind, resolve_name_or_path(str(cfg.encoder.name_or_path)), cfg, datamodule)
    if spec.get("head_init") == "torch":
        init_task_layer_as_sesame(model, kind)
    grouped, bf16 = bool(spec.get("grouped")), bool(spec.get("bf16"))
    validate_at = validation_steps(steps_per_epoch, int(spec.get("val_per_epoch") or 1))
    switches = TrainerSwitches(model)
    collator = DataCollatorForTokenClassification(tokenizer) if kind == "token" else DataCollatorWithPadding(tokenizer)
    output_dir = folder / "hf"
    best_dir, epoch_dir = folder / "hf_best", folder / "hf_epoch_model"
    clock = TrainClock()
    done = hf_checkpoints(output_dir) if output_dir.is_dir() else []
    resume_from = None
    if done:
        step, resume_from = done[-1]
        clock.restore(json.loads((resume_from / "study_clock.json").read_text()), step)
    best = json.loads((best_dir / "study_best.json").read_text()) if (best_dir / "study_best.json").is_file() else None
    if best and best["step"] > clock.restored_step:  # a best model the resumed history does not hold
        shutil.rmtree(best_dir, ignore_errors=True)
        best = None
    dev_overrides = [*overrides, "data.test_file=null"]
    stopping = {"sigterm": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(sigterm=True))

    def evaluate_epoch(trained: Any, step: int) -> None:
        nonlocal best
        clock.pause()
        reading = clock.reading()
        state = rng_state()
        shutil.rmtree(epoch_dir, ignore_errors=True)
        trained.save_pretrained(str(epoch_dir))
        tokenizer.save_pretrained(str(epoch_dir))
        eval_dir = folder / "hf_eval" / f"step{step}"
        shutil.rmtree(eval_dir, ignore_errors=True)
        _, metrics = evaluate_hf(dev_overrides, epoch_dir, eval_dir)
        set_rng_state(state)
        trained.train()
        value = metrics.get(main)
        if value is not None and (best is None or value > best["value"]):
            shutil.rmtree(best_dir, ignore_errors=True)
            epoch_dir.rename(best_dir)
            best = {"step": step, "value": value}
            write_json(best_dir / "study_best.json", best)
        else:
            shutil.rmtree(epoch_dir, ignore_errors=True)
        spent = clock.resume()
        metrics = {k: float(v) for k, v in metrics.items() if k.startswith("val_") and isinstance(v, (int, float))}
        clock.record(step, steps_per_epoch, metrics, spent, reading)
        print(f"[validation] step {step} epoch {step / steps_per_epoch:.2f}: {main} {value}, train "
              f"{reading[0]:.0f} s wall / {reading[1]:.0f} s CPU, eval {spent[0]:.0f} s", flush=True)
        write_json(folder / "progress.json", {"history": clock.history, "time": time.time()})

    class Study(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.start_segment()

        def on_step_begin(self, args, state, control, **kw):
            kill_now_if(spec, state.global_step)

        def on_step_end(self, args, state, control, model=None, **kw):
            if stopping["sigterm"]:
                control.should_save = True
                control.should_training_stop = True
            elif state.global_step % steps_per_epoch in validate_at:  # mid-epoch validations (val_per_epoch > 1)
                evaluate_epoch(model, state.global_step)
                control.should_save = True

        def on_epoch_end(self, args, state, control, model=None, **kw):
            if stopping["sigterm"] or state.global_step % steps_per_epoch:
                return
            evaluate_epoch(model, state.global_step)
            control.should_save = True  # last checkpoint after every validation, as sesame's last.ckpt

    # grouped: the Trainer's own LengthGroupedSampler; else sesame's batches (benchmarks/train_speed.py).
    GroupsTrainer = reference_trainer_class(
        settings["head_lr"],
        lambda size, own: switches.sampler(own() if grouped else ResumableShuffleSampler(size, datamodule.seed)),
        lambda trainer, inputs: clock.batch(trainer.state.global_step // steps_per_epoch, inputs))

    class ReferenceTrainer(GroupsTrainer):
        """The Trainer with sesame's learning-rate groups and batches, its clock paused while it saves."""

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            with clock.excluded():
                super()._save_checkpoint(model, trial)
                path = output_dir / f"checkpoint-{self.state.global_step}"
                write_json(path / "study_clock.json", clock.state())
                for step, old in hf_checkpoints(output_dir):
                    if old != path:
                        shutil.rmtree(old, ignore_errors=True)

    args = TrainingArguments(
        output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=settings["batch_size"],
        learning_rate=settings["encoder_lr"], weight_decay=settings["weight_decay"], adam_epsilon=settings["adam_epsilon"],
        lr_scheduler_type="linear", warmup_steps=int(settings["warmup_ratio"] * total_steps),
        max_grad_norm=settings["gradient_clip_val"] or 0.0, optim=optim, seed=settings["seed"],
        **sampling_argument(TrainingArguments, grouped), **precision_arguments(bf16),
        logging_strategy="steps", logging_steps=settings["log_every_n_steps"],
        save_strategy="steps" if spec.get("ckpt_steps") else "no", save_steps=spec.get("ckpt_steps") or 500,
        eval_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=settings["num_workers"], dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = ReferenceTrainer(model=model, args=args, train_dataset=examples, data_collator=collator,
                               processing_class=tokenizer, callbacks=[Study()])
    print(f"[hf] {'resuming from ' + str(resume_from) if resume_from else 'starting'}: {' '.join(overrides)}; "
          f"{len(examples)} examples, {steps_per_epoch} steps/epoch, optim {optim}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    if stopping["sigterm"]:
        print("[hf] stopped by SIGTERM with a checkpoint; rerun to resume", flush=True)
        sys.exit(EXIT_STOPPED)
    wall, cpu = clock.reading()
    seen = switches.check(grouped, bf16)
    # The best dev epoch's model, scored again with the test set where the task has one (as sesame's best.ckpt).
    best_metrics: dict[str, Any] = {}
    if best is not None:
        test_file = cfg.data.get("test_file")
        if test_file:
            eval_dir = folder / "hf_eval" / "best"
            shutil.rmtree(eval_dir, ignore_errors=True)
            _, best_metrics = evaluate_hf(overrides, best_dir, eval_dir)
        else:
            best_metrics = next(e["metrics"] for e in clock.history if e["step"] == best["step"])
        best_metrics = {**best_metrics, "best_step": best["step"]}
    return {"settings": {**settings, "epochs": epochs}, "main_metric": main, "overrides": overrides, "hf_optim": optim,
            "best": best_metrics, "best_step": best["step"] if best else None, "train_wall_s": wall, "train_cpu_s": cpu,
            "eval_wall_s": clock.eval_total["wall"], "eval_cpu_s": clock.eval_total["cpu"],
            "save_wall_s": clock.save_total["wall"], "save_cpu_s": clock.save_total["cpu"],
            "history": clock.history, "fingerprints": clock.fingerprints, "steps_per_epoch": steps_per_epoch,
            "train_examples": len(examples), "restored_step": clock.restored_step,
            "peak_rss_before_eval_mib": clock.peak_rss_before_eval, "model": type(model).__name__, "switches": seen}


def validation_steps(steps_per_epoch: int, per_epoch: int) -> set[int]:
    """The mid-epoch steps (``global_step % steps_per_epoch``) of ``per_epoch`` validations an epoch, at the points
    Lightning's ``val_check_interval=1/per_epoch`` puts sesame's (every ``int(steps_per_epoch / per_epoch)`` batches);
    the epoch's end is validated apart."""
    every = int(steps_per_epoch / per_epoch)
    return {k * every for k in range(1, per_epoch)} - {0} if every else set()


def child(spec_file: Path) -> None:
    """One segment of one unit (``--child``): train (resuming where it can), evaluate, write result.json."""
    spec = json.loads(spec_file.read_text())
    folder = spec_file.parent
    import logging

    import torch

    # sesame's own log lines into child.log, as sesame-train's train.log has them: the data's counts
    # (questions -> windows, sentences -> windows, held-out examples), warnings about the files
    logging.basicConfig(level=logging.WARNING, format="[%(levelname)s %(name)s] %(message)s")
    logging.getLogger("sesame").setLevel(logging.INFO)
    torch.set_num_threads(int(spec["threads"]))
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    started = time.time()
    from sesame.tasks.core.errors import RunStopped

    try:
        result = child_sesame(spec, folder) if spec["side"] == "sesame" else child_hf(spec, folder)
    except RunStopped as stopped:  # SIGTERM: the run saved its checkpoint; the parent resumes it later
        print(f"[sesame] {stopped}", flush=True)
        sys.exit(EXIT_STOPPED)
    history = result["history"]
    result.update(
        task=spec["task"], arm=spec["arm"], seed=spec["seed"], preset=TASKS[spec["task"]]["preset"],
        final={"step": history[-1]["step"], **history[-1]["metrics"]} if history else {},
        peak_rss_segment_mib=peak_rss_mib(), threads=torch.get_num_threads(), versions=versions(),
        commit=spec["commit"], data_dir=spec["data_dir"], segment_seconds=time.time() - started,
        finished=datetime.datetime.now().isoformat(timespec="seconds"), quick=spec.get("quick", False),
    )
    write_json(folder / "result.child.json", result)
