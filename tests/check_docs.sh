#!/usr/bin/env bash
# The repository carries its own documentation: no file cites a document outside it
# (the old DESIGN.md and STYLE.md, or ../shared/), and every relative link of every
# Markdown file resolves to a file or folder of the tree. Prints each problem and
# exits 1; exits 0 when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

bad=0
files=$(git ls-files 2>/dev/null || find . -type f -not -path './build*' -not -path './.git/*')
cited=$(echo "$files" | grep -v '^tests/check_docs.sh$' | xargs grep -nE '\b(DESIGN|STYLE)\.md|\.\./shared/' 2>/dev/null || true)
if [ -n "$cited" ]; then
  echo "docs: cites a file outside the repository:"
  echo "$cited"
  bad=1
fi

links=0
for md in $(echo "$files" | grep '\.md$'); do
  dir=$(dirname "$md")
  # [text](target) with a relative target; anchors and queries are cut off.
  while IFS= read -r target; do
    links=$((links + 1))
    path="${target%%#*}"
    [ -z "$path" ] && continue
    if [ ! -e "$dir/$path" ]; then
      echo "docs: $md links to $target, which does not exist"
      bad=1
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$md" | sed 's/^](//; s/)$//' | grep -vE '^(https?:|mailto:)' || true)
done
[ "$bad" -eq 0 ] && echo "docs: no outside citations; $links relative links resolve"
exit "$bad"
