#!/usr/bin/env python3
"""Checks that the teaching pages can be read in one sitting (what make test runs).

Every step page, docs/NN_name.md:
  - at most 250 lines, prose wrapped at 100 characters (code blocks, table rows and lines
    that are one unbroken token, a long link, are not prose);
  - at least one figure drawn by figures/ (an image whose path is under figures/, present);
  - the sections a reader works through: "## Predict before you run" with its answer folded
    in <details>, "## Change this and watch" with a command in a code block, "## Result";
  - a link to its measurement page, docs/measurements/NN_name.md, which exists.
Every concept page, docs/concepts/*.md: the line budget, the wrap and a folded answer.
No teaching or concept page names a run or an issue by number ("run 12", "issue 3", "#3"):
those belong on the measurement pages and in results/. Every relative link of README.md and of
the pages under docs/ leads to a file that exists.

Prints one PASS or FAIL line per page and rule.

usage: python3 tools/check_pages.py        (from the repository root)
"""
import pathlib
import re
import sys

MAX_LINES = 250
MAX_WIDTH = 100
# "run 12" or "issue 3" naming a record (a count such as "run 3 rounds" or "issue 4 copies" is
# followed by a word), or "#3"
NUMBERED = re.compile(r"\b(?:[Rr]uns?|[Ii]ssue) [0-9]+\b(?!\.[0-9])(?! [a-z])|(?<![\w&/])#[0-9]+\b")
LINK = re.compile(r"\]\(([^)\s#]+)[^)\s]*\)")
FIGURE = re.compile(r"!\[.*\]\(((?:\.\./)?figures/[^)\s]+)\)")


def prose_lines(text):
    """(number, line) of the lines outside code blocks that are prose."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith(("|", "![")):
            continue
        yield number, line


def section(text, heading):
    """The text under '## heading' up to the next '## ', or None."""
    match = re.search(r"^## " + re.escape(heading) + r"[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else None


def check(path, step_page):
    text = path.read_text()
    lines = text.splitlines()
    failures = []
    if len(lines) > MAX_LINES:
        failures.append(f"{len(lines)} lines (allowed: at most {MAX_LINES})")
    wide = [n for n, line in prose_lines(text) if len(line) > MAX_WIDTH and " " in line.strip()]
    if wide:
        failures.append(f"prose lines wider than {MAX_WIDTH} characters: {', '.join(map(str, wide[:8]))}")
    numbered = [f"{n} ('{m.group(0)}')" for n, line in prose_lines(text) for m in [NUMBERED.search(line)] if m]
    if numbered:
        failures.append(f"names a run or an issue by number at line {', '.join(numbered[:5])}")
    if "<details>" not in text:
        failures.append("no folded answer (<details>)")
    if step_page:
        figures = FIGURE.findall(text)
        if not figures:
            failures.append("no figure from figures/ (![...](figures/NAME.svg))")
        missing = [f for f in figures if not (path.parent / f).exists()]
        if missing:
            failures.append(f"figure not found: {', '.join(missing)}")
        predict = section(text, "Predict before you run")
        if predict is None or "<details>" not in predict:
            failures.append("no '## Predict before you run' section with its answer in <details>")
        experiment = section(text, "Change this and watch")
        if experiment is None or "```" not in experiment:
            failures.append("no '## Change this and watch' section with a command in a code block")
        if section(text, "Result") is None:
            failures.append("no '## Result' section")
        measurements = path.parent / "measurements" / path.name
        if not measurements.exists():
            failures.append(f"no measurement page {measurements}")
        elif f"measurements/{path.name}" not in text:
            failures.append(f"no link to measurements/{path.name}")
    return failures


def main():
    if len(sys.argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    docs = pathlib.Path("docs")
    pages = [(p, True) for p in sorted(docs.glob("[0-9][0-9]_*.md"))]
    pages += [(p, False) for p in sorted((docs / "concepts").glob("*.md"))]
    if not pages:
        print("FAIL docs/: no step or concept page found (run from the repository root)")
        return 1
    failed = 0
    for path in [pathlib.Path("README.md")] + sorted(docs.rglob("*.md")):
        broken = [t for t in LINK.findall(path.read_text())
                  if not t.startswith(("http:", "https:", "mailto:")) and not (path.parent / t).exists()]
        if broken:
            failed += 1
            print(f"FAIL links of {path}: no such file: {', '.join(broken[:5])}")
        else:
            print(f"PASS links of {path}: every relative link leads to a file")
    for path, step_page in pages:
        failures = check(path, step_page)
        kind = "step page" if step_page else "concept page"
        if failures:
            failed += 1
            for failure in failures:
                print(f"FAIL {kind} {path}: {failure}")
        else:
            print(f"PASS {kind} {path}: one sitting (lines, wrap, figure, question, experiment, no run or issue numbers)"
                  if step_page else f"PASS {kind} {path}: one sitting (lines, wrap, question, no run or issue numbers)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
