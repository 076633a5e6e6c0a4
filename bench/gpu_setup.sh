# Sourced by bench/gpu_resnet50.sh and bench/gpu_bert.sh: their arguments (BIN_DIR [WARMUP MEASURE
# REPEATS]; defaults 20, 100, 7), the bundle's libraries on LD_LIBRARY_PATH, a results file removed
# on exit, and the GPU named at the top of the output. Sets bin, warmup, measure, repeats, here
# (bench/) and results.
bin=${1:?usage: $0 BIN_DIR [WARMUP MEASURE REPEATS]}
warmup=${2:-20}
measure=${3:-100}
repeats=${4:-7}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$(dirname "$bin")/lib:${LD_LIBRARY_PATH:-}"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
