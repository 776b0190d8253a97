"""Small table helpers: Markdown and CSV text, mean ± sample standard deviation (ddof = 1, SPEC §4). A number that a
run does not have (MTL's BWT and FWT, an FWT without a0) prints as `–` (NO_VALUE) everywhere."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence

NO_VALUE = "–"  # U+2013: no number (None)


def markdown(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def csv_text(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample std (None for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def number_text(value: float | None) -> str:
    """`value` with two decimals; `–` for None (a number the run does not have)."""
    return NO_VALUE if value is None else f"{value:.2f}"


def mean_std_text(mean: float | None, std: float | None) -> str:
    """`mean ± std`; the mean alone without a std (one value); `–` without a mean (no values)."""
    if mean is None:
        return NO_VALUE
    return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"
