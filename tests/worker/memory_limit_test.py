#!/usr/bin/env python3
"""A case that does not fit under the container's memory limit fails as OutOfMemory, naming the
limit, instead of being killed by the kernel's OOM killer; a case that fits under the same limit
runs. The limit is real: a memory cgroup made for the test below this process's own (cgroup v1
memory.limit_in_bytes or v2 memory.max), as a pod's limit is. Where no child cgroup can be made
with a memory limit (a read-only /sys/fs/cgroup, v2 without the memory controller delegated), the
test says SKIPPED and why.

With --ranks 2 both ranks run under mpirun in one cgroup, as the ranks of a pod do: the first
to make its buffers takes the memory, the second is refused (large host buffers are checked and
made one at a time on a node), and every rank learns it before any waits in a collective, so
rank 0's result says OutOfMemory and the job ends; two small ranks fit and run.

With one rank the input pipeline's buffers are held to the limit as well: four 8000 x 8000 PNGs
(183.1 MiB of RGB each, decoded whole; written here, a few hundred KiB each) on four decoding
threads beside a small case do not fit,
and the decoding buffer that would have passed the limit is refused with its size.

    memory_limit_test.py PATH/dlbench-worker [--ranks 2]
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

worker = sys.argv[1]
ranks = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--ranks" else 1
# ResNet-50's weights and optimizer state take about 0.3 GiB a rank, and the process about as much
# again; batch 64's activations about 4.9 GiB, batch 16's 1.2: one rank of batch 16 fits in 2 GiB, two do not.
LIMIT, BIG_BATCH = (1 << 30, 64) if ranks == 1 else (2 << 30, 16)


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(0)


def own_memory_cgroup():
    """(directory, limit file) of this process's memory cgroup, v1 or v2."""
    with open("/proc/self/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    for hierarchy, controllers, path in lines:
        if "memory" in controllers.split(","):
            for mount in (f"/sys/fs/cgroup/{controllers}", "/sys/fs/cgroup/memory"):
                for d in (mount + path, mount):
                    if os.path.isfile(os.path.join(d, "memory.limit_in_bytes")):
                        return d, "memory.limit_in_bytes"
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                d = mount + path
                if os.path.isdir(d):
                    return d, "memory.max"
    return None, None


def write_flat_png(path, width, height, rgb):
    """An 8-bit RGB PNG of one colour: a few hundred KiB of file, width x height x 3 bytes decoded."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    deflate = zlib.compressobj(1)
    idat = b"".join(deflate.compress(row) for _ in range(height)) + deflate.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def decoding_refused(run_limited, common, tmp):
    """A case that fits whose decoding threads' buffers do not: OutOfMemory, asking for one image's pixels."""
    folder = os.path.join(tmp, "large", "a")
    os.makedirs(folder)
    for i in range(4):
        write_flat_png(os.path.join(folder, f"scan{i}.png"), 8000, 8000, (40 * i, 90, 200))
    result, done = run_limited(common + ["--batch-size", "2", "--image-size", "32", "--data", "imagefolder",
                                         "--data-path", os.path.dirname(folder), "--decode-threads", "4"],
                               os.path.join(tmp, "decoding.json"))
    message = result.get("message", "")
    if result.get("state") != "Failed" or result.get("reason") != "OutOfMemory":
        sys.exit(f"FAILED: four 8000 x 8000 PNGs on four decoding threads under {limit_file} {LIMIT} ended "
                 f"{result.get('state')} {result.get('reason')!r}: {message}\n{done.stderr[-2000:]}")
    if "asked for 183.1 MiB to read " not in message or f"{os.sep}scan" not in message:
        sys.exit(f"FAILED: the refusal does not name one image's decoded pixels (183.1 MiB) and its file: {message}")
    return f"; four 8000 x 8000 PNGs' decoding refused ({message})"


parent, limit_file = own_memory_cgroup()
if parent is None:
    skip("no memory cgroup in /proc/self/cgroup")
child = os.path.join(parent, f"dlbench-memory-limit-test-{os.getpid()}")
try:
    os.mkdir(child)
except OSError as e:
    skip(f"cannot make a cgroup under {parent}: {e}")
try:
    try:
        with open(os.path.join(child, limit_file), "w") as f:
            f.write(str(LIMIT))
    except OSError as e:
        skip(f"cannot set {limit_file} in {child}: {e}")
    # cgroup v2 may refuse a process there (no delegation, or "no internal processes").
    joined = subprocess.run(["sh", "-c", f'echo $$ > "{child}/cgroup.procs"'], capture_output=True, text=True)
    if joined.returncode != 0:
        skip(f"cannot move a process into {child}: {joined.stderr.strip()}")

    def run_limited(args, result_path):
        # The shell joins the cgroup, then becomes the worker: every byte the worker takes is charged there.
        script = f'echo $$ > "{child}/cgroup.procs" && exec "$@"'
        launcher = [] if ranks == 1 else ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        try:
            done = subprocess.run(["sh", "-c", script, "sh", *launcher, worker, *args, "--output", result_path],
                                  capture_output=True, text=True, timeout=240, env=env)
        except subprocess.TimeoutExpired as e:
            sys.exit(f"FAILED: {ranks} rank(s) under {limit_file} {LIMIT} still ran after 240 s (a rank waiting "
                     f"in a collective for one that failed?):\n{(e.stderr or b'')[-2000:]!r}")
        if done.returncode < 0 or done.returncode == 137:
            sys.exit(f"FAILED: the worker was killed (exit {done.returncode}) under {limit_file} "
                     f"{LIMIT}:\n{done.stderr[-2000:]}")
        try:
            with open(result_path) as f:
                return json.load(f), done
        except FileNotFoundError:
            sys.exit(f"FAILED: no result from {ranks} rank(s) (exit {done.returncode}):\n{done.stderr[-2000:]}")

    common = ["--model", "resnet50", "--warmup-steps", "0", "--measure-steps", "1", "--repeats", "1",
              "--threads", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        big, done = run_limited(common + ["--batch-size", str(BIG_BATCH)], os.path.join(tmp, "big.json"))
        state = big.get("state")
        reason, message = big.get("reason", ""), big.get("message", "")
        if state != "Failed" or reason != "OutOfMemory":
            sys.exit(f"FAILED: {ranks} rank(s) of batch {BIG_BATCH} under a {LIMIT >> 30} GiB limit ended {state} "
                     f"{reason!r}: {message}\n{done.stderr[-2000:]}")
        for words in (f"at batch size {BIG_BATCH}", "asked for", limit_file, f"{LIMIT >> 30}.00 GiB", "working set"):
            if words not in message:
                sys.exit(f"FAILED: the OutOfMemory message does not say {words!r}: {message}")
        small, done = run_limited(common + ["--batch-size", "2", "--image-size", "32"], os.path.join(tmp, "small.json"))
        if small.get("state") != "Succeeded":
            sys.exit(f"FAILED: {ranks} rank(s) of batch 2 at 32 pixels under the same limit ended {small.get('state')} "
                     f"{small.get('reason')!r}: {small.get('message')}\n{done.stderr[-2000:]}")
        decoded = ""
        if ranks == 1:
            decoded = decoding_refused(run_limited, common, tmp)
    print(f"PASSED: {ranks} rank(s) under {limit_file} {LIMIT} in {child}: batch {BIG_BATCH} refused ({message}); "
          f"batch 2 ran{decoded}")
finally:
    # Whatever a failed run left in the cgroup goes with it.
    for attempt in range(50):
        try:
            with open(os.path.join(child, "cgroup.procs")) as f:
                for pid in f.read().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
            os.rmdir(child)
            break
        except OSError:
            time.sleep(0.1)
