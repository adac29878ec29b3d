#!/usr/bin/env bash
# Make sure the Kubernetes 1.37 plane's binaries exist on this machine: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok, built from Go modules (kube/, etcd/, kwok/;
# versions in versions.env) with `go build`, nothing downloaded but Go modules; etcdctl too.
#
# Usage: ensure.sh [--offline]   -> prints `KUBE137_BIN=<dir>` last; exit 0 when every required
#                                   component (all but kube-scheduler) is there
#   --offline   fail at once (exit 3) instead of building when the cache has no binaries
# Env: KUBE137_HOME (default /var/cache/kube137): GOMODCACHE, GOCACHE, binaries, state
#      KUBE137_NICE (default 15): the builds run under `nice -n $KUBE137_NICE`
#      KUBE137_GOFLAGS (default -p=2): extra `go build` flags
# Binaries go to $KUBE137_HOME/<version>-<key>/bin (kwok's default stages to ../share), <key> = hash of versions.env, the go.mod/go.sum and
# .go files and the Go version: a first run builds (about 13 min on 2 busy cores, README.md),
# later runs answer in well under a second. One build at a time (flock); the times of the
# first build are in <key>/logs/times.txt and printed each run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
offline=0
[ "${1:-}" = --offline ] && offline=1
. "$here/versions.env"
export KUBE137_HOME=${KUBE137_HOME:-/var/cache/kube137}
command -v go >/dev/null || { echo "ensure.sh: no go in PATH (Go >= $(sed -n 's/^go //p' "$here/kube/go.mod") needed)" >&2; exit 1; }
key=$( { cat "$here/versions.env"; for m in kube etcd kwok; do cat "$here/$m/go.mod" "$here/$m/go.sum"; done
         find "$here" -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 cat; go env GOVERSION GOOS GOARCH
         echo "ldflags-v1"; } | sha256sum | cut -c1-16)
KEYDIR=$KUBE137_HOME/${KUBE_VERSION}-${key}
BIN=$KEYDIR/bin
REQUIRED="etcd kube-apiserver kube-controller-manager kwok"
OPTIONAL="kube-scheduler etcdctl"
STAGES=$KEYDIR/share/kwok-stages.yaml
complete() { local c; for c in $REQUIRED $OPTIONAL; do [ -x "$BIN/$c" ] || return 1; done; [ -s "$STAGES" ]; }
report() {
  [ -f "$KEYDIR/logs/times.txt" ] && sed 's/^/  /' "$KEYDIR/logs/times.txt"
  local c missing=0
  for c in $REQUIRED; do [ -x "$BIN/$c" ] || { echo "ensure.sh: $c missing (log $KEYDIR/logs/build-$c.log)" >&2; missing=1; }; done
  for c in $OPTIONAL; do [ -x "$BIN/$c" ] || echo "ensure.sh: $c missing (optional; log $KEYDIR/logs/build-$c.log)" >&2; done
  [ -s "$STAGES" ] || { echo "ensure.sh: no $STAGES" >&2; missing=1; }
  echo "KUBE137_BIN=$BIN"
  return $missing
}
if complete; then report; exit $?; fi
if [ "$offline" = 1 ]; then echo "ensure.sh: --offline and no binaries under $BIN" >&2; exit 3; fi

mkdir -p "$KEYDIR/bin" "$KEYDIR/logs"
exec 9>"$KUBE137_HOME/.ensure.lock"
flock 9
if complete; then report; exit $?; fi

export GOMODCACHE=$KUBE137_HOME/gomodcache GOCACHE=$KUBE137_HOME/gocache
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
NICE=${KUBE137_NICE:-15}
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
kube_ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ld="$kube_ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
kwok_ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE_VERSION#v}"

build() {  # component module package ldflags
  local c=$1 t0 rc=0
  [ -x "$BIN/$c" ] && return 0
  echo "== building $c ($2/$3)"
  t0=$(date +%s)
  (cd "$here/$2" && /usr/bin/env time -f '%e s wall, %U s user, %M KiB max RSS' -o "$KEYDIR/logs/time-$c.txt" \
     nice -n "$NICE" go build ${KUBE137_GOFLAGS:--p=2} -trimpath -ldflags "$4" -o "$BIN/$c.tmp" "$3") \
     > "$KEYDIR/logs/build-$c.log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    echo "!! $c FAILED (exit $rc), last lines of $KEYDIR/logs/build-$c.log:"; tail -n 15 "$KEYDIR/logs/build-$c.log"
    echo "$c: FAILED after $(( $(date +%s) - t0 )) s" >> "$KEYDIR/logs/times.txt"
    return 0
  fi
  mv "$BIN/$c.tmp" "$BIN/$c"
  echo "$c: built in $(( $(date +%s) - t0 )) s ($(cat "$KEYDIR/logs/time-$c.txt")), $(( $(stat -c %s "$BIN/$c") / 1048576 )) MiB" | tee -a "$KEYDIR/logs/times.txt"
}
t0=$(date +%s)
echo "ensure.sh: first build for key $key into $BIN (GOMODCACHE=$GOMODCACHE GOCACHE=$GOCACHE, nice -n $NICE)"
for m in kube etcd kwok; do
  (cd "$here/$m" && nice -n "$NICE" go mod download) >> "$KEYDIR/logs/download.log" 2>&1 \
    || { echo "!! go mod download ($m) failed:"; tail -n 15 "$KEYDIR/logs/download.log"; }
done
echo "modules: $(( $(date +%s) - t0 )) s (go mod download)" | tee -a "$KEYDIR/logs/times.txt"
build etcd etcd . "-s -w"
build etcdctl etcd go.etcd.io/etcd/etcdctl/v3 "-s -w"
build kube-apiserver kube ./cmd/kube-apiserver "$kube_ld"
build kube-controller-manager kube ./cmd/kube-controller-manager "$kube_ld"
build kube-scheduler kube ./cmd/kube-scheduler "$kube_ld"
build kwok kwok . "$kwok_ld"
# kwok's default stages (what `kwokctl create cluster` configures): nodes become Ready and
# renew a Lease, pods bound to them go Running, and deleted pods go away
kstage=$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
mkdir -p "$KEYDIR/share"
for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  echo "---"; cat "$kstage/$f.yaml"
done > "$STAGES.tmp" && mv "$STAGES.tmp" "$STAGES" || echo "!! kwok stages not found under $kstage"
echo "first build total: $(( $(date +%s) - t0 )) s (on $(nproc) cores)" | tee -a "$KEYDIR/logs/times.txt"
"$BIN/kube-apiserver" --version 2>/dev/null || true
report
