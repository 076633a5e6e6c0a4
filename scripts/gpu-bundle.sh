#!/usr/bin/env bash
# Packs what a GPU machine without Debian's packages needs to run dlbench's GPU checks: the
# stripped programs of a CUDA build and every shared library they load that is neither CUDA's
# (the GPU machine has its own cuDNN, cuBLAS, NCCL, runtime) nor the C runtime's.
#
#   scripts/gpu-bundle.sh [BUILD_DIR] [OUT_DIR]      (defaults: build/default, build/gpu-bundle)
#
# On the GPU machine: LD_LIBRARY_PATH=OUT_DIR/lib OUT_DIR/bin/dlbench_cuda_backend_tests, and
# bench/gpu_check.sh OUT_DIR LOG_DIR. The device tool carries at most 64 MiB with the working tree
# (about 4 MiB), and the bundle is near 60 MiB, most of it oneDNN: OUT_DIR.tar.xz holds the same
# files in about a fifth of that, and bench/gpu_check.sh takes it in OUT_DIR's place (it unpacks
# with Python's tarfile, which every GPU image with PyTorch has). The sizes are printed.
set -euo pipefail

build=${1:-build/default}
out=${2:-build/gpu-bundle}
# Every program bench/gpu_check.sh runs from the bundle (bench.GpuCheckRehearsal rehearses the check
# with exactly these).
programs=(dlbench-worker dlbench dlbench-exec dlbench-input dlbench_cuda_backend_tests dlbench_gpu_tests conv_fusion_probe)

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for program in "${programs[@]}"; do
  [[ -x "$build/bin/$program" ]] || { echo "gpu-bundle: $build/bin/$program is missing (a CUDA build?)" >&2; exit 1; }
  strip -o "$out/bin/$program" "$build/bin/$program"
done

# What the loader resolves, minus what every Linux (glibc, the C++ runtime) and the GPU image
# (CUDA's libraries, the driver) already have.
# The examples and the marker helper, where `dlbench run` finds them for engine: command (DLBENCH_HOME).
mkdir -p "$out/share/dlbench"
cp -r "$build/share/dlbench/examples" "$out/share/dlbench/"

for program in "${programs[@]}"; do
  { ldd "$build/bin/$program" 2>/dev/null || true; } | awk '/=> \// {print $3}'  # dlbench-exec is static: ldd says so and fails
done | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
    libcuda.so*|libcudart.so*|libcudnn*.so*|libcublas*.so*|libnccl.so*|libnvidia*|libOpenCL.so*) continue ;;
  esac
  cp -L "$library" "$out/lib/"
done

# Every library a bundled program needs must now resolve from the bundle or the excluded set.
missing=$(for program in "$out"/bin/*; do LD_LIBRARY_PATH="$out/lib" ldd "$program" 2>/dev/null | grep "not found" || true; done)
[[ -z "$missing" ]] || { echo "gpu-bundle: unresolved: $missing" >&2; exit 1; }
du -sh "$out/bin" "$out/lib"
du -sb "$out" | awk '{printf "gpu-bundle: %.1f MiB in %s\n", $1 / 1048576, $2}'
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 > "$out.tar.xz"
du -sb "$out.tar.xz" | awk '{printf "gpu-bundle: %.1f MiB in %s (carry this one)\n", $1 / 1048576, $2}'
