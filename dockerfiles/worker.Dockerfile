# dlbench-worker: the image of both MPI roles the operator creates. Worker pods run sshd (as
# root, with the capabilities the operator grants); the launcher Job runs `dlbench launch --
# mpirun ... dlbench-worker ...` from the same image. One distribution for both targets:
# Debian 12 (bookworm), with Debian's oneDNN for the CPU backend.
#
#   cpu   the CPU backend only (oneDNN, Open MPI): CI builds and runs it (tests/images)
#           buildah build --target cpu --build-arg DLBENCH_SOURCE_REVISION="$(scripts/source-revision.sh)" \
#             -f dockerfiles/worker.Dockerfile -t dlbench-worker:0.1.0-cpu .
#   cuda  the default: the CUDA backend and NCCL too, from NVIDIA's CUDA, cuDNN and NCCL packages
#         for Debian 12
#           buildah build --build-arg CUDA_REPO=<NVIDIA's CUDA network repository for debian12/x86_64> \
#             -f dockerfiles/worker.Dockerfile -t dlbench-worker:0.1.0 .
#
# Build arguments:
#   DEBIAN              Debian release (default bookworm; the runtime package names are bookworm's)
#   CUDA_REPO           (cuda) the apt repository URL NVIDIA's CUDA installation guide gives for
#                       "Network Repo Installation for Debian 12": required, no default
#   CUDA_MAJOR_MINOR    (cuda) CUDA version of the packages, dash-separated (default 13-0)
#   CUDA_ARCHITECTURES  (cuda) GPU code generated (default "80;90": A100 sm_80, H100/H200 sm_90)
#   DLBENCH_SOURCE_REVISION
#                       the revision built, as the programs' --version and every result's
#                       environment.dlbenchVersion say it: scripts/source-revision.sh's output (the
#                       build context has no .git); without it they say "+unknown"
#
# The build stages compile through ccache (CMakeLists.txt uses it where it is found) into a build
# cache mount (RUN --mount=type=cache: BuildKit, buildah, podman) that both targets and the
# operator's image share, so a rebuild after a change compiles only what the change touched.
# ccache keys each object by its preprocessed source, its compiler and its flags.
ARG DEBIAN=bookworm

# ---- the parts every target shares --------------------------------------------------------
FROM debian:${DEBIAN} AS build-base
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates ccache \
      nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libssl-dev libcpp-httplib-dev \
      libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libhdf5-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src

FROM debian:${DEBIAN}-slim AS runtime-base
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openmpi-bin libopenmpi3 openssh-server openssh-client \
      libdnnl2 libyaml-cpp0.7 libgomp1 libssl3 libturbojpeg0 libjpeg62-turbo libpng16-16 libwebp7 libwebpdemux2 \
      libhdf5-103-1 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /run/sshd \
 && ssh-keygen -A
# The operator sets the command of each role: sshd for workers, `dlbench launch` for the launcher.
EXPOSE 22 9400
CMD ["dlbench-worker", "--help"]

# ---- cpu -------------------------------------------------------------------------------------
FROM build-base AS build-cpu
COPY . .
# MPI is required (ON): a missing piece fails the build instead of leaving the communicator out.
ARG DLBENCH_SOURCE_REVISION=
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLBENCH_BUILD_TESTS=OFF \
      -DDLBENCH_WITH_CUDA=OFF -DDLBENCH_WITH_MPI=ON -DDLBENCH_SOURCE_REVISION="${DLBENCH_SOURCE_REVISION}" \
 && cmake --build /build --target dlbench-worker dlbench dlbench-exec dlbench-input \
 && strip /build/bin/dlbench-worker /build/bin/dlbench /build/bin/dlbench-exec /build/bin/dlbench-input

FROM runtime-base AS cpu
COPY --from=build-cpu /build/bin/dlbench-worker /build/bin/dlbench /build/bin/dlbench-exec /build/bin/dlbench-input /usr/local/bin/
# engine: command — what `dlbench-exec --install` copies into the user's pods beside the shim.
COPY --from=build-cpu /build/share/dlbench /usr/local/share/dlbench
ARG DLBENCH_SOURCE_REVISION=
LABEL org.opencontainers.image.title="dlbench-worker" org.opencontainers.image.revision="${DLBENCH_SOURCE_REVISION}"

# ---- cuda (the default target) ----------------------------------------------------------------
FROM build-base AS build-cuda
ARG CUDA_REPO
ARG CUDA_MAJOR_MINOR=13-0
ARG CUDA_ARCHITECTURES="80;90"
# NVIDIA's repository, trusted through its own keyring package.
RUN test -n "${CUDA_REPO}" || { echo "--build-arg CUDA_REPO=<NVIDIA's CUDA repository for Debian 12> is required" >&2; exit 1; } \
 && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \
 && curl -fsSL -o /tmp/cuda-keyring.deb "${CUDA_REPO%/}/cuda-keyring_1.1-1_all.deb" \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cuda-nvcc-${CUDA_MAJOR_MINOR} cuda-cudart-dev-${CUDA_MAJOR_MINOR} libcublas-dev-${CUDA_MAJOR_MINOR} \
      cudnn9-cuda-${CUDA_MAJOR_MINOR%-*} libnccl-dev libnccl2 \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# CUDA and MPI are required (ON), so a missing piece fails the build instead of leaving the
# NCCL communicator out.
ARG DLBENCH_SOURCE_REVISION=
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLBENCH_BUILD_TESTS=OFF \
      -DDLBENCH_WITH_CUDA=ON -DDLBENCH_WITH_MPI=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
      -DDLBENCH_SOURCE_REVISION="${DLBENCH_SOURCE_REVISION}" \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
 && cmake --build /build --target dlbench-worker dlbench dlbench-exec dlbench-input \
 && strip /build/bin/dlbench-worker /build/bin/dlbench /build/bin/dlbench-exec /build/bin/dlbench-input

FROM runtime-base AS cuda
ARG CUDA_REPO
ARG CUDA_MAJOR_MINOR=13-0
COPY --from=build-cuda /usr/share/keyrings/cuda-archive-keyring.gpg /usr/share/keyrings/
COPY --from=build-cuda /etc/apt/sources.list.d/cuda-debian12-x86_64.list /etc/apt/sources.list.d/
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cuda-cudart-${CUDA_MAJOR_MINOR} libcublas-${CUDA_MAJOR_MINOR} libcudnn9-cuda-${CUDA_MAJOR_MINOR%-*} libnccl2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-cuda /build/bin/dlbench-worker /build/bin/dlbench /build/bin/dlbench-exec /build/bin/dlbench-input /usr/local/bin/
COPY --from=build-cuda /build/share/dlbench /usr/local/share/dlbench
ARG DLBENCH_SOURCE_REVISION=
LABEL org.opencontainers.image.title="dlbench-worker" org.opencontainers.image.revision="${DLBENCH_SOURCE_REVISION}"
ENV LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/nvidia/lib64
# Every process an MPI job starts over ssh (orted, then dlbench-worker) gets the same paths.
RUN printf 'PATH=%s\nLD_LIBRARY_PATH=%s\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/cuda/bin" \
      "/usr/local/cuda/lib64:/usr/local/nvidia/lib64" > /etc/environment
