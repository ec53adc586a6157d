#!/usr/bin/env bash
# The layer rule of docs/design.md, checked on the sources: a folder includes only
# headers of the folders below it. Prints each include that breaks the rule and
# exits 1; exits 0 when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [autograd]=""
  [nn]="autograd"
  [data]="autograd"
  [optim]="autograd"
  [plot]="autograd"
  [train]="autograd nn data optim plot"
  [interp]="autograd nn data optim train plot"
  [ablate]="autograd nn data optim train plot"
  [claims]="autograd nn data optim train plot interp ablate"
  [cli]="autograd nn data optim train plot interp ablate claims"
)

bad=0
checked=0
for folder in "${!allowed[@]}"; do
  for file in "$folder"/*.hpp "$folder"/*.cpp; do
    [ -e "$file" ] || continue
    while IFS= read -r target; do
      checked=$((checked + 1))
      [ "$target" = "$folder" ] && continue
      if [ -d "$target" ] && [[ " ${allowed[$folder]} " != *" $target "* ]]; then
        echo "layer rule: $file includes $target/ (may include: ${allowed[$folder]:-none})"
        bad=1
      fi
    done < <(sed -n 's|^#include "\([a-z_]*\)/.*"|\1|p' "$file")
  done
done
if [ "$checked" -lt 100 ]; then
  echo "layer rule: only $checked includes found; is this the source tree?"
  exit 1
fi
[ "$bad" -eq 0 ] && echo "layer rule: $checked includes, all pointing down"
exit "$bad"
