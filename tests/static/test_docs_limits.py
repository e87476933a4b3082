"""The docs stay readable (issue: "docs became a lab notebook"): README within 320 lines with one current
benchmark table, docs/benchmarks.md within 300, and no run's clock time in either."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.static

ROOT = Path(__file__).resolve().parents[2]


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_readme_fits_in_320_lines() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 320, f"README.md has {lines} lines; move detail to docs/"


def test_the_readme_has_one_benchmark_table_of_at_most_ten_rows() -> None:
    bench = section((ROOT / "README.md").read_text(), "Benchmark")
    rows = [line for line in bench.splitlines() if line.startswith("|")]
    separators = [line for line in rows if re.fullmatch(r"\|(\s*-+\s*\|)+", line)]
    assert len(separators) == 1, "one table in the README's benchmark section"
    assert 2 <= len(rows) - 2 <= 10, f"{len(rows) - 2} result rows"
    assert "docs/benchmarks.md" in bench


def test_the_benchmark_doc_fits_in_300_lines() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text().count("\n")
    assert lines <= 300, f"docs/benchmarks.md has {lines} lines; raw runs belong in the files the bench writes"


@pytest.mark.parametrize("doc", ["README.md", "docs/benchmarks.md", "CHANGELOG.md"])
def test_no_doc_dates_a_run_to_the_minute(doc: str) -> None:
    times = re.findall(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d\b", (ROOT / doc).read_text())
    assert not times, f"{doc} carries run times: {times}"
