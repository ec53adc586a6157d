#!/usr/bin/env bash
# A one-node Slurm on this machine, everything under STATE_DIR: its own munge key and
# munged, its own slurm.conf, slurmctld and slurmd on free ports. For tests that submit
# real jobs (tests/test_slurm.sh); tests/slurm/README.md says what each setting is for.
#
#   cluster.sh start STATE_DIR   start the daemons, wait until the node is idle, and
#                                print `export SLURM_CONF=STATE_DIR/slurm.conf`
#   cluster.sh stop STATE_DIR    stop every daemon that start started, and wait for it
#
# It runs as root (SlurmUser=root): slurmd starts each job's processes as the user who
# submitted it, which needs root.
set -euo pipefail

usage() { echo "usage: cluster.sh start|stop STATE_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
state=$2
case "$action" in start|stop) ;; *) usage ;; esac

# The daemons, in the order start starts them (stop goes the other way).
daemons=(munged slurmctld slurmd)

pid_of() { cat "$state/run/$1.pid" 2>/dev/null || true; }

# The last lines of a daemon's log, to say why it failed.
log_tail() {
  local log="$state/log/$1.log"
  if [ -s "$log" ]; then
    echo "--- last lines of $log:" >&2
    tail -n 25 "$log" >&2
  else
    echo "--- $log is empty or missing" >&2
  fi
}

fail() {  # fail DAEMON MESSAGE: say why, show the daemon's log, stop what runs, exit 1
  echo "cluster.sh: $2" >&2
  [ -n "$1" ] && log_tail "$1"
  stop_all
  exit 1
}

# The processes of this cluster's jobs (slurmstepd, the batch script and what it
# started): their environment names our slurm.conf (slurmd passes SLURM_CONF on, and
# every job step has SLURM_JOB_ID). The shell that runs this script has SLURM_CONF
# too, but no SLURM_JOB_ID.
job_pids() {
  local file pid
  # One grep over every environ (a loop with a process per pid takes seconds).
  for file in $(grep -lsxzF "SLURM_CONF=$state/slurm.conf" /proc/[0-9]*/environ || true); do
    pid=${file#/proc/}
    pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    if grep -qsz '^SLURM_JOB_ID=' "$file" || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ]; then
      echo "$pid"
    fi
  done
}

# Whether pid $1 runs. A zombie does not: a daemon's first process exits after the
# fork, and PID 1 may reap it late.
running() {
  local st
  st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

alive() { local pid; pid=$(pid_of "$1"); [ -n "$pid" ] && running "$pid"; }

# Wait up to $2 tenths of a second for pid $1 to exit.
wait_exit() {
  local i
  for ((i = 0; i < $2; i++)); do
    running "$1" || return 0
    sleep 0.1
  done
  return 1
}

stop_all() {
  local i name pid
  # With proctrack/linuxproc a job outlives slurmd (by design: slurmd may restart
  # under a running job), so cancel the jobs first, while slurmctld still runs.
  if alive slurmctld && alive slurmd; then
    SLURM_CONF="$state/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 100); do
      [ -z "$(SLURM_CONF="$state/slurm.conf" squeue -h -t R,CG -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do
    name=${daemons[i]}
    pid=$(pid_of "$name")
    [ -n "$pid" ] || continue
    if running "$pid"; then
      kill -TERM "$pid" 2>/dev/null || true
      if ! wait_exit "$pid" 200; then
        echo "cluster.sh: $name (pid $pid) ignored SIGTERM for 20 s; sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        wait_exit "$pid" 50 || echo "cluster.sh: $name (pid $pid) survived SIGKILL" >&2
      fi
    fi
    rm -f "$state/run/$name.pid"
  done
  # Whatever a job left behind (a job that scancel did not reach).
  for pid in $(job_pids); do
    echo "cluster.sh: killing job process $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) left after the daemons" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in $(job_pids); do
    wait_exit "$pid" 50 || echo "cluster.sh: job process $pid survived SIGKILL" >&2
  done
}

# A free TCP port on localhost, other than the ones named as arguments: bind port 0
# and let the kernel choose.
free_port() {
  local port
  while :; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    local taken=0 p
    for p in "$@"; do [ "$p" = "$port" ] && taken=1; done
    [ $taken -eq 0 ] && { echo "$port"; return; }
  done
}

start() {
  local cmd
  for cmd in munged mungekey slurmctld slurmd sinfo scontrol python3; do
    command -v "$cmd" >/dev/null || { echo "cluster.sh: $cmd is not on PATH" >&2; exit 1; }
  done
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: must run as root (SlurmUser=root), not uid $(id -u)" >&2; exit 1; }
  for name in "${daemons[@]}"; do
    local pid
    pid=$(pid_of "$name")
    if [ -n "$pid" ] && running "$pid"; then
      echo "cluster.sh: $name already runs from $state (pid $pid); run cluster.sh stop $state first" >&2
      exit 1
    fi
  done

  mkdir -p "$state"
  state=$(cd "$state" && pwd)
  # munged refuses a key, socket or log directory that others may write to, and a
  # socket directory (and its parents) that others may not enter: 0711.
  chmod 0711 "$state"
  mkdir -p "$state/munge" "$state/run" "$state/log" "$state/ctld" "$state/spool"
  chmod 0711 "$state/munge"
  local d=$state
  while [ "$d" != / ]; do
    d=$(dirname "$d")
    if [ "$(( 0$(stat -c %a "$d") & 1 ))" -eq 0 ]; then
      echo "cluster.sh: munged needs every directory above its socket to be searchable by all (o+x), and $d is $(stat -c %A "$d"); use a STATE_DIR elsewhere or chmod o+x $d" >&2
      exit 1
    fi
  done

  # --- munge: the key, then munged on its own socket.
  local key="$state/munge/munge.key" socket="$state/munge/munge.socket"
  if [ ! -s "$key" ]; then
    rm -f "$key"
    mungekey --create --keyfile="$key" >"$state/log/mungekey.out" 2>&1 \
      || { cat "$state/log/mungekey.out" >&2; fail "" "mungekey could not create $key"; }
  fi
  chmod 0600 "$key"
  # No --force: munged needs it only when a socket of a dead munged is left behind,
  # and then we remove that socket ourselves (nothing else uses a socket in STATE_DIR).
  rm -f "$socket" "$socket.lock"
  munged --socket="$socket" --key-file="$key" --pid-file="$state/run/munged.pid" \
    --log-file="$state/log/munged.log" --seed-file="$state/munge/munged.seed" \
    >"$state/log/munged.stdout" 2>&1 \
    || { cat "$state/log/munged.stdout" >&2; fail munged "munged did not start"; }
  # munged writes its pid file after it has forked; wait for the socket to answer.
  local ok=0
  for _ in $(seq 1 100); do
    if munge --socket="$socket" -n 2>/dev/null | unmunge --socket="$socket" >/dev/null 2>&1; then
      ok=1; break
    fi
    sleep 0.1
  done
  [ $ok -eq 1 ] || fail munged "munged does not answer on $socket after 10 s"

  # --- slurm.conf
  local host ctld_port slurmd_port hw cpus mem node
  host=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port "$ctld_port")
  # The node as slurmd sees it (`slurmd -C`: CPUs, boards, sockets, cores, threads,
  # RealMemory in MB): slurmd drains a node that has less than slurm.conf says. When
  # this process may use fewer CPUs than the machine has (nproc), only CPUs=nproc.
  hw=$(slurmd -C 2>/dev/null | head -n 1 || true)
  cpus=$(nproc)
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
  [ -n "$mem" ] || mem=$(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo)
  if grep -q "CPUs=$cpus " <<<"$hw"; then
    node=$(grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' <<<"$hw" | tr '\n' ' ')
  else
    node="CPUs=$cpus "
  fi
  : >"$state/plugstack.conf"  # no SPANK plugins (the system's would be read otherwise)
  cat >"$state/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh; tests/slurm/README.md says what each line is for.
ClusterName=headroom-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
PlugStackConfig=$state/plugstack.conf

StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
MailProg=/bin/true
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info

ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2

SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=defer_batch,sched_interval=1,bf_interval=1,batch_sched_delay=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=3600

NodeName=$host NodeAddr=127.0.0.1 ${node}RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$state/slurm.conf"

  # --- slurmctld, then slurmd. -i: ignore state from an earlier start (a fresh cluster).
  slurmctld -i -f "$SLURM_CONF" >"$state/log/slurmctld.stdout" 2>&1 \
    || { cat "$state/log/slurmctld.stdout" >&2; fail slurmctld "slurmctld did not start"; }
  wait_for_pid slurmctld
  ok=0
  for _ in $(seq 1 100); do
    scontrol ping 2>/dev/null | grep -q "is UP" && { ok=1; break; }
    alive slurmctld || fail slurmctld "slurmctld exited during start-up"
    sleep 0.2
  done
  [ $ok -eq 1 ] || fail slurmctld "slurmctld does not answer scontrol ping after 20 s"

  slurmd -f "$SLURM_CONF" >"$state/log/slurmd.stdout" 2>&1 \
    || { cat "$state/log/slurmd.stdout" >&2; fail slurmd "slurmd did not start"; }
  wait_for_pid slurmd

  # --- wait until the node is idle.
  local node_state=""
  for _ in $(seq 1 300); do
    node_state=$(sinfo -h -N -n "$host" -o '%T' 2>/dev/null | head -n 1 || true)
    [ "$node_state" = idle ] && break
    case "$node_state" in inval*|drain*) break ;; esac  # slurmd registered, and was refused
    alive slurmctld || fail slurmctld "slurmctld exited while the node came up"
    alive slurmd || fail slurmd "slurmd exited while the node came up"
    sleep 0.2
  done
  if [ "$node_state" != idle ]; then
    echo "cluster.sh: node $host is '${node_state:-unknown}', not idle" >&2
    scontrol show node "$host" >&2 || true
    log_tail slurmctld
    fail slurmd "the node did not become idle"
  fi
  echo "export SLURM_CONF=$SLURM_CONF"
}

# A daemon forks and writes its pid file; wait up to 10 s for that file.
wait_for_pid() {
  for _ in $(seq 1 100); do
    alive "$1" && return 0
    sleep 0.1
  done
  fail "$1" "$1 wrote no pid file ($state/run/$1.pid) within 10 s"
}

case "$action" in
  start) start ;;
  stop)
    [ -d "$state" ] || exit 0
    state=$(cd "$state" && pwd)
    stop_all
    ;;
esac
