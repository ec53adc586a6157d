#!/usr/bin/env bash
# How long a clean clone takes to build, and which translation units the time goes to.
#
#   bench/build_time.sh [COMMIT...]     (default: HEAD; several commits are built in turn)
#
# For each commit: a clean clone in a scratch directory, configured as the README
# does (plus -DHEADROOM_CCACHE=OFF: no cache), then `cmake --build -j2 --target headroom`
# (the README's first command) and `cmake --build -j2` (everything else), each timed
# on the wall clock. A compiler launcher records every compile's CPU time (user + sys,
# which another process on the machine disturbs far less than the wall time), and the
# script prints the totals by folder and the 15 most expensive units. Then it touches
# one op (autograd/ops_nn.cpp) and times the rebuild of everything. Run it on an idle
# machine; the wall times are the machine's, the CPU sums compare across runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
commits=("$@")
[ ${#commits[@]} -eq 0 ] && commits=(HEAD)
scratch="$(mktemp -d /tmp/headroom-build-time.XXXXXX)"
trap 'rm -rf "$scratch"' EXIT

cat >"$scratch/launcher.sh" <<'LAUNCHER'
#!/usr/bin/env bash
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
TIMEFORMAT='%U %S'
{ time "$@" 2>&3; } 3>&2 2>"$TIMELOG.$$"
rc=$?
read -r u s <"$TIMELOG.$$"; rm -f "$TIMELOG.$$"
echo "$u $s $PWD/$out" >>"$TIMELOG"
exit $rc
LAUNCHER
chmod +x "$scratch/launcher.sh"

report() {  # report LOG: CPU seconds by folder and the top units
  /usr/bin/python3 - "$1" <<'PY'
import collections, sys
rows = []
for line in open(sys.argv[1]):
    u, s, path = line.split(maxsplit=2)
    rows.append((float(u) + float(s), path.strip()))
by = collections.Counter()
for cpu, path in rows:
    rel = path.split("/build/", 1)[-1]
    by[rel.split("/", 1)[0] if "/" in rel else "(top)"] += cpu
print(f"  compile CPU {sum(c for c, _ in rows):.0f} s over {len(rows)} units; by folder: " +
      ", ".join(f"{k} {v:.0f}" for k, v in by.most_common()))
for cpu, path in sorted(rows, reverse=True)[:15]:
    print(f"  {cpu:6.1f} s  {path.split('/build/', 1)[-1]}")
PY
}

for commit in "${commits[@]}"; do
  dir="$scratch/$commit"
  git clone -q "$root" "$dir"
  git -C "$dir" checkout -q "$commit"
  export TIMELOG="$scratch/$commit.log"
  : >"$TIMELOG"
  echo "== $commit ($(git -C "$dir" log -1 --format='%h %s' | cut -c1-70)) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  t0=$(date +%s.%N)
  cmake -S "$dir" -B "$dir/build" -DHEADROOM_CCACHE=OFF -DCMAKE_CXX_COMPILER_LAUNCHER="$scratch/launcher.sh" >/dev/null 2>&1 ||
    cmake -S "$dir" -B "$dir/build" -DCMAKE_CXX_COMPILER_LAUNCHER="$scratch/launcher.sh" >/dev/null
  t1=$(date +%s.%N)
  cmake --build "$dir/build" -j2 --target headroom >/dev/null
  t2=$(date +%s.%N)
  cmake --build "$dir/build" -j2 >/dev/null
  t3=$(date +%s.%N)
  printf '  configure %.0f s, headroom %.0f s, the rest %.0f s: everything %.0f s\n' \
    "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)" "$(echo "$t3 - $t2" | bc)" "$(echo "$t3 - $t0" | bc)"
  report "$TIMELOG"
  touch "$dir/autograd/ops_nn.cpp"
  t4=$(date +%s.%N)
  cmake --build "$dir/build" -j2 >/dev/null
  t5=$(date +%s.%N)
  printf '  after touching autograd/ops_nn.cpp: everything rebuilt in %.0f s\n' "$(echo "$t5 - $t4" | bc)"
done
