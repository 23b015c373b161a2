"""The "Encoder families" table of the documentation site (``docs/encoders.md``, PAGE), rendered from the matrix
tests' results.

    SESAME_FAMILY_RESULTS=docs/results/encoder_families.json pytest tests/families   # record the outcomes
    python -m tests.families.table                                                   # render them into docs/encoders.md

``python -m tests.families.table --check`` exits 1 when the page is not what the results render
(``test_table.py`` checks the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.readme_section import section_in, with_section

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "encoder_families.json"
#: The page that holds the table between BEGIN and END.
PAGE = ROOT / "docs" / "encoders.md"
BEGIN, END = "<!-- families:begin -->", "<!-- families:end -->"

TOKENIZERS = {"wordpiece": "WordPiece", "bytelevel_bpe": "byte-level BPE", "unigram": "SentencePiece Unigram",
              "olmo_bpe": "byte-level BPE (OLMo)"}
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

INTRO = """\
Which encoder families sesame is tested with, and what each supports. Every cell is a test in
`tests/families/` on a tiny random model of the family with a tokenizer of its real kind, trained
offline: a GLUE sentence-pair run, a SQuAD v2 run and an NER run per family, trained a few steps,
evaluated and used for prediction (between them reading the last layer, the second-to-last and a
scalar mix, and training frozen, full and top_k), then drop-layers, `pooling=cls` / `pooler` and
both exports (of the NER run; ONNX with `--exporter torchscript`). "no" is the error sesame raises,
which names the family, the setting and the fix. Generated from `docs/results/encoder_families.json`
by `python -m tests.families.table`; not edited by hand."""


def render(results: dict) -> str:
    """The markdown table (with numbered notes for every qualified or refused cell) of ``results``."""
    features = results["features"]
    notes: list[str] = []

    def html(text: str) -> str:  # XLNet's <cls> is not a tag
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def cell(text: str) -> str:
        if text == "yes":
            return "yes"
        word, detail = ("no", text[len("no: "):]) if text.startswith("no: ") else ("yes", text[len("yes (") : -1])
        detail = html(detail)
        if detail not in notes:
            notes.append(detail)
        return word + str(notes.index(detail) + 1).translate(_SUPERSCRIPTS)

    lines = ["| family | tokenizer | " + " | ".join(f["title"] for f in features) + " |",
             "|---|---|" + "---|" * len(features)]
    for family in results["families"]:
        row = [family["name"], TOKENIZERS.get(family["tokenizer"], family["tokenizer"])]
        row += [cell(family["cells"][f["key"]]) for f in features]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"{str(i).translate(_SUPERSCRIPTS)} {note}" + ("  " if i < len(notes) else "")
              for i, note in enumerate(notes, 1)]
    return "\n".join([INTRO, "", *lines])


def readme_with_table(readme: str, results: dict) -> str:
    """``readme`` (PAGE's text) with the section between the markers replaced (or a new "Encoder families"
    section appended when it has none)."""
    return with_section(readme, BEGIN, END, render(results), "Encoder families")


def table_in(readme: str) -> str | None:
    return section_in(readme, BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", "--readme", type=Path, default=PAGE, help="the page holding the table (default %(default)s)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page's table is not the rendered one")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text(encoding="utf-8"))
    readme = args.page.read_text(encoding="utf-8")
    if args.check:
        same = table_in(readme) == render(results)
        print(f"{args.page}: table is up to date" if same else f"{args.page}: table differs from {args.results}: "
              "run python -m tests.families.table")
        return 0 if same else 1
    args.page.write_text(readme_with_table(readme, results), encoding="utf-8")
    print(f"wrote the table of {args.results} into {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
