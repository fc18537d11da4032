#!/usr/bin/env python3
"""Medians of repeated bench tables: what docs/benchmarks.md publishes (SPEC §7).

    scripts/bench/medians.py OUTPUT.md [MORE.md …]

Reads the markdown the `load` bench prints (scripts/bench/load.sh, run with ROUNDS ≥ 3):
sections headed `### …`, each a table whose first column names the row (the offered rate
of a sweep; a burst has one row). The same section and row seen in several runs are one
measurement repeated: every numeric cell is printed as `median (min–max)` over the runs,
with the number of runs per row. A cell whose text is not a number (`–`) stays as it is;
the statement mix in parentheses is dropped (it is one run's).
"""

import re
import statistics
import sys

NUMBER = re.compile(r"^-?[0-9][0-9,]*(\.[0-9]+)?")


def tables(paths):
    """{section title: (header, {row key: [[cells of one run], …]})}, in first-seen order."""
    out = {}
    for path in paths:
        title = None
        for line in open(path, encoding="utf-8"):
            line = line.rstrip("\n")
            if line.startswith("### "):
                title = line[4:].strip()
                continue
            if title is None or not line.startswith("|") or line.startswith("|---"):
                continue
            cells = [c.strip() for c in line.strip("|").split("|")]
            header, rows = out.setdefault(title, (None, {}))
            if header is None:
                out[title] = (cells, rows)
                continue
            if cells == header:
                continue
            rows.setdefault(cells[0], []).append(cells)
    return out


def number(cell):
    m = NUMBER.match(cell.replace(" ", ""))
    return float(m.group(0).replace(",", "")) if m else None


def fmt(x):
    return f"{x:,.1f}".rstrip("0").rstrip(".") if x != int(x) else f"{int(x):,}"


def summarise(cells_per_run, column):
    xs = [number(run[column]) for run in cells_per_run if column < len(run)]
    if not xs or any(x is None for x in xs):
        return cells_per_run[0][column] if column < len(cells_per_run[0]) else ""
    unit = " ms" if cells_per_run[0][column].endswith(" ms") else ""
    med = statistics.median(xs)
    if min(xs) == max(xs):
        return f"{fmt(med)}{unit}"
    return f"**{fmt(med)}**{unit} ({fmt(min(xs))}–{fmt(max(xs))})"


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for title, (header, rows) in tables(paths).items():
        print(f"\n### {title}\n")
        print("| runs | " + " | ".join(header) + " |")
        print("|---" * (len(header) + 1) + "|")
        for key, runs in rows.items():
            cells = [key] + [summarise(runs, i) for i in range(1, len(header))]
            print(f"| {len(runs)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
