#!/usr/bin/env bash
# Stop what start.sh started, by the PIDs it saved (never by name).
#
# Usage: stop.sh [-d STATE_DIR] [--scheduler-only | --apiserver-only] [--clean]
#   --scheduler-only   stop only kube-scheduler
#   --apiserver-only   stop only kube-apiserver (start.sh --apiserver-only starts it again)
#   --clean            also delete STATE_DIR and etcd's data dir
# Each PID is checked against /proc/PID/cmdline (the expected binary) before it is signalled,
# so a reused PID is never killed. TERM first, KILL after $STOP_WAIT s (default 10).
set -euo pipefail
DIR=${KUBE137_HOME:-/var/cache/kube137}/run
ONLY_SCHED=0
ONLY_API=0
CLEAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    -d) DIR=$2; shift 2 ;;
    --scheduler-only) ONLY_SCHED=1; shift ;;
    --apiserver-only) ONLY_API=1; shift ;;
    --clean) CLEAN=1; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

stop_one() {  # name (pidfile STATE_DIR/name.pid, binary basename name)
  local name=$1 pf=$DIR/$1.pid pid i
  [ -f "$pf" ] || return 0
  pid=$(cat "$pf")
  if ! kill -0 "$pid" 2>/dev/null; then echo "$name: pid $pid not running"; rm -f "$pf"; return 0; fi
  if ! tr '\0' ' ' < "/proc/$pid/cmdline" | awk '{print $1}' | grep -q "/$name\$"; then
    echo "$name: pid $pid is not $name (PID reused?), left alone"; rm -f "$pf"; return 0
  fi
  kill -TERM "$pid"
  for i in $(seq 1 $(( ${STOP_WAIT:-10} * 2 ))); do
    kill -0 "$pid" 2>/dev/null || { echo "$name: stopped (pid $pid)"; rm -f "$pf"; return 0; }
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
  echo "$name: killed (pid $pid)"
  rm -f "$pf"
}

if [ "$ONLY_API" = 1 ]; then stop_one kube-apiserver; exit 0; fi
stop_one kube-scheduler
if [ "$ONLY_SCHED" = 1 ]; then exit 0; fi
stop_one kueue  # kueue.sh start (its webhooks die with the plane)
stop_one jobset  # jobset.sh start
stop_one kwok
stop_one kube-controller-manager
stop_one kube-apiserver
stop_one etcd
if [ "$CLEAN" = 1 ]; then
  if [ -f "$DIR/etcd-data-dir" ]; then rm -rf "$(cat "$DIR/etcd-data-dir")"; fi
  rm -rf "$DIR"
  echo "removed $DIR"
fi
