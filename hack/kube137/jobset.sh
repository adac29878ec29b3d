#!/usr/bin/env bash
# JobSet's controller manager (sigs.k8s.io/jobset, its root `main`) built from its Go module and
# run against the 1.37 plane, for Kueue's jobset.x-k8s.io/jobset integration.
#
#   jobset.sh ensure [--offline]    build once per machine (cached): prints JOBSET_BIN=<file> last;
#                                   --offline: exit 3 when not built
#   jobset.sh start -d STATE_DIR    on a plane started by start.sh -d STATE_DIR: JobSet's CRD,
#                                   namespace jobset-system, the webhook Service and
#                                   configurations (jobset_install.py), then JobSet itself with
#                                   its internal certificate management; ready (its /readyz ok,
#                                   webhooks answering) when this returns
#   jobset.sh stop -d STATE_DIR     stop the JobSet it started, remove its webhook configurations
#                                   (the CRD and objects stay); stop.sh stops it too
# Env: KUBE137_HOME (/var/cache/kube137), KUBE137_NICE (15), JOBSET_WEBHOOK_PORT (19543),
#      JOBSET_HEALTH_PORT (18181), JOBSET_V (2: zap log level).
# The module is jobset/ (go.mod: sigs.k8s.io/jobset $JOBSET_VERSION, the release Kueue v0.17's
# integration is built against, with JobSet's own dependency graph: k8s.io v0.35.x).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
JOBSET_VERSION=v0.11.1
export KUBE137_HOME=${KUBE137_HOME:-/var/cache/kube137}
cmd=${1:-}; shift || true
DIR=""; offline=0
while [ $# -gt 0 ]; do
  case $1 in
    -d) DIR=$2; shift 2 ;;
    --offline) offline=1; shift ;;
    *) echo "jobset.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "jobset.sh: $*" >&2; exit 1; }
command -v go >/dev/null || die "no go in PATH"
key=$( { echo "$JOBSET_VERSION"; cat "$here/jobset/go.mod" "$here/jobset/go.sum"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
KEYDIR=$KUBE137_HOME/jobset-${JOBSET_VERSION}-${key}
BIN=$KEYDIR/bin/jobset
export GOMODCACHE=$KUBE137_HOME/gomodcache GOCACHE=$KUBE137_HOME/gocache
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
# JobSet's cert rotator waits for tls.crt in this fixed directory (its webhook server reads the
# configured certDir): JobSet runs in a mount namespace of its own where the state dir's
# jobset/certs is bound here, so nothing of it is shared with other processes on the machine.
FIXED_CERT_DIR=/tmp/k8s-webhook-server/serving-certs

ensure() {
  if [ ! -x "$BIN" ]; then
    [ "$offline" = 1 ] && { echo "jobset.sh: --offline and no $BIN" >&2; exit 3; }
    mkdir -p "$KEYDIR/bin" "$KEYDIR/logs"
    exec 9>"$KUBE137_HOME/.jobset.lock"; flock 9
    if [ ! -x "$BIN" ]; then
      local t0 rc=0; t0=$(date +%s)
      (cd "$here/jobset" && nice -n "${KUBE137_NICE:-15}" go mod download) > "$KEYDIR/logs/build.log" 2>&1 || rc=$?
      [ $rc = 0 ] || { tail -15 "$KEYDIR/logs/build.log"; die "go mod download failed"; }
      echo "== building jobset $JOBSET_VERSION (sigs.k8s.io/jobset)"
      (cd "$here/jobset" && /usr/bin/env time -f '%e s wall, %U s user, %M KiB max RSS' -o "$KEYDIR/logs/time.txt" \
         nice -n "${KUBE137_NICE:-15}" go build ${KUBE137_GOFLAGS:--p=2} -trimpath \
         -ldflags "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
         -o "$BIN.tmp" sigs.k8s.io/jobset) >> "$KEYDIR/logs/build.log" 2>&1 || rc=$?
      if [ $rc != 0 ]; then echo "!! jobset FAILED:"; tail -15 "$KEYDIR/logs/build.log"; exit 1; fi
      mv "$BIN.tmp" "$BIN"
      echo "jobset: built in $(( $(date +%s) - t0 )) s ($(cat "$KEYDIR/logs/time.txt")), $(( $(stat -c %s "$BIN") / 1048576 )) MiB" | tee "$KEYDIR/logs/times.txt"
    fi
  fi
  [ -f "$KEYDIR/logs/times.txt" ] && sed 's/^/  /' "$KEYDIR/logs/times.txt"
  echo "JOBSET_BIN=$BIN"
}

src() { (cd "$here/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset); }
py() { if [ -x "$ROOT/.venv/bin/python" ]; then "$ROOT/.venv/bin/python" "$@"; else python3 "$@"; fi; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  [ -n "$DIR" ] && [ -f "$DIR/env.sh" ] || die "-d STATE_DIR of a running plane (start.sh) needed"
  ensure >/dev/null
  unshare -rm true 2>/dev/null || die "no unprivileged mount namespace (unshare -rm): JobSet's cert rotator needs its fixed $FIXED_CERT_DIR"
  local port=${JOBSET_WEBHOOK_PORT:-19543} health=${JOBSET_HEALTH_PORT:-18181} source
  source=$(src)
  mkdir -p "$DIR/jobset/certs" "$DIR/logs"
  # the mount point (an empty directory; the files are the state dir's, seen only by JobSet)
  mkdir -p "$FIXED_CERT_DIR" 2>/dev/null || [ -d "$FIXED_CERT_DIR" ] || die "cannot create $FIXED_CERT_DIR"
  alive "$DIR/jobset.pid" && die "JobSet already running (pid $(cat "$DIR/jobset.pid"))"
  py "$here/jobset_install.py" install "$DIR" "$source" "$port"
  cat > "$DIR/jobset/config.yaml" <<CONF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$health
webhook:
  host: 127.0.0.1
  port: $port
  certDir: $FIXED_CERT_DIR
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: jobset-webhook-service
  webhookSecretName: jobset-webhook-server-cert
clientConnection:
  qps: 50
  burst: 100
CONF
  # unshare execs (no fork): the pid written is JobSet's own
  nohup unshare -rm sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"' jobset \
    "$DIR/jobset/certs" "$FIXED_CERT_DIR" \
    "$BIN" --config="$DIR/jobset/config.yaml" --kubeconfig="$DIR/admin.kubeconfig" \
    --metrics-bind-address=0 --zap-log-level="${JOBSET_V:-2}" \
    > "$DIR/logs/jobset.log" 2>&1 &
  echo $! > "$DIR/jobset.pid"
  local t0 i; t0=$(date +%s)
  for i in $(seq 1 240); do
    alive "$DIR/jobset.pid" || { tail -30 "$DIR/logs/jobset.log" >&2; die "jobset exited"; }
    # the kubelet's part: JobSet's Secret, once filled, as files in its certDir
    [ -s "$DIR/jobset/certs/tls.key" ] || py "$here/jobset_install.py" mount-secret "$DIR" "$DIR/jobset/certs" || true
    [ "$(curl -s "http://127.0.0.1:$health/readyz" 2>/dev/null)" = ok ] && break
    [ "$i" = 240 ] && die "jobset /readyz not ok after 120 s (log $DIR/logs/jobset.log)"
    sleep 0.5
  done
  echo "jobset $JOBSET_VERSION ready in $(( $(date +%s) - t0 )) s (pid $(cat "$DIR/jobset.pid"), webhooks https://localhost:$port as jobset-webhook-service.jobset-system.svc, log $DIR/logs/jobset.log)"
}

stop() {
  [ -n "$DIR" ] || die "-d STATE_DIR needed"
  local pid
  if alive "$DIR/jobset.pid"; then
    pid=$(cat "$DIR/jobset.pid")
    if tr '\0' ' ' < "/proc/$pid/cmdline" | awk '{print $1}' | grep -q '/jobset$'; then
      kill -TERM "$pid"; for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
      echo "jobset: stopped (pid $pid)"
    fi
  fi
  rm -f "$DIR/jobset.pid"
  [ -f "$DIR/env.sh" ] && py "$here/jobset_install.py" uninstall "$DIR" "$(src)" "${JOBSET_WEBHOOK_PORT:-19543}" || true
}

case $cmd in
  ensure) ensure ;;
  start) start ;;
  stop) stop ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
