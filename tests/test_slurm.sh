#!/usr/bin/env bash
# A sweep on a real Slurm: a one-node cluster of our own (tests/slurm/cluster.sh), the
# sweep's runs as a job array of 4 tasks into one shared directory, a merge job after
# the array, and the merged results.csv against the same sweep in one process.
#
#   tests/test_slurm.sh HEADROOM_BIN
#
# Exit status: 0 all checks pass; 1 a check fails; 77 skipped (a Slurm or munge
# program is missing, or a daemon does not start, or not root), which is a failure
# under CI=true instead (tests/support.hpp's rule for missing prerequisites).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: test_slurm.sh HEADROOM_BIN" >&2; exit 2; }
headroom=$(realpath "$1")
[ -x "$headroom" ] || { echo "test_slurm: $1 is not an executable" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)

# A missing prerequisite skips the test, or fails it under CI=true.
unavailable() {
  echo "test_slurm: $1" >&2
  if [ "${CI:-}" = true ]; then
    echo "test_slurm: FAIL (CI=true: a missing prerequisite is a failure)" >&2
    exit 1
  fi
  echo "test_slurm: skipped" >&2
  exit 77
}

missing=()
for cmd in slurmctld slurmd munged mungekey munge unmunge sbatch squeue scontrol sinfo scancel; do
  command -v "$cmd" >/dev/null || missing+=("$cmd")
done
[ ${#missing[@]} -eq 0 ] || unavailable "not on PATH: ${missing[*]} (Debian: slurmctld slurmd slurm-client munge)"
[ "$(id -u)" -eq 0 ] || unavailable "needs root to run slurmd (SlurmUser=root), not uid $(id -u)"

state=$(mktemp -d "${TMPDIR:-/tmp}/headroom-slurm.XXXXXX")
chmod 0711 "$state"  # munged's socket is below it: every directory above must be o+x
# Always: stop the daemons, check that none of the cluster's processes is left (their
# command lines name the state dir; a zombie has none), remove the dir (kept, with
# the scripts, logs and daemon logs, under TEST_SLURM_KEEP=1).
cleanup() {
  local rc=$? left
  "$here/slurm/cluster.sh" stop "$state/cluster" || rc=1
  if left=$(pgrep -a -f -- "$state/cluster"); then
    echo "test_slurm: FAIL: still running after cluster.sh stop:" >&2
    echo "$left" >&2
    rc=1
  fi
  if [ "${TEST_SLURM_KEEP:-}" = 1 ]; then
    echo "test_slurm: kept $state (TEST_SLURM_KEEP=1)" >&2
  else
    rm -rf "$state"
  fi
  exit $rc
}
trap cleanup EXIT

failed=0
fail() { echo "test_slurm: FAIL: $*" >&2; failed=1; }

if ! "$here/slurm/cluster.sh" start "$state/cluster" >"$state/start.out"; then
  unavailable "the one-node cluster did not start (the reason is above)"
fi
export SLURM_CONF="$state/cluster/slurm.conf"
echo "test_slurm: cluster up: $(sinfo -h -N -o '%N %c CPUs %m MB %T')"

# 8 runs (2 head counts x 2 d_k x 2 seeds), well under a second each in a Release build.
sweep=(--task copy --seq-len 6 --vocab 8 --d-model 16 --layers 1 --steps 600 --eval-every 300
       --heads 1,2 --dk 4,8 --seeds 2)
tasks=4
dir="$state/sweep"
ref="$state/ref"

# --- the Slurm part: submit, wait for the merge job, check both jobs.
cd "$state"
slurm_start=$(date +%s.%N)
# `ablate --slurm --submit` plans the grid into DIR (sweep.json), writes
# DIR/slurm/array.sbatch (task K runs `--resume DIR --shard auto`: shard K/4) and
# DIR/slurm/merge.sbatch, and submits both, the merge after the array. --sbatch adds
# an #SBATCH line to both scripts; a time limit of 10 minutes is harmless here.
slurm_dir="$dir/slurm"
if ! "$headroom" ablate "${sweep[@]}" --out "$dir" --slurm --tasks "$tasks" --sbatch=--time=10 --submit \
     >"$state/submit.out" 2>&1; then
  cat "$state/submit.out" >&2
  echo "test_slurm: FAIL: headroom ablate --slurm --submit failed" >&2
  exit 1
fi
line_re='^slurm: submitted array job ([0-9]+) \(([0-9]+) tasks\) and merge job ([0-9]+) \(after the array\)$'
submitted=$(grep -E "$line_re" "$state/submit.out" || true)
if [ -z "$submitted" ]; then
  cat "$state/submit.out" >&2
  echo "test_slurm: FAIL: no line 'slurm: submitted array job ID (N tasks) and merge job ID2 (after the array)'" >&2
  exit 1
fi
[[ "$submitted" =~ $line_re ]]
array_id=${BASH_REMATCH[1]}
merge_id=${BASH_REMATCH[3]}
[ "${BASH_REMATCH[2]}" = "$tasks" ] || fail "submitted ${BASH_REMATCH[2]} array tasks, not $tasks"
echo "test_slurm: $submitted"
grep -qxF "#SBATCH --array=1-$tasks" "$slurm_dir/array.sbatch" \
  || fail "$slurm_dir/array.sbatch has no line '#SBATCH --array=1-$tasks'"
for script in array merge; do
  grep -qxF '#SBATCH --time=10' "$slurm_dir/$script.sbatch" \
    || fail "$slurm_dir/$script.sbatch has no line '#SBATCH --time=10' (from --sbatch=--time=10)"
done
# The merge job waits for the array: asked at once, before any task can have ended
# (the scheduler starts jobs a second apart at the soonest).
dependency=$(scontrol -o show job "$merge_id" | grep -oE 'Dependency=[^ ]*' || true)
[[ "$dependency" == "Dependency=afterany:${array_id}"* ]] \
  || fail "merge job $merge_id does not wait for array $array_id: ${dependency:-no Dependency field}"

# JobState and ExitCode of every job that `scontrol show job ID` lists (an array
# job lists one line per task): "ID STATE EXIT" lines.
job_states() {
  scontrol -o show job "$1" 2>/dev/null \
    | sed -n 's/^JobId=\([0-9]*\) .*JobState=\([A-Z_]*\) .*ExitCode=\([0-9:]*\).*/\1 \2 \3/p'
}
finished_state() {
  case "$1" in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) return 0 ;;
    *) return 1 ;;
  esac
}

deadline=$(( $(date +%s) + 300 ))
last_report=0
while :; do
  merge_state=$(job_states "$merge_id" | awk '{ print $2 }')
  finished_state "${merge_state:-PENDING}" && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    fail "the merge job $merge_id did not end within 300 s (state ${merge_state:-unknown})"
    squeue >&2 || true
    break
  fi
  if [ $(( $(date +%s) - last_report )) -ge 5 ]; then
    last_report=$(date +%s)
    echo "test_slurm: waiting: array tasks $(job_states "$array_id" | awk '{ print $2 }' | sort | uniq -c | awk '{ printf "%s%s %s", sep, $1, $2; sep = ", " }'); merge ${merge_state:-unknown}"
  fi
  sleep 0.5
done
slurm_wall=$(awk -v a="$slurm_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

show_logs() {
  local f
  for f in "$slurm_dir"/*.out; do
    [ -e "$f" ] || continue
    echo "--- $f:" >&2
    cat "$f" >&2
  done
}

# Every array task and the merge job: COMPLETED with exit code 0:0.
n_tasks=0
while read -r id st code; do
  n_tasks=$((n_tasks + 1))
  [ "$st" = COMPLETED ] && [ "$code" = 0:0 ] || fail "array task job $id ended $st with exit code $code"
done < <(job_states "$array_id")
[ "$n_tasks" -eq "$tasks" ] || fail "scontrol lists $n_tasks jobs of array $array_id, not $tasks"
read -r _ st code < <(job_states "$merge_id") || true
[ "${st:-}" = COMPLETED ] && [ "${code:-}" = 0:0 ] || fail "merge job $merge_id ended ${st:-unknown} with exit code ${code:-unknown}"

# The merge job started after the last array task ended (times to the second, in
# ISO 8601, so they compare as strings).
job_time() { scontrol -o show job "$1" 2>/dev/null | grep -oE "$2=[0-9T:-]+" | cut -d= -f2; }
merge_start=$(job_time "$merge_id" StartTime | head -n 1)
array_end=$(job_time "$array_id" EndTime | sort | tail -n 1)
if [ -z "$merge_start" ] || [ -z "$array_end" ] || [[ "$merge_start" < "$array_end" ]]; then
  fail "the merge job started at ${merge_start:-?}, before the array's last task ended (${array_end:-?})"
fi

# The tasks ran as 4 different array tasks, each its own shard: one log per task.
for k in $(seq 1 "$tasks"); do
  log="$slurm_dir/array-${array_id}_$k.out"
  if [ ! -f "$log" ]; then
    fail "no log $log of array task $k"
  elif ! grep -qF "runs in this shard ($k/$tasks)" "$log"; then
    fail "$log does not name shard $k/$tasks ('... runs in this shard ($k/$tasks): ...')"
  fi
done
n_logs=$(find "$slurm_dir" -name "array-${array_id}_*.out" | wc -l)
[ "$n_logs" -eq "$tasks" ] || fail "$n_logs array task logs in $slurm_dir, not $tasks"
# No run trained twice, none left out: each of the 8 is reported trained ("[i/n]
# RUN: val loss ...") in exactly one task's log.
trained=$(cat "$slurm_dir"/array-"${array_id}"_*.out 2>/dev/null | sed -n 's/^\[[0-9]*\/[0-9]*\] \([^:]*\): val loss .*/\1/p' | sort)
n_trained=$(grep -c . <<<"$trained" || true)
twice=$(uniq -d <<<"$trained")
[ -z "$twice" ] || fail "trained by more than one array task: $(echo $twice)"
[ "$(sort -u <<<"$trained" | grep -c .)" -eq 8 ] || fail "the task logs report $n_trained finished runs ($(echo $trained)), not the 8 of the grid"

# --- the same sweep in one process.
ref_start=$(date +%s.%N)
"$headroom" ablate "${sweep[@]}" --jobs 1 --out "$ref" >"$state/ref.out" 2>&1 \
  || { cat "$state/ref.out" >&2; fail "the one-process sweep failed"; }
ref_wall=$(awk -v a="$ref_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# results.csv without the timing columns, found by their header names.
untimed() {
  awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) drop[i] = ($i == "wall_s" || $i == "tokens_per_s") }
    { out = ""; sep = ""
      for (i = 1; i <= NF; i++) if (!drop[i]) { out = out sep $i; sep = "," }
      print out }' "$1"
}
if [ ! -f "$dir/results.csv" ]; then
  fail "the merge wrote no $dir/results.csv"
elif [ -f "$ref/results.csv" ]; then
  rows=$(($(wc -l <"$dir/results.csv") - 1))
  [ "$rows" -eq 8 ] || fail "$dir/results.csv has $rows runs, not 8"
  head -n 1 "$dir/results.csv" | grep -q wall_s || fail "$dir/results.csv has no wall_s column to drop"
  if ! diff <(untimed "$ref/results.csv") <(untimed "$dir/results.csv") >"$state/results.diff"; then
    fail "results.csv of the Slurm sweep differs from the one-process sweep's (< one process, > Slurm):"
    cat "$state/results.diff" >&2
  fi
fi

echo "test_slurm: wall time of the 8 runs: ${slurm_wall} s on Slurm (ablate --slurm --submit to the merge job's end, $tasks array tasks), ${ref_wall} s in one process (--jobs 1)"
if [ $failed -ne 0 ]; then
  show_logs
  echo "test_slurm: FAIL" >&2
  exit 1
fi
echo "test_slurm: OK"
