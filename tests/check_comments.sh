#!/usr/bin/env bash
# Comments say why, not how fast one run was (docs/style.md #10): no source comment
# quotes a benchmark figure. The numbers of a run, its machine and its date belong in
# bench/README.md and the commit log. Reads the comments of every tracked source
# outside tests/ (C++ // and /* */ comments; CMake, shell and Python # comments; string
# literals and code are skipped, so a help text may say "ms") and flags GFLOP/s, a
# time in ms, us or ns, "N x faster" or "slower", "session N", "throwaway", a commit
# hash and a dated run. Prints each offending line as file:line: text and exits 1;
# exits 0 when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

python=/usr/bin/python3
[ -x "$python" ] || python=python3
files=$(git ls-files 2>/dev/null || find . -type f -not -path './build*' -not -path './.git/*' | sed 's|^\./||')
# shellcheck disable=SC2086 # one path a word: the tree has no spaces in its names
"$python" - $files <<'EOF'
import io, re, sys, tokenize

# What a measurement looks like in prose. A commit hash is 7 to 40 lower-case hex
# digits with at least one digit and one letter; "1e1000"-style numbers are not one,
# and a hex constant (0x...) is not matched because it has no word boundary there.
RULES = [
    ("GFLOP/s", re.compile(r"gflop/s", re.I)),
    ("a time in ms", re.compile(r"[0-9] ?ms\b")),
    ("a time in us or ns", re.compile(r"[0-9] ?(us|\u00b5s|ns)\b")),
    ("x faster or slower", re.compile(r"[0-9.]+ ?([x\u00d7]| times) (faster|slower)", re.I)),
    ("a session", re.compile(r"\bsession [0-9]", re.I)),
    ("a throwaway run", re.compile(r"\bthrowaway\b", re.I)),
    ("a date", re.compile(r"\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b")),
]
HASH = re.compile(r"\b[0-9a-f]{7,40}\b")

def figures(comment):
    """The names of the rules the comment text breaks."""
    found = [name for name, rule in RULES if rule.search(comment)]
    if any(is_hash(w) for w in HASH.findall(comment)):
        found.append("a commit hash")
    return found

def is_hash(word):
    return (re.search(r"[0-9]", word) and re.search(r"[a-f]", word)
            and not re.fullmatch(r"[0-9]+e[0-9]+", word))

def cpp_comments(text):
    """(line, comment text) for each line of a C++ comment; strings and chars skipped."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((line, text[i + 2:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            for k, part in enumerate(text[i + 2:end].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, end)
            i = end + 2
        elif c == "R" and text.startswith("R\"", i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r"R\"([^(\s]*)\(", text[i:])
            if not m:
                i += 1
                continue
            close = ")" + m.group(1) + "\""
            end = text.find(close, i + m.end())
            end = n if end < 0 else end + len(close)
            line += text.count("\n", i, end)
            i = end
        elif c == "\"" or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            # A string or character literal (a digit separator, 1'000, is not one).
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = j + 1 if j < n and text[j] == c else j
            line += text.count("\n", i, end)
            i = end
        else:
            i += 1
    return out

def hash_comments_python(text):
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string[1:]))
    except (tokenize.TokenError, SyntaxError):
        return hash_comments(text)
    return out

def hash_comments(text, quotes="\"'"):
    """# comments of shell and CMake: a # at the start of a word, outside quotes (and,
    in shell, outside here-documents)."""
    out, quote, heredoc = [], None, None
    for number, row in enumerate(text.split("\n"), 1):
        if heredoc:
            if row.lstrip("\t") == heredoc:
                heredoc = None
            continue
        escaped, code = False, row
        for j, c in enumerate(row):
            if escaped:
                escaped = False
            elif c == "\\" and quote != "'":
                escaped = True
            elif quote:
                if c == quote:
                    quote = None
            elif c in quotes:
                quote = c
            elif c == "#" and (j == 0 or row[j - 1] in " \t;(") and not (number == 1 and row.startswith("#!")):
                out.append((number, row[j + 1:]))
                code = row[:j]
                break
        here = re.search(r"(?<!<)<<-?\s*(['\"]?)([A-Za-z_]\w*)\1", code) if "'" in quotes else None
        if here and quote is None:
            heredoc = here.group(2)
    return out

def cmake_comments(text):
    return hash_comments(text, quotes='"')

def kind(path):
    name = path.rsplit("/", 1)[-1]
    if re.search(r"\.(cpp|hpp|h|cc|cxx|hxx|c|cu)$", name):
        return cpp_comments
    if name == "CMakeLists.txt" or re.search(r"\.cmake(\.in)?$", name):
        return cmake_comments
    if name.endswith(".sh"):
        return hash_comments
    if name.endswith(".py"):
        return hash_comments_python
    return None

bad = checked = 0
for path in sys.argv[1:]:
    if path.startswith(("tests/", "docs/")) or path.endswith(".md"):
        continue
    reader = kind(path)
    if reader is None:
        try:
            with open(path, "rb") as f:
                first = f.readline()
        except OSError:
            continue
        if re.match(rb"#!.*\bpython", first):
            reader = hash_comments_python
        elif re.match(rb"#!.*\b(ba)?sh\b", first):
            reader = hash_comments
        else:
            continue
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        continue
    checked += 1
    lines = text.split("\n")
    comments = {}  # line number -> its comment text (two comments on a line joined)
    for number, comment in reader(text):
        comments[number] = (comments.get(number, "") + " " + comment).strip(" \t*/#")
    for number, comment in sorted(comments.items()):
        found = figures(comment)
        # A figure broken over two comment lines ("15.6" / "ms") belongs to the first.
        after = comments.get(number + 1)
        if after is not None:
            found += [f for f in figures(comment + " " + after) if f not in found and f not in figures(after)]
        if found:
            bad += 1
            print(f"{path}:{number}: {lines[number - 1].strip()}    [{', '.join(found)}]")
if checked < 100:
    print(f"comments: only {checked} sources found; is this the source tree?")
    sys.exit(1)
if bad:
    lines_quote = "comment line quotes" if bad == 1 else "comment lines quote"
    print(f"comments: {bad} {lines_quote} a benchmark figure; say why in the comment, "
          "and put the numbers in bench/README.md")
    sys.exit(1)
print(f"comments: {checked} sources, no benchmark figures in their comments")
EOF
