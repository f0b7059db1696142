#!/usr/bin/env python3
"""Checks that the teaching pages can be read in one sitting (what make test runs).

Every step page, docs/NN_name.md:
  - at most 1,300 words outside code blocks (a lesson read in about ten minutes; table rows and
    headings count);
  - at most 250 lines, prose wrapped at 100 characters (code blocks, table rows and lines
    that are one unbroken token, a long link, are not prose);
  - at least one figure drawn by figures/ (an image whose path is under figures/, present);
  - the sections a reader works through: "## Predict before you run" with its answer folded
    in <details>, "## Change this and watch" with a command in a code block, "## Result";
  - a link to its measurement page, docs/measurements/NN_name.md, which exists.
Every concept page, docs/concepts/*.md: at most 1,600 words outside code blocks, the line
budget, the wrap and a folded answer. The measurement pages, docs/measurements/*.md: at most
25,000 words outside code blocks together. README.md: at most 150 lines and 1,500 words.
No page under docs/ names a run or an issue by number ("run 12", "issue 3", "#3"): a page cites
the file under results/ that holds the data, and the history lives in git. Every relative link
of README.md and of the pages under docs/ leads to a file that exists, and a link to an entry of
docs/glossary.md to an entry it has (a "### term" heading, by its GitHub anchor).

Prints one PASS or FAIL line per page and rule.

usage: python3 tools/check_pages.py        (from the repository root)
"""
import pathlib
import re
import sys

MAX_LINES = 250
MAX_WIDTH = 100
MAX_WORDS = {"step page": 1300, "concept page": 1600}
MAX_MEASUREMENT_WORDS = 25000
MAX_README_LINES, MAX_README_WORDS = 150, 1500
# "run 12" or "issue 3" naming a record (a count such as "run 3 rounds" or "issue 4 copies" is
# followed by a word), or "#3"
NUMBERED = re.compile(r"\b(?:[Rr]uns?|[Ii]ssue) [0-9]+\b(?!\.[0-9])(?! [a-z])|(?<![\w&/])#[0-9]+\b")
LINK = re.compile(r"\]\(([^)\s#]+)[^)\s]*\)")
GLOSSARY_LINK = re.compile(r"\]\((?:\.\./)*glossary\.md#([^)\s]+)\)")
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


def words(text):
    """The words outside fenced code blocks (prose, table rows and headings)."""
    fenced, n = False, 0
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            n += len(line.split())
    return n


def anchor(heading):
    """GitHub's anchor of a heading: lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def section(text, heading):
    """The text under '## heading' up to the next '## ', or None."""
    match = re.search(r"^## " + re.escape(heading) + r"[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else None


def check(path, step_page):
    text = path.read_text()
    lines = text.splitlines()
    failures = []
    kind = "step page" if step_page else "concept page"
    if words(text) > MAX_WORDS[kind]:
        failures.append(f"{words(text)} words outside code blocks (allowed: at most {MAX_WORDS[kind]})")
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
    glossary = docs / "glossary.md"
    entries = {anchor(h) for h in re.findall(r"^### (.+)$", glossary.read_text(), re.M)} if glossary.exists() else set()
    for path in [pathlib.Path("README.md")] + sorted(docs.rglob("*.md")):
        text = path.read_text()
        broken = [f"glossary.md#{a}" for a in GLOSSARY_LINK.findall(text) if a not in entries]
        broken += [t for t in LINK.findall(text)
                   if not t.startswith(("http:", "https:", "mailto:")) and not (path.parent / t).exists()]
        if broken:
            failed += 1
            print(f"FAIL links of {path}: no such file or glossary entry: {', '.join(broken[:5])}")
        else:
            print(f"PASS links of {path}: every relative link leads to a file (and glossary entry)")
    readme = pathlib.Path("README.md").read_text()
    n_lines, n_words = len(readme.splitlines()), words(readme)
    if n_lines > MAX_README_LINES or n_words > MAX_README_WORDS:
        failed += 1
        print(f"FAIL README.md: {n_lines} lines and {n_words} words (allowed: at most {MAX_README_LINES} and {MAX_README_WORDS})")
    else:
        print(f"PASS README.md read in a minute: {n_lines} lines, {n_words} words")
    measurements = sorted((docs / "measurements").glob("*.md"))
    total = sum(words(p.read_text()) for p in measurements)
    numbered = [f"{p}:{n} ('{m.group(0)}')" for p in measurements + sorted(docs.glob("*.md"))
                for n, line in prose_lines(p.read_text()) for m in [NUMBERED.search(line)] if m]
    if total > MAX_MEASUREMENT_WORDS or numbered:
        failed += 1
        if total > MAX_MEASUREMENT_WORDS:
            print(f"FAIL docs/measurements/: {total} words together (allowed: at most {MAX_MEASUREMENT_WORDS})")
        if numbered:
            print(f"FAIL docs/: a run or an issue named by number at {', '.join(numbered[:5])}")
    else:
        print(f"PASS docs/measurements/: {total} words together, no page names a run or an issue by number")
    for path, step_page in pages:
        failures = check(path, step_page)
        kind = "step page" if step_page else "concept page"
        if failures:
            failed += 1
            for failure in failures:
                print(f"FAIL {kind} {path}: {failure}")
        else:
            print(f"PASS {kind} {path}: one sitting (words, lines, wrap, figure, question, experiment, no run or issue numbers)"
                  if step_page else f"PASS {kind} {path}: one sitting (words, lines, wrap, question, no run or issue numbers)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
