"""What the full-data study keeps of its units: result and attempt files (JSON, written atomically), the machine
each attempt ran on (boot and processor fingerprint) and so which CPU seconds divide, and the run records committed
beside the report (written by --report, restored into a fresh out folder, read for the README)."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from study_units import RUN_RECORDS, SWEEP_ARM_PREFIX, unit_dir


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def boot_time() -> str | None:
    """When this machine booted (minute resolution; None off Linux): which machine an attempt ran on. CPU seconds
    of the same work differed by 1.59x between two machines this study ran on (``TRACED_CAUSES``)."""
    try:
        up = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return datetime.datetime.fromtimestamp(time.time() - up).isoformat(timespec="minutes")


def machine_fingerprint() -> str | None:
    """The processor an attempt ran on: its model, core count and a digest of its feature flags (None off Linux).
    CPU seconds are divided only between attempts with one fingerprint and one boot (``machines_of``)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = " ".join(sorted(fields.get("flags", "").split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{fields.get('model name', platform.processor() or '?')}, {os.cpu_count()} cores, flags {digest}"


#: Boots of the machines that ran attempts recorded before attempts carried their ``boot``: such an attempt ran on
#: the latest of these that precedes it (the 2026-12-04T19:18 boot was a fresh machine; the units before it ran on
#: an earlier one).
KNOWN_BOOTS = ("2026-12-04T19:18",)


#: What ``machines_of`` says of an attempt recorded before attempts carried their ``machine_fingerprint``.
NO_FINGERPRINT = "no fingerprint"


def machines_of(result: dict[str, Any]) -> set[str]:
    """The machines a unit's attempts ran on, each as "<boot> · <processor fingerprint>"; the boot is "unknown" for
    an attempt without a start time, and the fingerprint ``NO_FINGERPRINT`` for one recorded before attempts
    carried it."""
    machines = set()
    for attempt in result.get("attempts") or [{}]:
        started = attempt.get("started")
        if attempt.get("boot") or not started:
            boot = attempt.get("boot") or "unknown"
        else:
            before = [b for b in KNOWN_BOOTS if b <= started[:16]]
            boot = before[-1] if before else f"before {KNOWN_BOOTS[0]}"
        machines.add(f"{boot} · {attempt.get('machine') or NO_FINGERPRINT}")
    return machines


def one_machine(results: list[dict[str, Any]]) -> bool:
    """Whether every attempt of ``results`` ran on one machine (one boot, one processor fingerprint): the only case in
    which their CPU seconds divide into a ratio."""
    machines = set().union(*(machines_of(r) for r in results)) if results else set()
    return len(machines) == 1 and not any(m.endswith(NO_FINGERPRINT) or m.startswith("unknown") for m in machines)


def attempts_on_record(result: dict[str, Any]) -> bool:
    """Whether a unit's attempts cover its whole training (not so when it resumed from another folder's checkpoint)."""
    return result["all_attempts_cpu_s"] >= result["train_cpu_s"]


def attempts_cpu_cell(rows: list[dict[str, Any]]) -> str:
    """Mean CPU minutes of every attempt of the rows' units; '≥' where some attempts are not on record."""
    mean = statistics.fmean(r["all_attempts_cpu_s"] for r in rows) / 60
    return f"{'' if all(attempts_on_record(r) for r in rows) else '≥ '}{mean:.1f}"


def finish_unit(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Merge the child's result with every attempt's cost; drop resume state unless kept."""
    result = json.loads((folder / "result.child.json").read_text())
    attempts = json.loads((folder / "attempts.json").read_text())
    result["attempts"] = attempts
    result["peak_rss_mib"] = max(a["peak_rss_mib"] for a in attempts)
    result["all_attempts_wall_s"] = sum(a["wall_s"] for a in attempts)
    result["all_attempts_cpu_s"] = sum(a["cpu_s"] for a in attempts)
    write_json(folder / "result.json", result)
    (folder / "result.child.json").unlink()
    (folder / "failed.json").unlink(missing_ok=True)
    if not args.keep_checkpoints:
        (folder / "run" / "checkpoints" / "last.ckpt").unlink(missing_ok=True)
        for path in (folder / "hf").glob("checkpoint-*") if (folder / "hf").is_dir() else []:
            shutil.rmtree(path, ignore_errors=True)
    return result


def load_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("units/*/*/seed*/result.json"))]


def write_run_records(args: argparse.Namespace, folder: Path) -> None:
    """One JSON per finished unit (study and sweep) beside the report: its result (settings, overrides, seed,
    commit, versions, per-validation metrics and times, cost) plus, for sesame's arms, the composed config
    the run saved, so each run can be rerun exactly (the preset + overrides at that commit)."""
    import yaml

    shutil.rmtree(folder, ignore_errors=True)  # generated: a unit removed from the study leaves no stale record
    for result_file in sorted([*args.base_out.glob("units/*/*/seed*/result.json"),
                               *args.base_out.glob("sweep/units/*/*/seed*/result.json")]):
        record = json.loads(result_file.read_text())
        config = result_file.parent / "run" / "config.yaml"
        if config.is_file():
            record["config"] = yaml.safe_load(config.read_text())
        sweep = "sweep/" if record["arm"].startswith(SWEEP_ARM_PREFIX) else ""
        target = folder / f"{sweep}{record['task']}_{record['arm']}_seed{record['seed']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(target, record)


def restore_from_records(args: argparse.Namespace, folder: Path = RUN_RECORDS) -> list[Path]:
    """Put the committed run records back as finished units of ``args.base_out`` (study and sweep) where that
    folder has no result for them: a fresh machine or clone then resumes the study where the commit left it
    (finished units are skipped, sesame_best finds its sweep winner) and ``--report`` keeps every committed
    run. Trained weights are not in the records; a restored unit is never retrained. Returns the units written."""
    import yaml

    written = []
    for record_file in sorted([*folder.glob("*.json"), *folder.glob("sweep/*.json")]):
        record = json.loads(record_file.read_text())
        base = args.base_out / "sweep" if record["arm"].startswith(SWEEP_ARM_PREFIX) else args.base_out
        unit = unit_dir(base, record)
        if (unit / "result.json").is_file():
            continue
        config = record.pop("config", None)
        if config is not None:  # what write_run_records reads back into the record
            (unit / "run").mkdir(parents=True, exist_ok=True)
            (unit / "run" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        unit.mkdir(parents=True, exist_ok=True)
        write_json(unit / "result.json", record)
        written.append(unit)
    return written


def load_records(folder: Path = RUN_RECORDS) -> list[dict[str, Any]]:
    """The committed run records of the study's arms (the sweep's are in ``sweep/``)."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
