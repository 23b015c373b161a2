"""``sesame-cache ls|du|clear``: the frozen-feature cache entries on disk.

    sesame-cache ls               # one line per entry: key, size, examples, layers, encoder
    sesame-cache du               # each entry's size, its layers and the saving against storing all; the total
    sesame-cache clear [KEY ...]  # remove all entries (or the named ones) and half-built folders of killed builds
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from sesame.tasks.inputs.feature_cache import all_layers_bytes, default_cache_dir, layers_tag, list_entries


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def _layers(entry: dict) -> str:
    """``9-12 (4 of 13)``: the hidden states an entry holds."""
    if "layers" not in entry:
        return "?"
    return f"{layers_tag(entry['layers'])} ({len(entry['layers'])} of {entry['num_hidden_states']})"


def _state(entry: dict) -> str:
    if entry["writing"]:
        return "  (being built)"
    if entry["staging"]:
        return "  (left by a killed build: the next build removes it)"
    return "" if entry["complete"] else "  (incomplete: will be rebuilt)"


def _du_line(entry: dict) -> str:
    """One entry's size, layers and what holding only those layers saves against holding every one."""
    if not entry["complete"]:
        return f"{entry['entry']}  {_size(entry['bytes']):>10}{_state(entry)}"
    features = entry["files"]["features.npy"]["bytes"]
    saved = max(all_layers_bytes(entry) - (features - 128), 0)  # 128: the .npy header, present either way
    share = saved / (entry["bytes"] + saved) if entry["bytes"] + saved else 0.0
    return (f"{entry['entry']}  {_size(entry['bytes']):>10}  layers {_layers(entry)}  "
            f"saves {_size(saved)} ({share:.0%}) against all layers")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sesame-cache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("ls", "du", "clear"))
    parser.add_argument("keys", nargs="*", help="entries to clear: a folder name, or its key (the part before .L)")
    parser.add_argument("--dir", type=Path, default=None, help=f"cache folder (default: {default_cache_dir()})")
    args = parser.parse_args(argv)
    cache_dir = args.dir or default_cache_dir()
    entries = list_entries(cache_dir)
    if args.command == "ls":
        if not entries:
            print(f"no entries in {cache_dir}")
        for e in entries:
            print(f"{e['entry']}  {_size(e['bytes']):>10}  {e.get('num_examples', '?'):>7} examples  "
                  f"layers {_layers(e)}  {e.get('dtype', '')}  {e.get('encoder', '')}{_state(e)}")
    elif args.command == "du":
        for e in entries:
            print(_du_line(e))
        print(f"{_size(sum(e['bytes'] for e in entries))}\t{cache_dir} ({len(entries)} entries)")
    else:
        chosen = [e for e in entries if not e["writing"] and (not args.keys or e["entry"] in args.keys
                                                             or e["entry"].split(".L")[0] in args.keys)]
        for e in chosen:
            shutil.rmtree(e["path"], ignore_errors=True)
        busy = [e for e in entries if e["writing"]]
        if busy:
            print(f"kept {len(busy)} entries a running build is writing")
        print(f"removed {len(chosen)} entries ({_size(sum(e['bytes'] for e in chosen))}) from {cache_dir}")


if __name__ == "__main__":
    main()
