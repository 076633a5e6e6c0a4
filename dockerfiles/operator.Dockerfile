# dlbench-operator: a small Debian runtime with the operator alone, running as a non-root user.
#
#   docker build --build-arg DLBENCH_SOURCE_REVISION="$(scripts/source-revision.sh)" \
#     -f dockerfiles/operator.Dockerfile -t dlbench-operator:0.1.0 .
#
# The build stage compiles through ccache (CMakeLists.txt uses it where it is found) into a build
# cache mount (RUN --mount=type=cache: BuildKit, buildah, podman), so a rebuild after a change
# compiles only what the change touched. ccache keys each object by its preprocessed source, its
# compiler and its flags.
#
# Build arguments:
#   DEBIAN   Debian release of both stages (default bookworm; the runtime package names below
#            are bookworm's)
#   DLBENCH_SOURCE_REVISION
#            the revision built, as `dlbench-operator --version`, its log and its
#            dlbench_operator_build_info metric say it: scripts/source-revision.sh's output (the
#            build context has no .git); without it they say "+unknown"
ARG DEBIAN=bookworm

FROM debian:${DEBIAN} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ccache \
      nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libssl-dev libcpp-httplib-dev libdnnl-dev ocl-icd-opencl-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libhdf5-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the operator is built; tests, CUDA and MPI stay out of this image.
ARG DLBENCH_SOURCE_REVISION=
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DDLBENCH_BUILD_TESTS=OFF -DDLBENCH_WITH_CUDA=OFF -DDLBENCH_WITH_MPI=OFF \
      -DDLBENCH_SOURCE_REVISION="${DLBENCH_SOURCE_REVISION}" \
 && cmake --build /build --target dlbench-operator \
 && strip /build/bin/dlbench-operator

FROM debian:${DEBIAN}-slim
# The shared libraries `ldd dlbench-operator` names (tests/integration/dockerfiles_test.py checks).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libcpp-httplib0.11 libyaml-cpp0.7 libssl3 libstdc++6 libgcc-s1 zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/bin/dlbench-operator /usr/local/bin/dlbench-operator
ARG DLBENCH_SOURCE_REVISION=
LABEL org.opencontainers.image.title="dlbench-operator" org.opencontainers.image.revision="${DLBENCH_SOURCE_REVISION}"
# The chart's securityContext runs it as 65532 with a read-only root filesystem; so does this.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/dlbench-operator"]
