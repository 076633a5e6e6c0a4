#!/usr/bin/env python3
"""The Dockerfiles cannot be built here (no engine); what they rely on is checked instead: the
targets they build exist and land where they copy from, the operator's runtime stage installs
every shared library `ldd` finds in the real binary, and both run as the chart expects.

    dockerfiles_test.py BUILD_BIN_DIR
"""
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
# In debian:bookworm-slim already (Essential or required by apt itself).
BASE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g", "libstdc++6"}


def stages(dockerfile):
    """[(base image, [instructions joined over continuation lines])] per FROM."""
    with open(os.path.join(ROOT, "dockerfiles", dockerfile)) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            out.append((line.split()[1], []))
        elif out:
            out[-1][1].append(line)
    return out


def apt_packages(instructions):
    packages = set()
    for line in instructions:
        for m in re.finditer(r"apt-get install ((?:[-\w.+]+\s*)+)", line):
            packages |= {w for w in m.group(1).split() if not w.startswith("-")}
    return packages


def dependency_closure(packages):
    """Installed packages reachable through Depends/PreDepends (what apt would pull in)."""
    seen, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        result = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", package],
                                capture_output=True, text=True)
        for alternative in result.stdout.split(","):
            name = alternative.split("|")[0].strip().split(" ")[0].split(":")[0]
            if name:
                todo.append(name)
    return seen


class DockerfilesTest(unittest.TestCase):
    def test_operator_image_builds_the_operator_and_runs_it_as_non_root(self):
        (_, build), (runtime_base, runtime) = stages("operator.Dockerfile")
        self.assertTrue(runtime_base.endswith("-slim"), "a small runtime image")
        self.assertTrue(any("--target dlbench-operator" in line for line in build))
        self.assertTrue(os.access(os.path.join(BIN, "dlbench-operator"), os.X_OK), "the target lands in bin/")
        self.assertIn("COPY --from=build /build/bin/dlbench-operator /usr/local/bin/dlbench-operator", runtime)
        self.assertIn("USER 65532:65532", runtime)
        self.assertIn('ENTRYPOINT ["/usr/local/bin/dlbench-operator"]', runtime)
        self.assertIn("EXPOSE 8080", runtime)  # the operator's and the chart's default metrics port

    def test_operator_runtime_installs_every_library_the_binary_needs(self):
        (_, _), (_, runtime) = stages("operator.Dockerfile")
        installed = dependency_closure(apt_packages(runtime) | BASE_PACKAGES)
        ldd = subprocess.run(["ldd", os.path.join(BIN, "dlbench-operator")], capture_output=True, text=True, check=True)
        missing = []
        for path in re.findall(r"=> (/\S+)", ldd.stdout):
            if re.search(r"/lib(asan|ubsan|tsan|lsan)\.so", path):
                continue  # a sanitizer build (the debug preset); the image builds Release
            owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
            if owner.returncode != 0:
                owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
            package = owner.stdout.split(":")[0]
            if package not in installed:
                missing.append(f"{path} ({package or 'no package'})")
        self.assertEqual(missing, [], "add these packages to the runtime stage of dockerfiles/operator.Dockerfile")

    def test_worker_image_builds_both_programs_for_a100_and_h100(self):
        (build_base, build), (runtime_base, runtime) = stages("worker.Dockerfile")
        self.assertRegex(build_base, r"^nvidia/cuda:\$\{CUDA_VERSION\}-cudnn-devel-")
        self.assertRegex(runtime_base, r"^nvidia/cuda:\$\{CUDA_VERSION\}-cudnn-runtime-")
        self.assertIn('ARG CUDA_ARCHITECTURES="80;90"', build)
        cmake = next(line for line in build if "cmake -S . -B /build" in line)
        for flag in ("-DDLBENCH_WITH_CUDA=ON", "-DDLBENCH_WITH_MPI=ON", '-DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}"',
                     "--target dlbench-worker dlbench"):
            self.assertIn(flag, cmake)
        for program in ("dlbench-worker", "dlbench"):
            self.assertTrue(os.access(os.path.join(BIN, program), os.X_OK), f"{program} lands in bin/")
        self.assertIn("COPY --from=build /build/bin/dlbench-worker /build/bin/dlbench /usr/local/bin/", runtime)
        # What the operator's pods run from this image: sshd (workers), mpirun and orted over ssh (launcher).
        packages = apt_packages(runtime)
        self.assertTrue({"openssh-server", "openssh-client", "openmpi-bin"} <= packages, packages)
        self.assertTrue(any("ssh-keygen -A" in line for line in runtime), "sshd needs host keys")
        self.assertTrue(any("mkdir -p /run/sshd" in line for line in runtime), "sshd's privilege separation dir")
        self.assertIn("EXPOSE 22 9400", runtime)  # ssh, and the first rank's metrics port (operator default)

    def test_build_arguments_are_documented(self):
        for dockerfile in ("operator.Dockerfile", "worker.Dockerfile"):
            with open(os.path.join(ROOT, "dockerfiles", dockerfile)) as f:
                text = f.read()
            header = text.split("\nARG", 1)[0]
            for argument in re.findall(r"^ARG (\w+)", text, re.M):
                self.assertRegex(header, rf"#\s+{argument}\s", f"{dockerfile}: document ARG {argument} in the header")


if __name__ == "__main__":
    unittest.main(verbosity=2)
