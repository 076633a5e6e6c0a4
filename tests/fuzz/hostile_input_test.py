#!/usr/bin/env python3
"""Hostile input against every parser and command line: each input ends in exit 1 or 2 with a
message that names the file (or the flag) and the problem, within a CPU-time and memory bound,
never a crash, a hang or a blow-up.

The corpus: YAML and JSON syntax errors, alias cycles and alias bombs, deep nesting, huge and tiny
numbers, invalid UTF-8, control characters and NUL, binary garbage, empty and enormous files,
wrong types at the top, tags, hostile worker flags, hostile Cityscapes trees (PNG headers that
claim 30000 x 30000 pixels, truncated and mislabelled files, labels of another size), hostile
ImageFolder JPEGs (headers that claim 65500 x 65500 pixels, 2,000 progressive scans, truncated,
empty, garbage, PNG bombs named .jpg) along each decoding path, and damaged BERT pretraining shards (HDF5 truncated,
bit-flipped, zeroed). Targets: `dlbench validate -f`, `dlbench run -f`, `dlbench report`,
`dlbench compare`, `dlbench-worker` flags and `dlbench-input measure` on ImageFolder trees, `--data
cityscapes` and `--data bertpretraining`.

Bounds (core/include/dlbench/core/yaml.hpp documents the limits that keep them): at most
2 s of CPU time per input, and a peak RSS at most 256 MiB above what the program takes to start
(its --help: about 4 MiB for dlbench, about 19 MiB for a CUDA build's dlbench-worker, which
opens cuBLASLt only for a CUDA backend); a 20 s wall clock catches a hang. Programs are started
by a small runner process that exists before the corpus does, because a child's peak RSS
includes its parent's pages at fork time.

Usage: hostile_input_test.py DLBENCH DLBENCH_WORKER
"""
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "input"))
import damage  # noqa: E402  (tests/input/damage.py)

CPU_SECONDS = 2.0
PEAK_RSS_MIB = 256
WALL_SECONDS = 20

VALID_HEAD = "apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {name: probe}\n"


def spec(text):
    return (VALID_HEAD + text).encode()


def billion_laughs(levels=9, width=9):
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return ("\n".join(lines) + "\n").encode()


def corpus():
    rng = random.Random(1234)
    c = {
        # syntax
        "unclosed-flow.yaml": b"a: [1, 2\n",
        "unclosed-map.yaml": b"{a: 1\n",
        "mapping-in-scalar.yaml": b"a: b: c\n",
        "tab-indent.yaml": b"spec:\n\tmodel: resnet50\n",
        "unterminated-quote.yaml": b'metadata: {name: "probe\n',
        "bad-indent.yaml": b"spec:\n  model: x\n model: y\n",
        "json-trailing-comma.json": b'{"apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun",}',
        "json-missing-value.json": b'{"a": }',
        "json-truncated.json": b'{"spec": {"model": "resnet50", "matrix": {"batchSizePerDevice": [8',
        "complex-key.yaml": b"? [a, b]\n: c\n",
        # aliases
        "alias-cycle.yaml": b"a: &a [*a]\n",
        "alias-cycle-map.yaml": b"a: &a {b: *a}\n",
        "alias-undefined.yaml": b"a: *nowhere\n",
        "alias-bomb.yaml": billion_laughs(),
        "alias-bomb-maps.yaml": ("\n".join(["m0: &m0 {k: v}"] + [
            f"m{i}: &m{i} {{" + ", ".join(f"k{j}: *m{i - 1}" for j in range(10)) + "}" for i in range(1, 9)]) + "\n").encode(),
        "merge-not-a-map.yaml": spec("spec:\n  <<: 5\n"),
        # nesting
        "deep-flow-seq.yaml": b"[" * 100_000,
        "deep-flow-map.yaml": b"{a: " * 50_000,
        "deep-block-seq.yaml": b"- " * 20_000 + b"x\n",
        "deep-json.json": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        # numbers
        "huge-float.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [1e999], precision: [fp32]}}\n"),
        "huge-int.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [99999999999999999999999999], precision: [fp32]}}\n"),
        "huge-negative.yaml": spec("spec: {model: resnet50, matrix: {nodes: [-1e400], batchSizePerDevice: [8], precision: [fp32]}}\n"),
        "huge-json-number.json": b'{"spec": {"model": "resnet50", "matrix": {"batchSizePerDevice": [1e99999], "precision": ["fp32"]}}}',
        "huge-warmup.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, optimizer: {learningRateWarmupSteps: 1e30}}\n"),
        "fractional-warmup.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, optimizer: {learningRateWarmupSteps: 0.5}}\n"),
        "tiny-lr.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, optimizer: {learningRate: 1e-400}}\n"),
        "nan-lr.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, optimizer: {learningRate: .nan}}\n"),
        "inf-repeats.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}, methodology: {repeats: .inf}}\n"),
        "hex-overflow.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [0xffffffffffffffffff], precision: [fp32]}}\n"),
        "float-batch.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8.5], precision: [fp32]}}\n"),
        # text
        "invalid-utf8-value.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [8], precision: [fp32]}}\n").replace(
            b"resnet50", b"res\xffnet"),
        "invalid-utf8-key.yaml": b"\xc3\x28: 1\n",
        "overlong-utf8.yaml": b"metadata: {name: \"\xc0\xaf\"}\n",
        "surrogate-utf8.yaml": b"metadata: {name: \"\xed\xa0\x80\"}\n",
        "nul-byte.yaml": spec("spec: {model: resnet50}\n").replace(b"probe", b"pr\x00be"),
        "control-chars.yaml": spec("spec: {model: \"res\\x01net\\x1b[31m\", matrix: {batchSizePerDevice: [8], precision: [fp32]}}\n"),
        "bidi-name.yaml": spec("").replace(b"probe", "pro\u202ebe".encode()) + b"spec: {model: resnet50}\n",
        "utf16-bom.yaml": "\ufeffa: 1\n".encode("utf-16"),
        "long-string.yaml": spec("spec: {model: \"" + "x" * 2_000_000 + "\"}\n"),
        # files
        "empty.yaml": b"",
        "whitespace.yaml": b"   \n\n\t\n",
        "comments-only.yaml": b"# nothing here\n# at all\n",
        "separators-only.yaml": b"---\n---\n...\n",
        "null-document.yaml": b"null\n",
        "many-empty-documents.yaml": b"---\n" * 200_000,
        "enormous.yaml": b"# " + b"x" * (9 << 20) + b"\n",
        "random-binary.bin": bytes(rng.getrandbits(8) for _ in range(64 << 10)),
        "random-ascii.yaml": bytes(rng.choice(b"{}[]:,-?&*!|>'\"%@` \n\tab01") for _ in range(64 << 10)),
        # shapes
        "top-level-list.yaml": b"- a\n- b\n",
        "top-level-scalar.yaml": b"42\n",
        "spec-is-number.yaml": spec("spec: 5\n"),
        "metadata-is-list.yaml": b"apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: [a]\nspec: {model: resnet50}\n",
        "unknown-tag.yaml": spec("spec: !frobnicate {model: resnet50}\n"),
        "python-tag.yaml": b"!!python/object/apply:os.system ['true']\n",
        "binary-tag.yaml": spec("spec: {model: !!binary aGVsbG8=}\n"),
        "int-tag-on-text.yaml": spec("spec: {model: !!int resnet50}\n"),
        "many-keys.yaml": ("spec:\n" + "".join(f"  k{i}: {i}\n" for i in range(300_000))).encode(),
        "wide-list.yaml": spec("spec: {model: resnet50, matrix: {batchSizePerDevice: [" + ",".join(["1"] * 400_000) + "], precision: [fp32]}}\n"),
    }
    return c


WORKER_FLAGS = [
    ["--learning-rate", "nan"], ["--learning-rate", "inf"], ["--learning-rate", "-inf"], ["--learning-rate", "1e999"],
    ["--learning-rate", ""], ["--momentum", "1"], ["--weight-decay", "NaN"], ["--batch-size", "99999999999999999999"],
    ["--batch-size", "-1"], ["--batch-size", "1.5"], ["--batch-size", ""], ["--image-size", "1e3"],
    ["--model", "res\xffnet"], ["--model"], ["--run", "A B"], ["--run", "a\x01b"], ["--run", "x" * 100],
    ["--seed", "-1"], ["--seed", "abc"], ["--metrics-port", "70000"], ["--threads", "-1"],
    ["--precision", "fp8"], ["--communicator", "gloo"], ["--\xff\xfe"], ["--repeats", "0"],
    ["--output"], ["--bucket-mb", "0"],
    ["--learning-rate-warmup-steps", "-1"], ["--learning-rate-warmup-steps", "1000001"],
    ["--learning-rate-warmup-steps", "1e99"], ["--learning-rate-warmup-steps", "99999999999999999999"],
]


def png(width, height, colour, rows=b"", repeat=1):
    """A PNG whose header says width x height (colour type 2: RGB, 0: grey) and whose data is `rows`
    `repeat` times, compressed, whatever their size: checksums right, so that only the claim is
    hostile. Compressed a row at a time: a 30000 x 30000 image is 900 MB raw."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    compressor = zlib.compressobj()
    data = b"".join(compressor.compress(rows) for _ in range(repeat)) + compressor.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def small_png(width, height, colour):
    """What its header says: width x height pixels of one grey."""
    channels = 3 if colour == 2 else 1
    return png(width, height, colour, b"\x00" + b"\x40" * (width * channels), repeat=height)


def cityscapes_trees():
    """Cityscapes trees of one pair each: (image bytes, label bytes), the trouble named by the pair.
    Made when asked, not as the module loads: the runner loads this file too, and every program it
    starts inherits its peak RSS as a floor (the bound would then hold nothing under it)."""
    return {
        "image-bomb": (png(30000, 30000, 2), small_png(30000, 30000, 0)),
        "label-bomb": (small_png(16, 16, 2), png(30000, 30000, 0)),
        "truncated": (small_png(64, 64, 2)[:60], small_png(64, 64, 0)),
        "other-size": (small_png(16, 16, 2), small_png(17, 16, 0)),
        "jpeg-named-png": (b"\xff\xd8\xff\xe0" + b"\x00" * 64, small_png(16, 16, 0)),
        "colour-label": (small_png(16, 16, 2), small_png(16, 16, 2)),
    }


def claiming_size(jpeg, width, height):
    """`jpeg` with its frame header (SOF0 or SOF2) claiming width x height: a decompression bomb in
    the few hundred bytes of a small image."""
    import struct
    at = 2
    while at + 9 < len(jpeg):
        marker, length = jpeg[at + 1], struct.unpack(">H", jpeg[at + 2:at + 4])[0]
        if marker in (0xC0, 0xC2):
            return jpeg[:at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9:]
        at += 2 + length
    raise ValueError("no frame header")


def with_scans(jpeg, scans):
    """A progressive `jpeg` with its first scan (the DC coefficients: the cheapest pass) repeated
    until it has `scans`: each is a pass over the whole image, and libjpeg reads a repeated one with
    only a warning. The refusal at scan 501 then costs a tenth of a second, where repeating the last
    scan took half a second to reach it."""
    first = jpeg.find(b"\xff\xda")
    second = jpeg.find(b"\xff\xda", first + 2)
    return jpeg[:second] + jpeg[first:second] * (scans - jpeg.count(b"\xff\xda")) + jpeg[second:]


def jpeg_troubles(baseline, progressive):
    """ImageFolder files, each alone in its class: bombs by their headers, a progressive file of
    2,000 scans, cut short, empty, garbage, and PNGs named .jpg, a bomb and a cut one."""
    return {"bomb-baseline.jpg": claiming_size(baseline, 65500, 65500),
            "bomb-progressive.jpg": claiming_size(progressive, 65500, 65500),
            "bomb-wide.jpg": claiming_size(progressive, 65500, 2733),
            "scans.jpg": with_scans(progressive, 2000),
            "truncated.jpg": baseline[:len(baseline) // 3],
            "empty.jpg": b"",
            "garbage.jpg": bytes(random.Random(5).randrange(256) for _ in range(4096)),
            # A PNG named .jpg is read as PNG (Pillow opens by content): a bomb and a cut one are refused.
            "png-bomb-named.jpg": png(30000, 30000, 2),
            "png-truncated-named.jpg": small_png(64, 64, 2)[:60]}


# The decoding paths a JPEG can take: the default (a crop's rows, DCT-scaled), whole-image decoding,
# no DCT scaling, and packed for a device that resizes.
JPEG_PATHS = {"default": [], "whole": ["--crop-only", "off"], "no-dct-scaling": ["--dct-scaling", "off"],
              "device": ["--resize-on", "device"]}


def shard_troubles(good):
    """A good HDF5 shard's bytes, damaged: truncated at several lengths, its signature kept over
    garbage, bytes flipped in its metadata and in its compressed chunks, and zeroed blocks."""
    rng = random.Random(11)
    troubles = {"empty": b"", "signature-only": good[:8], "signature-then-garbage": good[:8] + bytes(rng.randrange(256) for _ in range(4096))}
    for fraction in (0.02, 0.25, 0.5, 0.9, 0.99):
        troubles[f"truncated-{int(fraction * 100)}"] = good[:int(len(good) * fraction)]
    for i, (start, end) in enumerate(((0, 2048), (2048, len(good) // 2), (len(good) // 2, len(good)))):
        for j in range(4):
            damaged = bytearray(good)
            for _ in range(8 << j):
                at = rng.randrange(start, end)
                damaged[at] ^= 1 << rng.randrange(8)
            troubles[f"flipped-{i}-{j}"] = bytes(damaged)
    for i in range(3):
        damaged = bytearray(good)
        at = rng.randrange(0, len(good) - 512)
        damaged[at:at + 512] = bytes(512)
        troubles[f"zeroed-{i}"] = bytes(damaged)
    return troubles


def run_bounded(argv, cwd):
    """Runs argv; returns (exit code or -signal, stderr text, CPU seconds, peak RSS MiB, wall seconds)."""
    err_path = os.path.join(cwd, "stderr.txt")
    start = time.monotonic()
    with open(err_path, "wb") as err:
        process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                   start_new_session=True)
        deadline = start + WALL_SECONDS
        status = rusage = None
        while True:
            pid, status, rusage = os.wait4(process.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)
                pid, status, rusage = os.wait4(process.pid, 0)
                break
            time.sleep(0.01)
        process.returncode = 0  # reaped above
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    with open(err_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    return code, text, rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss / 1024, wall


def runner():
    """Runs each JSON argv line from stdin, answering one JSON result line."""
    import json
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(run_bounded(request["argv"], request["cwd"])), flush=True)


class Runner:
    def __init__(self):
        import json
        self.json = json
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--runner"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def run(self, argv, cwd):
        self.process.stdin.write(self.json.dumps({"argv": argv, "cwd": cwd}) + "\n")
        self.process.stdin.flush()
        return self.json.loads(self.process.stdout.readline())

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def main():
    if sys.argv[1] == "--runner":
        return runner()
    dlbench, worker = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    inputs = os.path.join(os.path.dirname(worker), "dlbench-input")
    # A runaway allocation must fail inside the test, not take the machine down: a 1 GiB data
    # limit. AddressSanitizer's shadow memory cannot live under it, so a sanitized build (the debug
    # preset) gets ASan's own cap on an allocation instead, failing as bad_alloc does, and is held to
    # the exits and messages only: its CPU time and memory are the sanitizer's, not the program's.
    with open(dlbench, "rb") as f:
        sanitized = b"__asan_init" in f.read()
    limits = ["--core=0"] if sanitized else ["--data=" + str(1 << 30), "--core=0"]
    if sanitized:
        os.environ["ASAN_OPTIONS"] = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                            "max_allocation_size_mb=1024", "allocator_may_return_null=1"]))
        print("a sanitized build: exits and messages checked, not the CPU and memory bounds")
    bounded = Runner()  # before the corpus exists: its own footprint stays small
    failures, checked = [], 0
    worst_cpu = worst_rss = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        baseline = {program: bounded.run([program, "--help"], tmp)[3] for program in (dlbench, worker, inputs)}
        print(f"peak RSS to start: dlbench {baseline[dlbench]:.0f} MiB, dlbench-worker {baseline[worker]:.0f} MiB")

        def check(label, argv, must_mention, may_succeed=False):
            nonlocal checked, worst_cpu, worst_rss
            checked += 1
            code, err, cpu, rss, wall = bounded.run(["prlimit", *limits, "--"] + argv, tmp)
            rss -= baseline[argv[0]]
            worst_cpu, worst_rss = max(worst_cpu, cpu), max(worst_rss, rss)
            problems = []
            if may_succeed and code == 0:  # damage that left the data readable: only the bounds count
                err, must_mention = err or "(succeeded)", ""
            elif code not in (1, 2):
                problems.append(f"exit {code}" + (" (killed by a signal)" if code < 0 else ""))
            if cpu > CPU_SECONDS and not sanitized:
                problems.append(f"{cpu:.2f} s of CPU (bound {CPU_SECONDS})")
            if wall >= WALL_SECONDS:
                problems.append(f"still running after {WALL_SECONDS} s")
            if rss > PEAK_RSS_MIB and not sanitized:
                problems.append(f"peak RSS {rss:.0f} MiB above its start (bound {PEAK_RSS_MIB})")
            if must_mention not in err:
                problems.append(f"the message does not name {must_mention!r}")
            if len(err.strip()) == 0:
                problems.append("no message")
            if "HDF5-DIAG" in err:
                problems.append("the HDF5 library's own error stack reached stderr")
            if problems:
                failures.append(f"{label}: {', '.join(problems)}; stderr: {err.strip()[:300]!r}")

        for name, content in corpus().items():
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(content)
            check(f"validate {name}", [dlbench, "validate", "-f", path], name)
            check(f"run {name}", [dlbench, "run", "-f", path, "--output", os.path.join(tmp, "out.status.json")], name)
            check(f"report {name}", [dlbench, "report", path], name)
            check(f"compare {name}", [dlbench, "compare", path, path], name)
            if os.path.exists(os.path.join(tmp, "out.status.json")):
                failures.append(f"run {name}: wrote a status for input it should have refused")
                os.remove(os.path.join(tmp, "out.status.json"))
        for name in ["/dev/zero", "/dev/urandom"]:
            check(f"validate {name}", [dlbench, "validate", "-f", name], name)
            check(f"report {name}", [dlbench, "report", name], name)
            check(f"compare {name}", [dlbench, "compare", name, name], name)
        check("validate a directory", [dlbench, "validate", "-f", tmp], tmp)
        check("validate a missing file", [dlbench, "validate", "-f", os.path.join(tmp, "missing.yaml")], "missing.yaml")
        for trouble, (image, label) in cityscapes_trees().items():
            root = os.path.join(tmp, "cityscapes-" + trouble)
            for folder, name, content in (("leftImg8bit", f"{trouble}_leftImg8bit.png", image),
                                          ("gtFine", f"{trouble}_gtFine_labelIds.png", label)):
                os.makedirs(os.path.join(root, folder, "train", "city"), exist_ok=True)
                with open(os.path.join(root, folder, "train", "city", name), "wb") as f:
                    f.write(content)
            check(f"cityscapes {trouble}", [inputs, "measure", root, "--data", "cityscapes", "--batch-size", "1",
                                            "--batches", "1", "--crop-height", "8", "--crop-width", "8"],
                  f"{trouble}_leftImg8bit.png")
        # ImageFolder JPEGs: each hostile file alone in its class, along every decoding path; the
        # answer is exit 1 naming the file, within the bounds (a 65,500 x 65,500 progressive header
        # took more than a minute and 7 GB before JpegDecoder's pixel limit).
        made = {}
        for kind in ("off", "on"):
            root = os.path.join(tmp, "made-jpegs-" + kind)
            subprocess.run([inputs, "generate", root, "--classes", "1", "--per-class", "1", "--progressive", kind],
                           check=True, capture_output=True)
            with open(os.path.join(root, "class_0000", "img_000000.jpg"), "rb") as f:
                made[kind] = f.read()
        for name, content in jpeg_troubles(made["off"], made["on"]).items():
            root = os.path.join(tmp, "jpegs-" + name)
            os.makedirs(os.path.join(root, "a"), exist_ok=True)
            with open(os.path.join(root, "a", name), "wb") as f:
                f.write(content)
            for path, flags in JPEG_PATHS.items():
                check(f"imagefolder {name} ({path})", [inputs, "measure", root, "--batch-size", "1", "--batches", "1",
                                                       *flags], name)
        # 600 damaged JPEGs and PNGs in one folder, every one decoded or refused by `check` on the
        # default path and the whole-image one (a decompressor reused from file to file meets
        # each damage after another), within the bounds.
        root = os.path.join(tmp, "damaged", "a")
        os.makedirs(root)
        bases = {"baseline.jpg": made["off"], "progressive.jpg": made["on"], "rgb.png": small_png(64, 48, 2),
                 "grey.png": small_png(40, 30, 0)}
        for name, content in damage.damaged_set(bases, 600, 23).items():
            with open(os.path.join(root, name), "wb") as f:
                f.write(content)
        for flags in ([], ["--crop-only", "off"]):
            check(f"imagefolder 600 damaged files {flags}", [inputs, "check", os.path.dirname(root), *flags], "",
                  may_succeed=True)
        # BERT's shards: a real shard (dlbench-input writes it as NVIDIA's script does) damaged in
        # every way a copy can be, alone in its directory; whatever the HDF5 library makes of it,
        # the answer is exit 1 naming the shard (or, where flipped bits left it readable, a
        # measurement), within the bounds.
        made = os.path.join(tmp, "made-shards")
        subprocess.run([inputs, "generate", made, "--data", "bertpretraining", "--shards", "1", "--per-shard", "64",
                        "--sequence-length", "32", "--max-predictions", "5"], check=True, capture_output=True)
        with open(os.path.join(made, "pretraining_shard_00000.hdf5"), "rb") as f:
            good = f.read()
        for trouble, content in shard_troubles(good).items():
            root = os.path.join(tmp, "shards-" + trouble)
            os.makedirs(root, exist_ok=True)
            with open(os.path.join(root, f"{trouble}.hdf5"), "wb") as f:
                f.write(content)
            check(f"shard {trouble}", [inputs, "measure", root, "--data", "bertpretraining", "--batch-size", "2",
                                       "--batches", "2"], f"{trouble}.hdf5", may_succeed=trouble.startswith("flipped"))
        for flags in WORKER_FLAGS:
            named = flags[0].encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            named = named if "\ufffd" not in named else "unknown option"
            check(f"worker {' '.join(flags)[:40]!r}", [worker] + flags, named)

    bounded.close()
    for failure in failures:
        print("FAIL:", failure)
    print(f"{checked} hostile inputs; worst CPU {worst_cpu:.2f} s, worst peak RSS {worst_rss:.0f} MiB above the program's start")
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
