"""The encoder-family table of docs/encoders.md is what the committed results render, and the committed results
are exactly the cells the matrix tests assert (``cells.DECLARED``)."""

from __future__ import annotations

import json

from tests.families import cells
from tests.families.table import PAGE, RESULTS, readme_with_table, render, table_in


def committed() -> dict:
    return json.loads(RESULTS.read_text(encoding="utf-8"))


def test_the_committed_results_hold_every_declared_cell_and_nothing_else():
    """Each cell of the results file is asserted by a test of test_matrix.py (its declaration), so a
    result that no test backs, or a declaration changed without re-recording, fails here."""
    assert committed() == cells.results(cells.DECLARED)


def test_the_readme_table_is_rendered_from_the_committed_results():
    readme = PAGE.read_text(encoding="utf-8")
    assert table_in(readme) == render(committed()), "run: python -m tests.families.table"
    assert readme_with_table(readme, committed()) == readme


def test_the_table_numbers_each_reason_once():
    results = cells.results({name: {key: "yes" for key in cells.FEATURE_KEYS} for name in cells.DECLARED})
    results["families"][0]["cells"]["pooler"] = "no: it has none"
    results["families"][1]["cells"]["pooler"] = "no: it has none"
    results["families"][2]["cells"]["cls"] = "yes (the last token)"
    table = render(results)
    assert table.count("no¹") == 2 and "yes²" in table
    assert "¹ it has none" in table and "² the last token" in table
