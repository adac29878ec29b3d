#!/usr/bin/env bash
# Kueue (sigs.k8s.io/kueue, cmd/kueue) built from its Go module and run against the 1.37 plane.
#
#   kueue.sh ensure [--offline]     build once per machine (cached): prints KUEUE_BIN=<file> last;
#                                   --offline: exit 3 when not built
#   kueue.sh start -d STATE_DIR     on a plane started by start.sh -d STATE_DIR: Kueue's CRDs
#                                   (with their conversion webhooks), namespace kueue-system, the
#                                   webhook Service and configurations (kueue_install.py), then
#                                   Kueue itself with its internal certificate management; ready
#                                   (its /readyz ok, webhooks answering) when this returns
#   kueue.sh stop -d STATE_DIR      stop the Kueue it started, remove its webhook configurations
#                                   (CRDs and objects stay); stop.sh stops it too
# Env: KUBE137_HOME (/var/cache/kube137), KUBE137_NICE (15), KUEUE_WEBHOOK_PORT (19443),
#      KUEUE_HEALTH_PORT (18081), KUEUE_METRICS_PORT (18443), KUEUE_VISIBILITY_PORT (18082),
#      KUEUE_FRAMEWORKS (batch/job; add jobset.x-k8s.io/jobset with JobSet running: jobset.sh),
#      KUEUE_V (2: zap log level).
# The module is kueue/ (go.mod: sigs.k8s.io/kueue $KUEUE_VERSION with Kueue's own dependency
# graph: it is built against k8s.io v0.35.x, and talks to the 1.37 API server as any client).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
KUEUE_VERSION=v0.17.0
export KUBE137_HOME=${KUBE137_HOME:-/var/cache/kube137}
cmd=${1:-}; shift || true
DIR=""; offline=0
while [ $# -gt 0 ]; do
  case $1 in
    -d) DIR=$2; shift 2 ;;
    --offline) offline=1; shift ;;
    *) echo "kueue.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "kueue.sh: $*" >&2; exit 1; }
command -v go >/dev/null || die "no go in PATH"
key=$( { echo "$KUEUE_VERSION"; cat "$here/kueue/go.mod" "$here/kueue/go.sum"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16)
KEYDIR=$KUBE137_HOME/kueue-${KUEUE_VERSION}-${key}
BIN=$KEYDIR/bin/kueue
export GOMODCACHE=$KUBE137_HOME/gomodcache GOCACHE=$KUBE137_HOME/gocache
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local

ensure() {
  if [ ! -x "$BIN" ]; then
    [ "$offline" = 1 ] && { echo "kueue.sh: --offline and no $BIN" >&2; exit 3; }
    mkdir -p "$KEYDIR/bin" "$KEYDIR/logs"
    exec 9>"$KUBE137_HOME/.kueue.lock"; flock 9
    if [ ! -x "$BIN" ]; then
      local t0 rc=0; t0=$(date +%s)
      (cd "$here/kueue" && nice -n "${KUBE137_NICE:-15}" go mod download) > "$KEYDIR/logs/build.log" 2>&1 || rc=$?
      [ $rc = 0 ] || { tail -15 "$KEYDIR/logs/build.log"; die "go mod download failed"; }
      echo "== building kueue $KUEUE_VERSION (sigs.k8s.io/kueue/cmd/kueue)"
      (cd "$here/kueue" && /usr/bin/env time -f '%e s wall, %U s user, %M KiB max RSS' -o "$KEYDIR/logs/time.txt" \
         nice -n "${KUBE137_NICE:-15}" go build ${KUBE137_GOFLAGS:--p=2} -trimpath \
         -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
         -o "$BIN.tmp" sigs.k8s.io/kueue/cmd/kueue) >> "$KEYDIR/logs/build.log" 2>&1 || rc=$?
      if [ $rc != 0 ]; then echo "!! kueue FAILED:"; tail -15 "$KEYDIR/logs/build.log"; exit 1; fi
      mv "$BIN.tmp" "$BIN"
      echo "kueue: built in $(( $(date +%s) - t0 )) s ($(cat "$KEYDIR/logs/time.txt")), $(( $(stat -c %s "$BIN") / 1048576 )) MiB" | tee "$KEYDIR/logs/times.txt"
    fi
  fi
  [ -f "$KEYDIR/logs/times.txt" ] && sed 's/^/  /' "$KEYDIR/logs/times.txt"
  echo "KUEUE_BIN=$BIN"
}

src() { (cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue); }
py() { if [ -x "$ROOT/.venv/bin/python" ]; then "$ROOT/.venv/bin/python" "$@"; else python3 "$@"; fi; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  [ -n "$DIR" ] && [ -f "$DIR/env.sh" ] || die "-d STATE_DIR of a running plane (start.sh) needed"
  ensure >/dev/null
  local port=${KUEUE_WEBHOOK_PORT:-19443} health=${KUEUE_HEALTH_PORT:-18081} source
  source=$(src)
  mkdir -p "$DIR/kueue/certs" "$DIR/logs"
  alive "$DIR/kueue.pid" && die "Kueue already running (pid $(cat "$DIR/kueue.pid"))"
  py "$here/kueue_install.py" install "$DIR" "$source" "$port"
  local frameworks="" f
  for f in ${KUEUE_FRAMEWORKS:-batch/job}; do frameworks="$frameworks    - \"$f\""$'\n'; done
  cat > "$DIR/kueue/config.yaml" <<CONF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$health
metrics:
  bindAddress: 127.0.0.1:${KUEUE_METRICS_PORT:-18443}
webhook:
  host: 127.0.0.1
  port: $port
  certDir: $DIR/kueue/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: kueue-webhook-service
  webhookSecretName: kueue-webhook-server-cert
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
$frameworks
CONF
  nohup "$BIN" --config="$DIR/kueue/config.yaml" --kubeconfig="$DIR/admin.kubeconfig" \
    --visibility-server-port="${KUEUE_VISIBILITY_PORT:-18082}" --zap-log-level="${KUEUE_V:-2}" \
    > "$DIR/logs/kueue.log" 2>&1 &
  echo $! > "$DIR/kueue.pid"
  local t0 i; t0=$(date +%s)
  for i in $(seq 1 240); do
    alive "$DIR/kueue.pid" || { tail -30 "$DIR/logs/kueue.log" >&2; die "kueue exited"; }
    # the kubelet's part: Kueue's Secret, once filled, as files in its certDir
    [ -s "$DIR/kueue/certs/tls.key" ] || py "$here/kueue_install.py" mount-secret "$DIR" "$DIR/kueue/certs" || true
    [ "$(curl -s "http://127.0.0.1:$health/readyz" 2>/dev/null)" = ok ] && break
    [ "$i" = 240 ] && die "kueue /readyz not ok after 120 s (log $DIR/logs/kueue.log)"
    sleep 0.5
  done
  echo "kueue $KUEUE_VERSION ready in $(( $(date +%s) - t0 )) s (pid $(cat "$DIR/kueue.pid"), webhooks https://localhost:$port as kueue-webhook-service.kueue-system.svc, log $DIR/logs/kueue.log)"
}

stop() {
  [ -n "$DIR" ] || die "-d STATE_DIR needed"
  local pid
  if alive "$DIR/kueue.pid"; then
    pid=$(cat "$DIR/kueue.pid")
    if tr '\0' ' ' < "/proc/$pid/cmdline" | awk '{print $1}' | grep -q '/kueue$'; then
      kill -TERM "$pid"; for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
      echo "kueue: stopped (pid $pid)"
    fi
  fi
  rm -f "$DIR/kueue.pid"
  [ -f "$DIR/env.sh" ] && py "$here/kueue_install.py" uninstall "$DIR" "$(src)" "${KUEUE_WEBHOOK_PORT:-19443}" || true
}

case $cmd in
  ensure) ensure ;;
  start) start ;;
  stop) stop ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
