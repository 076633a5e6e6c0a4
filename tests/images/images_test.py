#!/usr/bin/env python3
"""The images build for real and run: Debian's buildah builds dockerfiles/operator.Dockerfile and
the cpu target of dockerfiles/worker.Dockerfile (vfs storage, chroot isolation), and podman runs
them with runc.

Operator image: `--help` works, without a cluster it exits with an error that says so, it runs as
65532:65532 with its entrypoint, and every library of the binary resolves inside the image.
Worker image (cpu): every library resolves, `dlbench-worker --list-devices`, a tiny real case,
and `dlbench launch -- mpirun` with two ranks whose result comes back through the launcher.
engine: command: the worker image's `dlbench-exec --install` fills a volume, as the operator's
init container does, and the shim runs a case in an image that is not dlbench's (plain
debian:bookworm-slim, none of dlbench's libraries).

The base images debian:bookworm and debian:bookworm-slim are imported from the same minimal
bookworm tarball the fresh-machine check uses when they are not in local storage (no image
registry is reachable here). Debian's .deb files the builds download are cached between runs.

Usage: images_test.py [--keep-images]
"""
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fresh"))
import fresh_machine_test  # noqa: E402  (the shared minbase tarball)

STORAGE = ["--storage-driver", "vfs"]
OPERATOR = "localhost/dlbench-operator:test"
WORKER = "localhost/dlbench-worker:test-cpu"
# Podman's default ulimits exceed what this kind of sandbox grants; a container inherits ours.
ENV = dict(os.environ, CONTAINERS_CONF=os.path.join(HERE, "containers.conf"))
STARTED = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
# vfs storage copies every layer whole: each run's intermediate layers (buildah --layers, the
# cache of the next run) take about 1.5 GB. Below this much free space, older ones go first.
MIN_FREE_BYTES = 10 << 30


def sh(*argv, check=True, timeout=1800):
    result = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(argv[:6])}... exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def podman(*args, **kwargs):
    return sh("podman", *STORAGE, "--runtime", "runc", *args, **kwargs)


def run_in(image, *args, entrypoint=None, user=None, check=True):
    extra = ["--entrypoint", entrypoint] if entrypoint else []
    extra += ["--user", user] if user else []
    return podman("run", "--rm", "--network", "host", "--ulimit", "host", *extra, image, *args, check=check)


def ensure_base_images():
    have = podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    wanted = ["docker.io/library/debian:bookworm", "docker.io/library/debian:bookworm-slim"]
    if all(w in have for w in wanted):
        return
    fresh_machine_test.ensure_tarball()
    podman("import", fresh_machine_test.TARBALL, wanted[0])
    podman("tag", wanted[0], wanted[1])


def build(dockerfile, tag, target=None):
    archives = os.path.join(fresh_machine_test.CACHE, "apt-archives")
    os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
    argv = ["buildah", *STORAGE, "build", "--isolation", "chroot", "--layers", "--pull-never",
            "--volume", f"{archives}:/var/cache/apt/archives", "-f", os.path.join(ROOT, "dockerfiles", dockerfile),
            "-t", tag]
    if target:
        argv += ["--target", target]
    sh(*argv, ROOT, timeout=3000)


def unresolved_libraries(image, *programs):
    script = "for p in " + " ".join(programs) + "; do ldd $p | grep 'not found' | sed \"s|^|$p: |\"; done; true"
    return run_in(image, "-c", script, entrypoint="/bin/sh", user="0").stdout.strip()


def prune_layers(before=None):
    """Removes unnamed (dangling) images: intermediate layers of earlier builds. With `before`,
    only those created before it, so that this run's layers stay as the next run's cache."""
    argv = ["image", "prune", "--force"] + (["--filter", f"until={before}"] if before else [])
    podman(*argv, check=False)


def storage_free_bytes():
    root = podman("info", "--format", "{{.Store.GraphRoot}}", check=False).stdout.strip() or "/var/lib/containers"
    while not os.path.exists(root):
        root = os.path.dirname(root)
    return shutil.disk_usage(root).free


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if storage_free_bytes() < MIN_FREE_BYTES:
            print(f"images: under {MIN_FREE_BYTES >> 30} GiB free for container storage: removing cached layers",
                  file=sys.stderr)
            prune_layers()
        ensure_base_images()
        build("operator.Dockerfile", OPERATOR)
        build("worker.Dockerfile", WORKER, target="cpu")

    def test_operator_image_runs_as_65532_with_every_library(self):
        config = json.loads(podman("image", "inspect", OPERATOR).stdout)[0]["Config"]
        self.assertEqual(config["User"], "65532:65532")
        self.assertEqual(config["Entrypoint"], ["/usr/local/bin/dlbench-operator"])
        self.assertEqual(run_in(OPERATOR, "-c", "id -u; id -g", entrypoint="/bin/sh").stdout.split(), ["65532", "65532"])
        self.assertEqual(unresolved_libraries(OPERATOR, "/usr/local/bin/dlbench-operator"), "")
        usage = run_in(OPERATOR, "--help")
        self.assertIn("--kubeconfig", usage.stdout + usage.stderr)

    def test_operator_image_without_a_cluster_says_so(self):
        result = run_in(OPERATOR, check=False)
        self.assertNotEqual(result.returncode, 0)
        message = (result.stdout + result.stderr).lower()
        self.assertTrue("kubeconfig" in message or "in-cluster" in message or "kubernetes_service_host" in message,
                        message[-500:])

    def test_worker_cpu_image_runs_a_case_and_mpirun_with_two_ranks(self):
        self.assertEqual(unresolved_libraries(WORKER, "/usr/local/bin/dlbench-worker", "/usr/local/bin/dlbench",
                                              "/usr/local/bin/dlbench-input", "/usr/bin/orted"), "")
        devices = run_in(WORKER, "dlbench-worker", "--list-devices").stdout
        self.assertRegex(devices, r"^cpu \d+")
        self.assertNotIn("cuda", devices)
        case = ["dlbench-worker", "--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--warmup-steps", "1",
                "--measure-steps", "2", "--repeats", "2", "--threads", "1"]
        result = json.loads(run_in(WORKER, *case).stdout)
        self.assertEqual(result["state"], "Succeeded")
        self.assertEqual(len(result["throughput"]["repeats"]), 2)
        # The launcher's command line, as the operator writes it, with two ranks on this host.
        launch = run_in(WORKER, "/bin/sh", "-c",
                        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "
                        "dlbench launch --termination-log /tmp/result -- mpirun -np 2 --oversubscribe --bind-to none "
                        + " ".join(case[:-2]) + " --threads 1 >/dev/null && cat /tmp/result")
        doc = json.loads(launch.stdout)
        self.assertEqual(doc["state"], "Succeeded", doc)
        self.assertEqual(doc["case"]["gpusPerNode"], 2)
        # Real data: a generated data set, read by the case's input pipeline (libturbojpeg in the image).
        real = run_in(WORKER, "/bin/sh", "-c", "dlbench-input generate /tmp/images --classes 2 --per-class 6 >/dev/null && "
                      + " ".join(case) + " --data imagefolder --data-path /tmp/images --decode-threads 1")
        doc = json.loads(real.stdout)
        self.assertEqual(doc["state"], "Succeeded", doc)
        self.assertEqual(doc["input"]["files"], 12)
        # Cityscapes' PNGs decode in the image too (libpng16-16 beside libturbojpeg).
        streets = run_in(WORKER, "/bin/sh", "-c",
                         "dlbench-input generate /tmp/streets --data cityscapes --cities 1 --per-city 3 --width 96 "
                         "--height 48 >/dev/null && dlbench-input measure /tmp/streets --data cityscapes --batch-size 2 "
                         "--batches 2 --crop-height 32 --crop-width 64")
        measured = json.loads(streets.stdout)
        self.assertEqual((measured["files"], measured["skippedFiles"]), (3, 0), measured)
        # BERT's HDF5 shards are written and read in the image too (libhdf5-103-1).
        shards = run_in(WORKER, "/bin/sh", "-c",
                        "dlbench-input generate /tmp/shards --data bertpretraining --shards 2 --per-shard 16 "
                        "--sequence-length 32 --max-predictions 5 >/dev/null && dlbench-input measure /tmp/shards "
                        "--data bertpretraining --batch-size 4 --batches 8")
        measured = json.loads(shards.stdout)
        self.assertEqual((measured["datasetSequences"], measured["skipped"]), (32, 0), measured)

    def test_dlbench_exec_runs_in_an_image_that_is_not_dlbenchs(self):
        volume = tempfile.mkdtemp(prefix="dlbench-exec-volume-")
        try:
            # The init container: the worker image installs the shim and the examples into the volume.
            installed = run_in_with_volume(WORKER, volume, "dlbench-exec", "--install", "/dlbench")
            self.assertIn("/dlbench/dlbench-exec", installed.stdout)
            self.assertTrue(os.path.exists(os.path.join(volume, "examples", "pytorch", "train_resnet50.py")))
            # The user's image: plain Debian, without dlbench's libraries.
            slim = "docker.io/library/debian:bookworm-slim"
            libraries = run_in_with_volume(slim, volume, "/bin/sh", "-c",
                                           "ldconfig -p | grep -c -e yaml-cpp -e dnnl -e cpp-httplib || true")
            self.assertEqual(libraries.stdout.strip(), "0", "the base image has dlbench's libraries")
            env = ["DLBENCH_MODEL=resnet50", "DLBENCH_IMAGE_SIZE=224", "DLBENCH_NODES=1", "DLBENCH_NODE_RANK=0",
                   "DLBENCH_GPUS_PER_NODE=1", "DLBENCH_BATCH_SIZE=4", "DLBENCH_PRECISION=fp32",
                   "DLBENCH_WARMUP_STEPS=1", "DLBENCH_MEASURE_STEPS=3", "DLBENCH_REPEATS=2"]
            script = "i=0; while [ $i -lt 8 ]; do sleep 0.05; echo '@dlbench step 4'; i=$((i+1)); done"
            result = run_in_with_volume(slim, volume, "/dlbench/dlbench-exec", "--", "/bin/sh", "-c", script, env=env)
            doc = json.loads(result.stdout)
            self.assertEqual(doc["state"], "Succeeded", doc)
            self.assertEqual(doc["engine"], "command")
            # sleep never returns early, so no step takes under 50 ms; a marker that reaches the shim
            # late (a loaded machine) makes the next step look shorter by that delay (48.4 ms once in
            # CI), never the median: as tests/command/exec_test.py holds its 100 ms steps.
            steps = doc["stepTimeSeconds"]
            self.assertGreaterEqual(steps["median"], 0.049)
            self.assertGreater(steps["min"], 0.025)
        finally:
            shutil.rmtree(volume, ignore_errors=True)


def run_in_with_volume(image, volume, *args, env=()):
    extra = [a for e in env for a in ("--env", e)]
    return podman("run", "--rm", "--network", "host", "--ulimit", "host", "--volume", f"{volume}:/dlbench",
                  "--entrypoint", args[0], *extra, image, *args[1:])


if __name__ == "__main__":
    keep = "--keep-images" in sys.argv
    if keep:
        sys.argv.remove("--keep-images")
    if os.geteuid() != 0:
        print("SKIPPED: building and running images needs root (vfs storage, chroot isolation)")
        sys.exit(0)
    missing = [t for t in ("buildah", "podman", "runc") if shutil.which(t) is None]
    if missing:
        sys.exit(f"not found: {', '.join(missing)} (./scripts/install-deps.sh --test)")
    result = unittest.main(verbosity=2, exit=False).result
    if not keep:
        for image in (OPERATOR, WORKER):
            podman("rmi", "--ignore", image, check=False)
    prune_layers(before=STARTED)  # earlier runs' layers: storage stays about one run's size
    sys.exit(0 if result.wasSuccessful() else 1)
