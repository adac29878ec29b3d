#!/usr/bin/env bash
# Start a loopback-only Kubernetes 1.37 control plane from the binaries ensure.sh built:
# etcd 3.6, kube-apiserver, kube-controller-manager, KWOK's controller with N fake GPU nodes
# and, optionally, kube-scheduler. Same options, files and env-file shape as
# ../../../shared/realkube/start.sh (the 1.20 plane), so tests/realkube drives either.
#
# Usage:
#   start.sh [-d STATE_DIR] [-k KUBECONFIG_OUT] [--nodes N] [--scheduler]   start the plane
#   start.sh [-d STATE_DIR] --scheduler-only      add kube-scheduler to a running plane
#   start.sh [-d STATE_DIR] --apiserver-only      (re)start kube-apiserver on the running etcd,
#                                                 same certs/tokens (after stop.sh --apiserver-only)
#   start.sh [-d STATE_DIR] --nodes-only N        add fake nodes to a running plane
#
# Defaults: STATE_DIR=${KUBE137_HOME:-/var/cache/kube137}/run, KUBECONFIG_OUT=$STATE_DIR/admin.kubeconfig,
#           N=0 (tests create their own nodes; any Node annotated kwok.x-k8s.io/node=fake is KWOK's).
# Binaries: $KUBE137_BIN, else what `ensure.sh --offline` names (it never builds from here).
# Ports (env): ETCD_PORT=23890 ETCD_PEER_PORT=23891 APISERVER_PORT=16543 SCHEDULER_PORT=10969
#              KCM_PORT=10967 KWOK_PORT=10947 (KWOK's healthz/kubelet API); SCHEDULER_INSECURE_PORT
#              is accepted and unused (1.37 has no insecure port).
# Other env:   ETCD_DATA_DIR (default /dev/shm/kube137-etcd-<port>), COMPACTION_INTERVAL (1m),
#              APISERVER_V / KCM_V / SCHEDULER_V / KWOK_V (verbosity), SCHEDULER_QPS / SCHEDULER_BURST
#              (50 / 100), KCM_QPS / KCM_BURST (20 / 30, kube's defaults: the node lifecycle
#              controller untaints new nodes at about that rate; raise them for thousands of nodes), SCHEDULER_CONFIG (a kubescheduler.config.k8s.io/v1 file),
#              FEATURE_GATES (default GenericWorkload=true: scheduling.k8s.io/v1beta1 Workload and
#              PodGroup), RUNTIME_CONFIG (default scheduling.k8s.io/v1beta1=true,resource.k8s.io/v1=true),
#              fake nodes: NODE_PREFIX (kwok-gpu-), NODE_GPUS (8), NODE_CPU (64), NODE_MEMORY (512Gi),
#              NODE_TOPOLOGY (built-in topology for the topo-scheduler.io/gpu-topology annotation,
#              default dgx1-v100; needs the repository's .venv, else no annotation), NODES_PER_LEAF (4),
#              NODES_PER_SPINE (8) for the labels network.topology.nvidia.com/{leaf,spine}.
#
# Everything binds to 127.0.0.1. PIDs go to STATE_DIR/*.pid; stop.sh kills exactly those.
# Tokens (STATE_DIR/tokens.csv; the first three as the 1.20 plane's, also in STATE_DIR/env.sh):
#   admin        user "admin", group system:masters                         -> admin.kubeconfig
#   scheduler    user "system:kube-scheduler"                               -> scheduler.kubeconfig
#   restricted   user $RESTRICTED_USER (default system:serviceaccount:topo-scheduler:
#                topo-scheduler-scheduler), no rights until RBAC grants them -> restricted.kubeconfig
#   controller-manager  user "system:kube-controller-manager" (it then uses one service account
#                per controller)                                            -> controller-manager.kubeconfig
#   kwok         user "kwok", group system:masters                          -> kwok.kubeconfig
# Service accounts are real: the ServiceAccount admission plugin, the token controller and
# TokenRequest (pod- and node-bound tokens, signed with pki/sa.key; issuer
# https://kubernetes.default.svc.cluster.local).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/../.." && pwd)

DIR=${KUBE137_HOME:-/var/cache/kube137}/run
KCFG=
WITH_SCHED=0
SCHED_ONLY=0
API_ONLY=0
NODES_ONLY=0
NODES=${NODES:-0}
while [ $# -gt 0 ]; do
  case "$1" in
    -d) DIR=$2; shift 2 ;;
    -k) KCFG=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --nodes-only) NODES_ONLY=1; NODES=$2; shift 2 ;;
    --scheduler) WITH_SCHED=1; shift ;;
    --scheduler-only) SCHED_ONLY=1; WITH_SCHED=1; shift ;;
    --apiserver-only) API_ONLY=1; shift ;;
    -h|--help) awk 'NR>1 && /^#/{sub(/^# ?/,"");print;next} NR>1{exit}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

die() { echo "start.sh: $*" >&2; exit 1; }
if [ -z "${KUBE137_BIN:-}" ]; then
  KUBE137_BIN=$(bash "$here/ensure.sh" --offline 2>/dev/null | sed -n 's/^KUBE137_BIN=//p') \
    || die "no binaries for the pinned versions: run $here/ensure.sh first"
fi
BIN=$KUBE137_BIN
STAGES=$BIN/../share/kwok-stages.yaml
ETCD_PORT=${ETCD_PORT:-23890}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23891}
APISERVER_PORT=${APISERVER_PORT:-16543}
SCHEDULER_PORT=${SCHEDULER_PORT:-10969}
KCM_PORT=${KCM_PORT:-10967}
KWOK_PORT=${KWOK_PORT:-10947}
ETCD_DATA_DIR=${ETCD_DATA_DIR:-/dev/shm/kube137-etcd-$ETCD_PORT}
COMPACTION_INTERVAL=${COMPACTION_INTERVAL:-1m}
FEATURE_GATES=${FEATURE_GATES:-GenericWorkload=true}
RUNTIME_CONFIG=${RUNTIME_CONFIG:-scheduling.k8s.io/v1beta1=true,resource.k8s.io/v1=true}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
KCFG=${KCFG:-$DIR/admin.kubeconfig}
LOG=$DIR/logs
PKI=$DIR/pki
mkdir -p "$LOG"
SERVER=https://127.0.0.1:$APISERVER_PORT

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
port_free() { ! ss -Hltn "sport = :$1" | grep -q .; }
admin_token() { sed -n 1p "$DIR/tokens.csv" | cut -d, -f1; }
api() {  # METHOD PATH [JSON-BODY]: prints the body, fails on HTTP >= 400
  curl -sS --fail-with-body --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(admin_token)" \
    -H 'Content-Type: application/json' -X "$1" "$SERVER$2" ${3:+--data-binary "$3"}
}
wait_healthy() {  # name pidfile url seconds
  local i
  for i in $(seq 1 $(( $4 * 2 ))); do
    alive "$2" || { tail -30 "$LOG/$1.log" >&2; die "$1 exited"; }
    if [ "$(curl -sk "$3" 2>/dev/null)" = ok ]; then return 0; fi
    sleep 0.5
  done
  die "$1 not healthy after $4 s ($3, log $LOG/$1.log)"
}

# ---- kube-scheduler ----------------------------------------------------------------------
start_scheduler() {
  if alive "$DIR/kube-scheduler.pid"; then die "kube-scheduler already running (pid $(cat "$DIR/kube-scheduler.pid"))"; fi
  [ -x "$BIN/kube-scheduler" ] || die "no $BIN/kube-scheduler (ensure.sh could not build it; see its log)"
  [ -f "$DIR/scheduler.kubeconfig" ] || die "no $DIR/scheduler.kubeconfig: start the plane first"
  port_free "$SCHEDULER_PORT" || die "port $SCHEDULER_PORT in use"
  local cfg=${SCHEDULER_CONFIG:-$DIR/kube-scheduler-config.yaml}
  if [ -z "${SCHEDULER_CONFIG:-}" ]; then
    cat > "$cfg" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $DIR/scheduler.kubeconfig
  qps: ${SCHEDULER_QPS:-50}
  burst: ${SCHEDULER_BURST:-100}
leaderElection:
  leaderElect: false
EOF
  fi
  nohup "$BIN/kube-scheduler" \
    --config="$cfg" \
    --authentication-kubeconfig="$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$DIR/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --cert-dir="$DIR/scheduler-certs" --feature-gates="$FEATURE_GATES" \
    -v="${SCHEDULER_V:-1}" \
    > "$LOG/kube-scheduler.log" 2>&1 &
  echo $! > "$DIR/kube-scheduler.pid"
  wait_healthy kube-scheduler "$DIR/kube-scheduler.pid" "https://127.0.0.1:$SCHEDULER_PORT/healthz" 30
  echo "kube-scheduler up (pid $(cat "$DIR/kube-scheduler.pid"), https://127.0.0.1:$SCHEDULER_PORT, log $LOG/kube-scheduler.log)"
}

# ---- fake nodes (KWOK's) -----------------------------------------------------------------
create_nodes() {  # N
  local n=$1 i py=python3 topo=""
  [ "$n" -gt 0 ] || return 0
  [ -x "$ROOT/.venv/bin/python" ] && py=$ROOT/.venv/bin/python
  topo=$(cd "$ROOT" && "$py" -c 'import json,sys
from scheduler.core.topology.builtin import builtin_topology
from scheduler.core.topology.schema import topology_to_dict
print(json.dumps(topology_to_dict(builtin_topology(sys.argv[1]))))' "${NODE_TOPOLOGY:-dgx1-v100}" 2>/dev/null) \
    || { echo "start.sh: no topo-scheduler package importable from $ROOT: nodes get no GPU topology annotation" >&2; topo=""; }
  NODE_TOPOLOGY_JSON=$topo "$py" - "$n" > "$DIR/nodes.jsonl" <<'PY'
import json, os, sys
n = int(sys.argv[1])
prefix = os.environ.get("NODE_PREFIX", "kwok-gpu-")
leaf, spine = int(os.environ.get("NODES_PER_LEAF", "4")), int(os.environ.get("NODES_PER_SPINE", "8"))
res = {"cpu": os.environ.get("NODE_CPU", "64"), "memory": os.environ.get("NODE_MEMORY", "512Gi"),
       "pods": "110", "nvidia.com/gpu": os.environ.get("NODE_GPUS", "8")}
topo = os.environ.get("NODE_TOPOLOGY_JSON", "")
for i in range(n):
    name = f"{prefix}{i}"
    ann = {"kwok.x-k8s.io/node": "fake"}
    if topo:
        ann["topo-scheduler.io/gpu-topology"] = topo
    print(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "annotations": ann, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok",
            "nvidia.com/gpu.present": "true",
            "network.topology.nvidia.com/spine": f"spine{i // spine}",
            "network.topology.nvidia.com/leaf": f"leaf{i // leaf}"}},
        "status": {"capacity": res, "allocatable": res}}))
PY
  while read -r node; do
    api POST /api/v1/nodes "$node" >/dev/null || die "creating a node failed"
  done < "$DIR/nodes.jsonl"
  # Ready (KWOK's node-initialize stage) and untainted (the node lifecycle controller removes
  # the not-ready taint that TaintNodesByCondition put on at creation)
  for i in $(seq 1 120); do
    local ready
    ready=$(api GET "/api/v1/nodes?labelSelector=type%3Dkwok" | python3 -c 'import json,sys
items = json.load(sys.stdin)["items"]
print(sum(1 for x in items if not x["spec"].get("taints") and any(
    c["type"] == "Ready" and c["status"] == "True" for c in x["status"].get("conditions", []))))')
    [ "$ready" -ge "$n" ] && { echo "$n fake nodes Ready and untainted (${NODE_PREFIX:-kwok-gpu-}0..$((n - 1)))"; return 0; }
    sleep 0.5
  done
  die "fake nodes not Ready and untainted after 60 s (logs $LOG/kwok.log, $LOG/kube-controller-manager.log)"
}

if [ "$SCHED_ONLY" = 1 ]; then start_scheduler; exit 0; fi
if [ "$NODES_ONLY" = 1 ]; then create_nodes "$NODES"; exit 0; fi

# ---- preflight ---------------------------------------------------------------------------
for b in etcd kube-apiserver kube-controller-manager kwok; do
  [ -x "$BIN/$b" ] || die "no $BIN/$b (run $here/ensure.sh)"
done
[ -s "$STAGES" ] || die "no $STAGES (run $here/ensure.sh)"
if [ "$API_ONLY" = 1 ]; then
  alive "$DIR/etcd.pid" || die "--apiserver-only: etcd of $DIR is not running"
  [ -f "$DIR/tokens.csv" ] || die "--apiserver-only: no $DIR/tokens.csv"
  if alive "$DIR/kube-apiserver.pid"; then die "kube-apiserver still running (pid $(cat "$DIR/kube-apiserver.pid"))"; fi
  port_free "$APISERVER_PORT" || die "port $APISERVER_PORT in use"
else
  for f in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if alive "$DIR/$f.pid"; then die "$f.pid: pid $(cat "$DIR/$f.pid") still running; run stop.sh -d $DIR first"; fi
  done
  for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$KWOK_PORT"; do
    port_free "$p" || die "port $p in use"
  done
fi

# ---- certificates and tokens -------------------------------------------------------------
mkdir -p "$PKI"
if [ ! -f "$PKI/apiserver.crt" ]; then
  (
    cd "$PKI"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -sha256 -days 3650 -subj "/CN=kube137-ca" -out ca.crt
    openssl genrsa -out apiserver.key 2048 2>/dev/null
    openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr
    printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -sha256 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # service-account token signing pair
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
fi
rand() { openssl rand -hex 16; }
RESTRICTED_USER=${RESTRICTED_USER:-system:serviceaccount:topo-scheduler:topo-scheduler-scheduler}
RESTRICTED_NS=$(echo "$RESTRICTED_USER" | cut -d: -f3)
if [ ! -f "$DIR/tokens.csv" ]; then
  cat > "$DIR/tokens.csv" <<EOF
$(rand),admin,uid-admin,"system:masters"
$(rand),system:kube-scheduler,uid-kube-scheduler
$(rand),$RESTRICTED_USER,uid-restricted,"system:serviceaccounts,system:serviceaccounts:${RESTRICTED_NS}"
$(rand),system:kube-controller-manager,uid-kube-controller-manager
$(rand),kwok,uid-kwok,"system:masters"
EOF
  chmod 600 "$DIR/tokens.csv"
fi
tok() { sed -n "$1p" "$DIR/tokens.csv" | cut -d, -f1; }
CA_DATA=$(base64 -w0 < "$PKI/ca.crt")
write_kubeconfig() {  # path user token
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kube137
  cluster:
    server: $SERVER
    certificate-authority-data: $CA_DATA
users:
- name: $2
  user:
    token: $3
contexts:
- name: $2@kube137
  context:
    cluster: kube137
    user: $2
    namespace: default
current-context: $2@kube137
EOF
  chmod 600 "$1"
}
mkdir -p "$(dirname "$KCFG")"
write_kubeconfig "$KCFG" admin "$(tok 1)"
[ "$KCFG" = "$DIR/admin.kubeconfig" ] || cp "$KCFG" "$DIR/admin.kubeconfig"
write_kubeconfig "$DIR/scheduler.kubeconfig" kube-scheduler "$(tok 2)"
write_kubeconfig "$DIR/restricted.kubeconfig" topo-scheduler-sa "$(tok 3)"
write_kubeconfig "$DIR/controller-manager.kubeconfig" kube-controller-manager "$(tok 4)"
write_kubeconfig "$DIR/kwok.kubeconfig" kwok "$(tok 5)"
cat > "$DIR/env.sh" <<EOF
export KUBECONFIG=$KCFG
export REALKUBE_SERVER=$SERVER
export REALKUBE_CA=$PKI/ca.crt
export REALKUBE_ADMIN_TOKEN=$(tok 1)
export REALKUBE_SCHEDULER_TOKEN=$(tok 2)
export REALKUBE_RESTRICTED_TOKEN=$(tok 3)
export REALKUBE_ETCD=http://127.0.0.1:$ETCD_PORT
export REALKUBE_VERSION=$("$BIN/kube-apiserver" --version | awk '{print $2}')
export REALKUBE_BIN=$BIN
EOF
chmod 600 "$DIR/env.sh"

# ---- etcd --------------------------------------------------------------------------------
if [ "$API_ONLY" = 0 ]; then
  rm -rf "$ETCD_DATA_DIR"
  mkdir -p "$ETCD_DATA_DIR"
  echo "$ETCD_DATA_DIR" > "$DIR/etcd-data-dir"
  nohup "$BIN/etcd" --name kube137 --data-dir "$ETCD_DATA_DIR" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "kube137=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
    --quota-backend-bytes=4294967296 --log-level=warn \
    > "$LOG/etcd.log" 2>&1 &
  echo $! > "$DIR/etcd.pid"
  for i in $(seq 1 40); do
    alive "$DIR/etcd.pid" || { tail -20 "$LOG/etcd.log" >&2; die "etcd exited"; }
    curl -sf "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"' && break
    [ "$i" = 40 ] && die "etcd not healthy after 20 s (log $LOG/etcd.log)"
    sleep 0.5
  done
  echo "etcd up (pid $(cat "$DIR/etcd.pid"), http://127.0.0.1:$ETCD_PORT, data $ETCD_DATA_DIR)"
fi

# ---- kube-apiserver ----------------------------------------------------------------------
# The default admission chain (ServiceAccount, NamespaceLifecycle, LimitRanger, Priority,
# DefaultTolerationSeconds, TaintNodesByCondition, PodSecurity, ResourceQuota, the webhooks,
# ValidatingAdmissionPolicy, MutatingAdmissionPolicy, ...): the controller-manager and KWOK
# do what a cluster's kubelets and controllers do for it. NodeRestriction added.
if [ -f "$LOG/kube-apiserver.log" ]; then mv "$LOG/kube-apiserver.log" "$LOG/kube-apiserver.log.1"; fi
nohup "$BIN/kube-apiserver" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" --etcd-compaction-interval="$COMPACTION_INTERVAL" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" --cert-dir="$PKI" \
  --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --endpoint-reconciler-type=none \
  --token-auth-file="$DIR/tokens.csv" --enable-bootstrap-token-auth=false \
  --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --enable-admission-plugins=NodeRestriction \
  --feature-gates="$FEATURE_GATES" --runtime-config="$RUNTIME_CONFIG" \
  --allow-privileged=true --profiling=false \
  -v="${APISERVER_V:-1}" \
  > "$LOG/kube-apiserver.log" 2>&1 &
echo $! > "$DIR/kube-apiserver.pid"
t0=$(date +%s)
for i in $(seq 1 180); do
  alive "$DIR/kube-apiserver.pid" || { tail -30 "$LOG/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
  if [ "$(curl -s --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(tok 1)" "$SERVER/readyz" 2>/dev/null)" = ok ]; then
    break
  fi
  [ "$i" = 180 ] && die "kube-apiserver /readyz not ok after 90 s (log $LOG/kube-apiserver.log)"
  sleep 0.5
done
echo "kube-apiserver ready in $(( $(date +%s) - t0 )) s (pid $(cat "$DIR/kube-apiserver.pid"), $SERVER, log $LOG/kube-apiserver.log)"
if [ "$API_ONLY" = 1 ]; then exit 0; fi

# ---- kube-controller-manager -------------------------------------------------------------
# every controller on by default (none needs a cloud: 1.37 has no in-tree cloud provider);
# each uses its own service account's credentials, as in kubeadm clusters
nohup "$BIN/kube-controller-manager" \
  --kubeconfig="$DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$DIR/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --cert-dir="$DIR/kcm-certs" \
  --leader-elect=false --use-service-account-credentials=true --controllers='*' \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --feature-gates="$FEATURE_GATES" \
  --kube-api-qps="${KCM_QPS:-20}" --kube-api-burst="${KCM_BURST:-30}" \
  -v="${KCM_V:-1}" \
  > "$LOG/kube-controller-manager.log" 2>&1 &
echo $! > "$DIR/kube-controller-manager.pid"

# ---- KWOK --------------------------------------------------------------------------------
# manages the Nodes annotated kwok.x-k8s.io/node=fake: Ready, a Lease renewed every ~10 s,
# pods bound to them Running, deleted pods removed (kwok's default stages)
nohup "$BIN/kwok" \
  --kubeconfig="$DIR/kwok.kubeconfig" --config="$STAGES" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.1 --cidr=10.244.0.1/16 --node-lease-duration-seconds=40 \
  --server-address="127.0.0.1:$KWOK_PORT" \
  -v="${KWOK_V:-INFO}" \
  > "$LOG/kwok.log" 2>&1 &
echo $! > "$DIR/kwok.pid"

wait_healthy kube-controller-manager "$DIR/kube-controller-manager.pid" "https://127.0.0.1:$KCM_PORT/healthz" 60
echo "kube-controller-manager up (pid $(cat "$DIR/kube-controller-manager.pid"), log $LOG/kube-controller-manager.log)"
wait_healthy kwok "$DIR/kwok.pid" "http://127.0.0.1:$KWOK_PORT/healthz" 60
echo "kwok up (pid $(cat "$DIR/kwok.pid"), log $LOG/kwok.log)"
# the token controller has issued the default namespace's service account
for i in $(seq 1 60); do
  api GET /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 && break
  [ "$i" = 60 ] && die "no default service account after 30 s (log $LOG/kube-controller-manager.log)"
  sleep 0.5
done

create_nodes "$NODES"
if [ "$WITH_SCHED" = 1 ]; then start_scheduler; fi
echo "state dir: $DIR   (source $DIR/env.sh for tokens; stop with stop.sh -d $DIR)"
echo "$KCFG"
