# dlbench-worker: the image of both MPI roles the operator creates. Worker pods run sshd (as
# root, with the capabilities the operator grants); the launcher Job runs `dlbench launch --
# mpirun ... dlbench-worker ...` from the same image.
#
#   docker build -f dockerfiles/worker.Dockerfile -t dlbench-worker:0.1.0 .
#
# Build arguments:
#   CUDA_VERSION          NVIDIA CUDA base image version (default 13.0.2, with cuDNN 9)
#   UBUNTU                Ubuntu release of the base images (default 24.04; the runtime package
#                         names below are noble's)
#   CUDA_ARCHITECTURES    GPU code generated (default "80;90": A100 sm_80, H100/H200 sm_90)
#   ONEDNN_VERSION        oneDNN release for the CPU backend, built from source because the CPU
#                         backend is written against the oneDNN 2.x API (default v2.7.5)
ARG CUDA_VERSION=13.0.2
ARG UBUNTU=24.04

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu${UBUNTU} AS build
ARG CUDA_ARCHITECTURES="80;90"
ARG ONEDNN_VERSION=v2.7.5
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      nlohmann-json3-dev libyaml-cpp-dev libssl-dev libopenmpi-dev openmpi-bin \
 && rm -rf /var/lib/apt/lists/*
RUN git clone --depth 1 --branch ${ONEDNN_VERSION} https://github.com/oneapi-src/oneDNN.git /tmp/onednn \
 && cmake -S /tmp/onednn -B /tmp/onednn/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=/opt/onednn -DONEDNN_BUILD_TESTS=OFF -DONEDNN_BUILD_EXAMPLES=OFF \
 && cmake --build /tmp/onednn/build --target install \
 && rm -rf /tmp/onednn
WORKDIR /src
COPY . .
# CUDA and MPI are required here (ON), so a missing piece fails the build instead of leaving the
# NCCL communicator out.
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLBENCH_BUILD_TESTS=OFF \
      -DDLBENCH_WITH_CUDA=ON -DDLBENCH_WITH_MPI=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
      -DCMAKE_PREFIX_PATH=/opt/onednn \
 && cmake --build /build --target dlbench-worker dlbench \
 && strip /build/bin/dlbench-worker /build/bin/dlbench

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu${UBUNTU}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openmpi-bin libopenmpi3t64 openssh-server openssh-client \
      libyaml-cpp0.8 libgomp1 libssl3t64 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /run/sshd \
 && ssh-keygen -A
COPY --from=build /opt/onednn/lib/ /opt/onednn/lib/
COPY --from=build /build/bin/dlbench-worker /build/bin/dlbench /usr/local/bin/
ENV LD_LIBRARY_PATH=/opt/onednn/lib:${LD_LIBRARY_PATH}
# Every process an MPI job starts over ssh (orted, then dlbench-worker) gets the same paths.
RUN printf 'PATH=%s\nLD_LIBRARY_PATH=%s\n' "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/cuda/bin" \
      "/opt/onednn/lib:/usr/local/cuda/lib64:/usr/local/nvidia/lib64" > /etc/environment
# The operator sets the command of each role: sshd for workers, `dlbench launch` for the launcher.
EXPOSE 22 9400
CMD ["dlbench-worker", "--help"]
