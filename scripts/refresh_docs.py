#!/usr/bin/python3
"""Reruns the commands shown in the docs and compares (or rewrites) their output.

A shown run is an indented block whose lines start with `$ ` (a command, continued
by a trailing backslash) followed by the lines it printed; `...` marks lines left
out. Each command runs, in order, in a scratch directory that links to everything
in the repository but `runs/` (and a copy of `docs/`, so the plots shown there stay
as they are), so `--out runs/x` starts empty and the paths printed
read as they do in the docs. Then each shown line is matched with a line of the new
output of the same shape (the same text once numbers are masked), the one sharing
the most words with it, after the previous match:

    same      the line is printed as shown (a shown line ending in ` ...` shows
              only the first words of its printed line: a wide table's columns)
    changed   the same line with other numbers (a loss, a time, a count)
    missing   no printed line has its shape: the docs show output that the
              code no longer prints

    scripts/refresh_docs.py                   # README.md and the docs pages with runs; exit 1 on a missing line
    scripts/refresh_docs.py --write           # rewrite the changed lines in place
    scripts/refresh_docs.py docs/cli/train.md # other files

Numbers that depend on the machine (tok/s, wall time) change on every run; the rest
(losses, accuracies, parameter and case counts) come out the same on the same build.
The time each command took is printed too, for the prose around the blocks.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"[-+]?\d+(?:[.:]\d+)*(?:e[-+]?\d+)?")


def shape(line):
    return " ".join(NUMBER.sub("#", line).split())


def shown_runs(lines):
    """Yields (command, [(line index, text)]) for each `$ ` command of each block."""
    i = 0
    while i < len(lines):
        if not lines[i].startswith("    $ "):
            i += 1
            continue
        command = lines[i][6:]
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        i += 1
        output = []
        while i < len(lines) and not lines[i].startswith("    $ "):
            if lines[i].startswith("    "):
                output.append((i, lines[i][4:]))
            elif lines[i].strip() == "" and i + 1 < len(lines) and lines[i + 1].startswith("    ") \
                    and not lines[i + 1].startswith("    $ "):
                pass  # a blank line inside the block: the output goes on after it
            else:
                break
            i += 1
        yield command.strip(), output


def sandbox():
    """A scratch directory that reads like the repository: links to its entries, but
    no runs/, and a copy of docs/, so that a command writing a plot into docs/
    leaves the repository's own as they are."""
    d = Path(tempfile.mkdtemp(prefix="headroom-docs-"))
    for entry in ROOT.iterdir():
        if entry.name == "docs":
            shutil.copytree(entry, d / "docs")
        elif entry.name not in ("runs", ".git"):
            (d / entry.name).symlink_to(entry)
    return d


def cut(line, words):
    """The line up to the end of its first `words` words, with its own spacing."""
    ends = [m.end() for m in re.finditer(r"\S+", line)]
    return line if words >= len(ends) else line[:ends[words - 1]]


def as_shown(text, printed):
    """A printed line in the form of a shown one: a shown line that ends in ' ...'
    shows only its first words (a wide table's first columns)."""
    if text.endswith(" ...") and text.strip() != "...":
        return cut(printed, len(text[:-4].split())) + " ..."
    return printed


def match(shown, printed):
    """For each shown line, the index of its printed line (None: missing, or '...')."""
    found, cursor = [], 0
    for text in shown:
        if text.strip() == "...":
            found.append(None)
            continue
        words = text.split()
        best, best_score = None, -1
        for j in range(cursor, len(printed)):
            if shape(as_shown(text, printed[j])) != shape(text):
                continue
            score = sum(a == b for a, b in zip(words, printed[j].split()))
            if score > best_score:
                best, best_score = j, score
        found.append(best)
        if best is not None:
            cursor = best + 1
    return found


def refresh(path, write):
    lines = path.read_text().split("\n")
    cwd = sandbox()
    missing = 0
    print(f"{path} (in {cwd})")
    for command, output in shown_runs(lines):
        if re.search(r"<[^>]+>", command.split("#")[0]):
            print(f"$ {command}\n  skipped: a placeholder, not a command")
            continue
        start = time.monotonic()
        run = subprocess.run(["bash", "-c", command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=dict(os.environ, TERM="dumb"))
        took = time.monotonic() - start
        printed = run.stdout.rstrip("\n").split("\n")
        print(f"$ {command}\n  exit {run.returncode}, {took:.1f} s")
        for (index, text), j in zip(output, match([t for _, t in output], printed)):
            if text.strip() == "...":
                continue
            if j is None:
                missing += 1
                words = set(text.split())
                nearest = max(printed, key=lambda line: len(words & set(line.split())))
                print(f"  missing: {text}\n  nearest: {nearest}")
            elif as_shown(text, printed[j]) != text:
                new = as_shown(text, printed[j])
                print(f"  changed: {text}\n       to: {new}")
                if write:
                    lines[index] = "    " + new
    shutil.rmtree(cwd)
    if write:
        path.write_text("\n".join(lines))
    return missing


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    pages = [p for folder in ("cli", "tutorials") for p in sorted((ROOT / "docs" / folder).glob("*.md"))]
    default = ["README.md", "docs/decoding.md"] + [str(p.relative_to(ROOT)) for p in pages]
    parser.add_argument("files", nargs="*", default=default,
                        help="Markdown files (default README.md, docs/decoding.md, docs/cli/*.md, docs/tutorials/*.md)")
    parser.add_argument("--write", action="store_true", help="rewrite the changed lines in place")
    args = parser.parse_args()
    if not (ROOT / "build" / "headroom").exists():
        sys.exit("refresh_docs: build/headroom is missing; build first (cmake --build build -j2)")
    missing = sum(refresh((ROOT / f).resolve(), args.write) for f in args.files)
    if missing:
        print(f"{missing} shown lines are no longer printed: edit them by hand", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
