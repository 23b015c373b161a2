"""``sesame-cache ls|du|clear``: the frozen-feature cache entries on disk.

    sesame-cache ls               # one line per entry: key, size, examples, encoder
    sesame-cache du               # total size
    sesame-cache clear [KEY ...]  # remove all entries (or the named ones), and any half-built folders
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from sesame.tasks.inputs.feature_cache import default_cache_dir, list_entries


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n:.1f} TiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sesame-cache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("ls", "du", "clear"))
    parser.add_argument("keys", nargs="*", help="entries to clear (default: all)")
    parser.add_argument("--dir", type=Path, default=None, help=f"cache folder (default: {default_cache_dir()})")
    args = parser.parse_args(argv)
    cache_dir = args.dir or default_cache_dir()
    entries = list_entries(cache_dir)
    if args.command == "ls":
        if not entries:
            print(f"no entries in {cache_dir}")
        for e in entries:
            state = "" if e["complete"] else "  (incomplete: will be rebuilt)"
            print(f"{e['entry']}  {_size(e['bytes']):>10}  {e.get('num_examples', '?'):>7} examples  {e.get('dtype', '')}  {e.get('encoder', '')}{state}")
    elif args.command == "du":
        print(f"{_size(sum(e['bytes'] for e in entries))}\t{cache_dir} ({len(entries)} entries)")
    else:
        chosen = [e for e in entries if not args.keys or e["entry"] in args.keys or e["entry"].split(".")[1:2] == args.keys]
        for e in chosen:
            shutil.rmtree(e["path"], ignore_errors=True)
        print(f"removed {len(chosen)} entries ({_size(sum(e['bytes'] for e in chosen))}) from {cache_dir}")


if __name__ == "__main__":
    main()
