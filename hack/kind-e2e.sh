#!/usr/bin/env bash
# The kind end-to-end run of multikueue-dispatcher (docs/kind-e2e.md).
#
# Creates three kind clusters (<prefix>-manager, <prefix>-worker1, <prefix>-worker2), installs a
# pinned Kueue release on each (plus the clear-nominated-cluster-names admission policy and our
# dispatcherName on the manager), builds and loads the dispatcher image, creates the worker
# service accounts, roles and tokens and the kubeconfig Secrets on the manager (server rewritten
# to the in-network address), deploys the dispatcher, runs the scenario suite (tests/e2e with
# --backend kind) and deletes the clusters (unless --keep).
#
#   hack/kind-e2e.sh [--dry-run] [--keep] [--prefix NAME] [-- PYTEST_ARGS...]
#
#   --dry-run   print every command, run none (needs neither docker nor kind)
#   --keep      keep the clusters afterwards (delete: kind delete clusters <names>)
#   --prefix    kind cluster name prefix (default: mkd)
set -euo pipefail

# --- pinned versions (contract C75, C83-C87) --------------------------------------------------
KIND_VERSION="${KIND_VERSION:-v0.32.0}"
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.1}"   # >= 1.36: MutatingAdmissionPolicy (C46)
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:${KUBERNETES_VERSION}}"
KUEUE_VERSION="${KUEUE_VERSION:-v0.19.2}"
KUEUE_RELEASE_URL="https://github.com/kubernetes-sigs/kueue/releases/download/${KUEUE_VERSION}"
KUEUE_MANIFESTS="${KUEUE_RELEASE_URL}/manifests.yaml"
KUEUE_WORKLOAD_MAP="${KUEUE_RELEASE_URL}/workload-map.yaml"
DISPATCHER_IMAGE="${DISPATCHER_IMAGE:-multikueue-dispatcher:e2e}"
AGNHOST_IMAGE="registry.k8s.io/e2e-test-images/agnhost:2.52"
DISPATCHER_NAME="multikueue-dispatcher.io/dispatcher"
WORKERS=(worker1 worker2)
# Fake GPU capacity per worker node (matches the worker ClusterQueues, tests/e2e/topology.yaml).
declare -A GPUS=([worker1]=2 [worker2]=4)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-${ROOT}/.venv/bin/python}"
DRY_RUN=0
KEEP=0
PREFIX="${KIND_PREFIX:-mkd}"
PYTEST_ARGS=()

usage() {
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --keep) KEEP=1 ;;
        --prefix) PREFIX="$2"; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

WORKDIR="${E2E_KIND_WORKDIR:-${TMPDIR:-/tmp}/mkd-kind-e2e/${PREFIX}}"
MANAGER="${PREFIX}-manager"

# run CMD...: print the command; run it unless --dry-run.
run() {
    printf '+ %s\n' "$*"
    if [[ "${DRY_RUN}" == 0 ]]; then
        "$@"
    fi
}

# pipe "CMD1" "CMD2": print and run CMD1 | CMD2 (each a single string for bash -c).
pipe() {
    printf '+ %s | %s\n' "$1" "$2"
    if [[ "${DRY_RUN}" == 0 ]]; then
        bash -c "set -euo pipefail; $1 | $2"
    fi
}

# capture PLACEHOLDER CMD...: print the command; echo its output (the placeholder in a dry run).
capture() {
    local placeholder="$1"
    shift
    printf '+ %s\n' "$*" >&2
    if [[ "${DRY_RUN}" == 0 ]]; then
        "$@"
    else
        printf '%s' "${placeholder}"
    fi
}

ctx() { printf 'kind-%s' "$1"; }

require() {
    local tool
    for tool in "$@"; do
        if ! command -v "${tool}" >/dev/null 2>&1; then
            echo "error: ${tool} is required (see docs/kind-e2e.md)" >&2
            exit 1
        fi
    done
}

teardown() {
    if [[ "${KEEP}" == 1 ]]; then
        echo "keeping the clusters: kind delete clusters ${MANAGER} ${WORKERS[*]/#/${PREFIX}-}"
        return
    fi
    run kind delete clusters "${MANAGER}" "${WORKERS[@]/#/${PREFIX}-}"
}

if [[ "${DRY_RUN}" == 0 ]]; then
    require docker kind kubectl "${PYTHON}"
    docker info >/dev/null 2>&1 || { echo "error: the docker daemon is not reachable" >&2; exit 1; }
    found="$(kind version)"
    [[ "${found}" == *"${KIND_VERSION}"* ]] || echo "warning: tested with kind ${KIND_VERSION}, found: ${found}" >&2
else
    echo "# dry run: commands are printed, not run"
fi
echo "# kind ${KIND_VERSION}, node image ${KIND_NODE_IMAGE}, Kueue ${KUEUE_VERSION}, prefix ${PREFIX}"
run make -C "${ROOT}" venv
run mkdir -p "${WORKDIR}"
trap teardown EXIT

# --- 1. clusters ------------------------------------------------------------------------------
run kind create cluster --name "${MANAGER}" --image "${KIND_NODE_IMAGE}" \
    --config "${ROOT}/kind-config/manager.kind.yaml" --wait 3m
for worker in "${WORKERS[@]}"; do
    run kind create cluster --name "${PREFIX}-${worker}" --image "${KIND_NODE_IMAGE}" \
        --config "${ROOT}/kind-config/${worker}.kind.yaml" --wait 3m
done

# --- 2. Kueue on every cluster (release manifests, C84) ----------------------------------------
for cluster in "${MANAGER}" "${WORKERS[@]/#/${PREFIX}-}"; do
    run kubectl --context "$(ctx "${cluster}")" apply --server-side -f "${KUEUE_MANIFESTS}"
    run kubectl --context "$(ctx "${cluster}")" -n kueue-system wait \
        deploy/kueue-controller-manager --for=condition=available --timeout=5m
done

# The manager: the clear-nominated-cluster-names policy (C46, Kubernetes >= 1.36) and our
# dispatcherName in kueue-manager-config (C5), then a restart of Kueue.
run kubectl --context "$(ctx "${MANAGER}")" apply --server-side -f "${KUEUE_WORKLOAD_MAP}"
pipe "kubectl --context $(ctx "${MANAGER}") -n kueue-system get configmap kueue-manager-config -o json" \
    "${PYTHON} ${ROOT}/hack/kueue_config.py --dispatcher-name ${DISPATCHER_NAME} | kubectl --context $(ctx "${MANAGER}") apply -f -"
run kubectl --context "$(ctx "${MANAGER}")" -n kueue-system rollout restart deploy/kueue-controller-manager
run kubectl --context "$(ctx "${MANAGER}")" -n kueue-system rollout status deploy/kueue-controller-manager --timeout=5m

# --- 3. images ---------------------------------------------------------------------------------
run docker build -t "${DISPATCHER_IMAGE}" "${ROOT}"
run kind load docker-image "${DISPATCHER_IMAGE}" --name "${MANAGER}"
run docker pull "${AGNHOST_IMAGE}"
for worker in "${WORKERS[@]}"; do
    run kind load docker-image "${AGNHOST_IMAGE}" --name "${PREFIX}-${worker}"
done

# --- 4. workers: identities for Kueue and the dispatcher, fake GPUs, queues --------------------
for worker in "${WORKERS[@]}"; do
    context="$(ctx "${PREFIX}-${worker}")"
    node="${PREFIX}-${worker}-worker"
    run kubectl --context "${context}" apply -k "${ROOT}/manifests/worker"
    for field in capacity allocatable; do
        run kubectl --context "${context}" patch node "${node}" --subresource=status --type=json \
            -p "[{\"op\":\"add\",\"path\":\"/status/${field}/nvidia.com~1gpu\",\"value\":\"${GPUS[${worker}]}\"}]"
    done
    run kubectl --context "${context}" apply --server-side -k "${ROOT}/manifests/samples/${worker}"
    run kubectl --context "${context}" -n kueue-system wait secret/multikueue-sa-token \
        --for=jsonpath='{.data.token}' --timeout=1m
    token="$(capture '<token>' kubectl --context "${context}" -n kueue-system get secret \
        multikueue-sa-token -o 'jsonpath={.data.token}')"
    ca="$(capture '<ca-data>' kubectl --context "${context}" -n kueue-system get secret \
        multikueue-sa-token -o 'jsonpath={.data.ca\.crt}')"
    # The server as the manager's pods reach it: the worker's control-plane container on the
    # docker network "kind" (C67), not the host-mapped port of `kind get kubeconfig`.
    echo "+ write ${WORKDIR}/${worker}.in-cluster.kubeconfig (server https://${PREFIX}-${worker}-control-plane:6443)"
    if [[ "${DRY_RUN}" == 0 ]]; then
        umask 077
        token="$(printf '%s' "${token}" | base64 -d)"
        cat >"${WORKDIR}/${worker}.in-cluster.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: ${worker}
    cluster:
      server: https://${PREFIX}-${worker}-control-plane:6443
      certificate-authority-data: ${ca}
users:
  - name: multikueue-sa
    user:
      token: ${token}
contexts:
  - name: ${worker}
    context: {cluster: ${worker}, user: multikueue-sa}
current-context: ${worker}
KUBECONFIG
    fi
    pipe "kubectl --context $(ctx "${MANAGER}") -n kueue-system create secret generic ${worker}-kubeconfig --from-file=kubeconfig=${WORKDIR}/${worker}.in-cluster.kubeconfig --dry-run=client -o yaml" \
        "kubectl --context $(ctx "${MANAGER}") apply -f -"
done

# --- 5. manager: MultiKueue objects and queues, then the dispatcher ----------------------------
run kubectl --context "$(ctx "${MANAGER}")" apply --server-side -k "${ROOT}/manifests/samples/manager"
run kubectl --context "$(ctx "${MANAGER}")" wait multikueuecluster --all --for=condition=Active --timeout=5m
run kubectl --context "$(ctx "${MANAGER}")" apply -k "${ROOT}/manifests/overlays/kind"
run kubectl --context "$(ctx "${MANAGER}")" -n multikueue-dispatcher-system rollout status \
    deploy/multikueue-dispatcher --timeout=5m

# --- 6. the scenario suite against these clusters ----------------------------------------------
for cluster in "${MANAGER}" "${WORKERS[@]/#/${PREFIX}-}"; do
    pipe "kind get kubeconfig --name ${cluster}" "cat > ${WORKDIR}/${cluster#"${PREFIX}"-}.kubeconfig"
done
run env E2E_BACKEND=kind E2E_KIND_PREFIX="${PREFIX}" E2E_KIND_KUBECONFIG_DIR="${WORKDIR}" \
    "${PYTHON}" -m pytest "${ROOT}/tests/e2e" --backend kind "${PYTEST_ARGS[@]}"
