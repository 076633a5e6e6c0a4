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

Storage: the test keeps its own image store under the fresh check's cache directory, apart from
the machine's images, in the kernel's overlay filesystem where a container starts on it (podman's
default driver: a layer is what changed, a container a mount) and in vfs where it does not (every
layer and every container a whole copy; DLBENCH_IMAGES_STORAGE=vfs|overlay chooses). The base
images debian:bookworm and debian:bookworm-slim are imported from the same minimal bookworm
tarball the fresh-machine check uses (no image registry is reachable here). Debian's .deb files
the builds download are cached between runs, and so is what the last run built: its images and
its build stages stay tagged, the next run's layer cache, and whatever no tag reaches is removed.

Usage: images_test.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fresh"))
import fresh_machine_test  # noqa: E402  (the shared minbase tarball)

STORE = os.path.join(fresh_machine_test.CACHE, "containers")
STORAGE = []  # podman's and buildah's storage options: choose_storage() sets them
# The revision the images are built from, as a release's build would pass it (the build context has
# no .git): every program in them must say it. Where this checkout cannot tell, none is passed and
# they say "unknown".
_revision = subprocess.run(["sh", os.path.join(ROOT, "scripts", "source-revision.sh"), ROOT], capture_output=True,
                           text=True)
REVISION = _revision.stdout.strip() if _revision.returncode == 0 else ""
OPERATOR = "localhost/dlbench-operator:test"
WORKER = "localhost/dlbench-worker:test-cpu"
BASE_IMAGES = ["docker.io/library/debian:bookworm", "docker.io/library/debian:bookworm-slim"]
# The build stages the images copy from: tagged, so that the next run finds their layers.
BUILD_STAGES = [("operator.Dockerfile", "build", "localhost/dlbench-images-test-cache:operator-build"),
                ("worker.Dockerfile", "build-cpu", "localhost/dlbench-images-test-cache:worker-build-cpu")]
# Podman's default ulimits exceed what this kind of sandbox grants; a container inherits ours.
ENV = dict(os.environ, CONTAINERS_CONF=os.path.join(HERE, "containers.conf"))
# The layers one run keeps take about 1.5 GB in overlay and several times that in vfs. Below this
# much free space, the test starts from an empty store.
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


def storage_options(driver):
    return ["--root", os.path.join(STORE, driver), "--runroot", f"/run/dlbench-images-test/{driver}",
            "--storage-driver", driver]


def choose_storage():
    """Overlay where a container starts on it here, else vfs; the driver chosen."""
    forced = os.environ.get("DLBENCH_IMAGES_STORAGE")
    if forced not in (None, "", "overlay", "vfs"):
        raise SystemExit(f"DLBENCH_IMAGES_STORAGE={forced}: allowed values are overlay and vfs")
    drivers = [forced] if forced else ["overlay", "vfs"]
    for driver in drivers:
        STORAGE[:] = storage_options(driver)
        try:
            if storage_free_bytes() < MIN_FREE_BYTES:
                print(f"images: under {MIN_FREE_BYTES >> 30} GiB free for {STORE}: removing its {driver} images",
                      file=sys.stderr)
                podman("rmi", "--all", "--force", check=False)
            ensure_base_images()
            run_in(BASE_IMAGES[1], "true")
            return driver
        except AssertionError as error:
            if driver == drivers[-1]:
                raise
            print(f"images: {driver} storage does not run a container here, so {drivers[-1]}:\n{error}",
                  file=sys.stderr)
    raise AssertionError("unreachable")


def ensure_base_images():
    have = podman("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    if all(w in have for w in BASE_IMAGES):
        return
    fresh_machine_test.ensure_tarball()
    podman("import", fresh_machine_test.TARBALL, BASE_IMAGES[0])
    podman("tag", BASE_IMAGES[0], BASE_IMAGES[1])


def built_from():
    """The version's build metadata the images' programs must print, as a regular expression."""
    return re.escape(REVISION) if REVISION else "unknown"


def build(dockerfile, tag, target=None):
    archives = os.path.join(fresh_machine_test.CACHE, "apt-archives")
    os.makedirs(os.path.join(archives, "partial"), exist_ok=True)
    argv = ["buildah", *STORAGE, "build", "--isolation", "chroot", "--layers", "--pull-never",
            "--volume", f"{archives}:/var/cache/apt/archives", "-f", os.path.join(ROOT, "dockerfiles", dockerfile),
            "-t", tag]
    if target:
        argv += ["--target", target]
    if REVISION:
        argv += ["--build-arg", f"DLBENCH_SOURCE_REVISION={REVISION}"]
    started = time.monotonic()
    result = sh(*argv, ROOT, timeout=3000)
    cached = result.stdout.count("Using cache")
    print(f"images: {tag} built in {time.monotonic() - started:.0f} s ({cached} steps from the cache)", file=sys.stderr)


def unresolved_libraries(image, *programs):
    script = "for p in " + " ".join(programs) + "; do ldd $p | grep 'not found' | sed \"s|^|$p: |\"; done; true"
    return run_in(image, "-c", script, entrypoint="/bin/sh", user="0").stdout.strip()


def remove_what_no_tag_reaches():
    """Earlier runs' images and layers: once this run's tags point elsewhere, nothing reaches them.
    A prune removes untagged images without children, so each round frees the next layer down."""
    for _ in range(64):
        removed = podman("image", "prune", "--force", check=False).stdout.split()
        if not removed:
            return


def storage_free_bytes():
    root = STORE
    while not os.path.exists(root):
        root = os.path.dirname(root)
    return shutil.disk_usage(root).free


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print(f"images: {choose_storage()} storage in {STORE}", file=sys.stderr)
        build("operator.Dockerfile", OPERATOR)
        build("worker.Dockerfile", WORKER, target="cpu")
        for dockerfile, stage, tag in BUILD_STAGES:  # every layer is in the cache by now
            build(dockerfile, tag, target=stage)

    def test_operator_image_runs_as_65532_with_every_library(self):
        config = json.loads(podman("image", "inspect", OPERATOR).stdout)[0]["Config"]
        self.assertEqual(config["User"], "65532:65532")
        self.assertEqual(config["Entrypoint"], ["/usr/local/bin/dlbench-operator"])
        self.assertEqual(run_in(OPERATOR, "-c", "id -u; id -g", entrypoint="/bin/sh").stdout.split(), ["65532", "65532"])
        self.assertEqual(unresolved_libraries(OPERATOR, "/usr/local/bin/dlbench-operator"), "")
        usage = run_in(OPERATOR, "--help")
        self.assertIn("--kubeconfig", usage.stdout + usage.stderr)
        # The build says which revision it is: --version, and the image's OCI label.
        self.assertRegex(run_in(OPERATOR, "--version").stdout, rf"^dlbench-operator \d+\.\d+\.\d+\+{built_from()}\n$")
        labels = json.loads(podman("image", "inspect", OPERATOR).stdout)[0]["Config"].get("Labels") or {}
        self.assertEqual(labels.get("org.opencontainers.image.revision"), REVISION)

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
        # Every result names the revision that measured it; so does every program's --version.
        self.assertRegex(result["environment"]["dlbenchVersion"], rf"^\d+\.\d+\.\d+\+{built_from()}$")
        for program in ("dlbench", "dlbench-worker", "dlbench-exec", "dlbench-input"):
            self.assertRegex(run_in(WORKER, program, "--version").stdout, rf"^{program} \d+\.\d+\.\d+\+{built_from()}\n$")
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
            self.assertTrue(os.path.exists(os.path.join(volume, "examples", "pytorch", "train_image_classifier.py")))
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
    if os.geteuid() != 0:
        print("SKIPPED: building and running images needs root (container storage, chroot isolation)")
        sys.exit(0)
    missing = [t for t in ("buildah", "podman", "runc") if shutil.which(t) is None]
    if missing:
        sys.exit(f"not found: {', '.join(missing)} (./scripts/install-deps.sh --test)")
    result = unittest.main(verbosity=2, exit=False).result
    if STORAGE:
        remove_what_no_tag_reaches()  # the store keeps one run: this one
    sys.exit(0 if result.wasSuccessful() else 1)
