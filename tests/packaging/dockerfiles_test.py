#!/usr/bin/env python3
"""What the Dockerfiles rely on, checked from their text: the targets they build exist and land
where they copy from, the operator's runtime stage installs every shared library `ldd` finds in
the real binary, and both run as the chart expects. tests/images builds the operator image and
the worker's cpu target for real; the worker's cuda target needs NVIDIA's repository, so its
shape is checked here. And the shim the images copy into other images, dlbench-exec, links
statically, except in a sanitizer build (a scratch configure of this tree each way).

    dockerfiles_test.py BUILD_BIN_DIR
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
# In debian:bookworm-slim already (Essential or required by apt itself).
BASE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g", "libstdc++6"}


def named_stages(dockerfile):
    """[(name, base image, [instructions joined over continuation lines])] per FROM."""
    with open(os.path.join(ROOT, "dockerfiles", dockerfile)) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            words = line.split()
            out.append((words[3] if len(words) > 3 and words[2].upper() == "AS" else "", words[1], []))
        elif out:
            out[-1][2].append(line)
    return out


def stages(dockerfile):
    """[(base image, instructions)] per FROM."""
    return [(base, instructions) for _, base, instructions in named_stages(dockerfile)]


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

    def test_each_build_stage_installs_every_package_the_configure_finds(self):
        # Each CMake find names its Debian package (`# apt-get install NAME`); an image configures the
        # whole tree without tests, so its build stage needs every one outside tests/.
        needed = {}
        for top, _, files in os.walk(ROOT):
            if os.path.relpath(top, ROOT).split(os.sep)[0] in ("build", "tests", ".git"):
                continue
            for name in files:
                if name == "CMakeLists.txt" or name.endswith(".cmake"):
                    with open(os.path.join(top, name)) as f:
                        for m in re.finditer(r"# apt-get install ([-\w.+]+)", f.read()):
                            needed[m.group(1)] = os.path.relpath(os.path.join(top, name), ROOT)
        self.assertIn("libwebp-dev", needed)
        for dockerfile, stage in (("operator.Dockerfile", "build"), ("worker.Dockerfile", "build-base")):
            [instructions] = [i for name, _, i in named_stages(dockerfile) if name == stage]
            missing = {p: where for p, where in needed.items() if p not in apt_packages(instructions)}
            self.assertEqual(missing, {}, f"{dockerfile} {stage}: packages the configure needs")

    def test_every_build_names_the_revision_it_builds(self):
        # The build context has no .git (.dockerignore), so each stage that configures takes the
        # revision as a build argument and hands it to CMake, and each image says it in its OCI
        # label; tests/images checks the programs say it, for the images CI builds (not cuda).
        for dockerfile in ("operator.Dockerfile", "worker.Dockerfile"):
            named = named_stages(dockerfile)
            for name, _, instructions in named:
                configures = [i for i, line in enumerate(instructions) if "cmake -S . -B /build" in line]
                for at in configures:
                    self.assertIn('-DDLBENCH_SOURCE_REVISION="${DLBENCH_SOURCE_REVISION}"', instructions[at],
                                  f"{dockerfile} {name or 'unnamed'}: its configure")
                    self.assertIn("ARG DLBENCH_SOURCE_REVISION=", instructions[:at], f"{dockerfile} {name}: the argument")
            final = [i for name, _, i in named if name in ("", "cpu", "cuda")]
            self.assertTrue(final, dockerfile)
            for instructions in final:
                self.assertIn('org.opencontainers.image.revision="${DLBENCH_SOURCE_REVISION}"', " ".join(instructions),
                              f"{dockerfile}: the image's label")
        with open(os.path.join(ROOT, ".dockerignore")) as f:
            self.assertIn(".git/", f.read().split(), "the premise: an image build sees no .git")

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

    def test_worker_image_has_a_cpu_target_and_a_cuda_default_on_one_distribution(self):
        found = {name: (base, instructions) for name, base, instructions in named_stages("worker.Dockerfile")}
        last = named_stages("worker.Dockerfile")[-1][0]
        self.assertEqual(last, "cuda", "the GPU image is what `build` without --target makes")
        self.assertEqual(found["build-base"][0], "debian:${DEBIAN}")
        self.assertEqual(found["runtime-base"][0], "debian:${DEBIAN}-slim")
        for target, build in (("cpu", "build-cpu"), ("cuda", "build-cuda")):
            self.assertEqual(found[build][0], "build-base")
            self.assertEqual(found[target][0], "runtime-base")
            self.assertIn(f"COPY --from={build} /build/bin/dlbench-worker /build/bin/dlbench /build/bin/dlbench-exec "
                          "/build/bin/dlbench-input /usr/local/bin/", found[target][1])
            self.assertIn(f"COPY --from={build} /build/share/dlbench /usr/local/share/dlbench", found[target][1])
        cpu_cmake = next(line for line in found["build-cpu"][1] if "cmake -S . -B /build" in line)
        for flag in ("-DDLBENCH_WITH_CUDA=OFF", "-DDLBENCH_WITH_MPI=ON", "--target dlbench-worker dlbench dlbench-exec dlbench-input"):
            self.assertIn(flag, cpu_cmake)
        cuda = found["build-cuda"][1]
        self.assertIn('ARG CUDA_ARCHITECTURES="80;90"', cuda)
        cuda_cmake = next(line for line in cuda if "cmake -S . -B /build" in line)
        for flag in ("-DDLBENCH_WITH_CUDA=ON", "-DDLBENCH_WITH_MPI=ON", '-DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}"',
                     "--target dlbench-worker dlbench dlbench-exec dlbench-input"):
            self.assertIn(flag, cuda_cmake)
        self.assertTrue({"libcudnn9-dev-cuda-13", "libnccl-dev"} & apt_packages(cuda) or
                        any("cudnn9-cuda-" in line and "libnccl-dev" in line for line in cuda), "cuDNN and NCCL")
        self.assertTrue(any('test -n "${CUDA_REPO}"' in line for line in cuda), "a missing repository is said, not guessed")
        for program in ("dlbench-worker", "dlbench", "dlbench-exec"):
            self.assertTrue(os.access(os.path.join(BIN, program), os.X_OK), f"{program} lands in bin/")
        # What the operator's pods run from this image: sshd (workers), mpirun and orted over ssh (launcher).
        runtime = found["runtime-base"][1]
        packages = apt_packages(runtime)
        self.assertTrue({"openssh-server", "openssh-client", "openmpi-bin", "libdnnl2", "libturbojpeg0", "libjpeg62-turbo", "libpng16-16", "libwebp7", "libwebpdemux2", "libhdf5-103-1"} <= packages, packages)
        self.assertTrue(any("ssh-keygen -A" in line for line in runtime), "sshd needs host keys")
        self.assertTrue(any("mkdir -p /run/sshd" in line for line in runtime), "sshd's privilege separation dir")
        self.assertIn("EXPOSE 22 9400", runtime)  # ssh, and the first rank's metrics port (operator default)

    def test_every_compile_keeps_its_objects_in_a_build_cache(self):
        # A rebuild after a change compiles only what changed (tests/images rebuilds both images
        # every CI run): ccache in the stage, and the compile's RUN mounting ccache's directory.
        for dockerfile in ("operator.Dockerfile", "worker.Dockerfile"):
            staged = named_stages(dockerfile)
            by_name = {name: (base, instructions) for name, base, instructions in staged}
            compiling = [(name, base, instructions) for name, base, instructions in staged
                         if any("cmake --build" in line for line in instructions)]
            self.assertTrue(compiling, dockerfile)
            for name, base, instructions in compiling:
                packages = apt_packages(instructions) | apt_packages(by_name.get(base, ("", []))[1])
                self.assertIn("ccache", packages, f"{dockerfile} {name or base}")
                build = next(line for line in instructions if "cmake --build" in line)
                self.assertTrue(build.startswith("RUN --mount=type=cache,target=/root/.cache/ccache "),
                                f"{dockerfile} {name or base}: {build[:80]}")

    def test_build_arguments_are_documented(self):
        for dockerfile in ("operator.Dockerfile", "worker.Dockerfile"):
            with open(os.path.join(ROOT, "dockerfiles", dockerfile)) as f:
                text = f.read()
            header = text.split("\nARG", 1)[0]
            for argument in re.findall(r"^ARG (\w+)", text, re.M):
                self.assertRegex(header, rf"#\s+{argument}\s", f"{dockerfile}: document ARG {argument} in the header")


def shim_link_flags(cxx_flags):
    """dlbench-exec's link flags in a scratch configure of this tree (programs only) with these flags."""
    with tempfile.TemporaryDirectory(prefix="dlbench-shim-") as build:
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", f"-DCMAKE_CXX_FLAGS={cxx_flags}",
                        "-DDLBENCH_BUILD_TESTS=OFF", "-DDLBENCH_WITH_CUDA=OFF", "-DDLBENCH_WITH_MPI=OFF"],
                       check=True, capture_output=True)
        with open(os.path.join(build, "build.ninja")) as f:
            block = f.read().split("\nbuild bin/dlbench-exec:", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\s+LINK_FLAGS = (.*)$", block, re.M)


class ShimLinkTest(unittest.TestCase):
    """The images copy dlbench-exec into images that are not dlbench's: it links statically. A
    sanitizer's runtime cannot, so a build with -fsanitize (the debug preset) links it dynamically;
    when it did not, that build failed to link for six days unnoticed."""

    def test_static_by_default_and_dynamic_under_a_sanitizer(self):
        self.assertIn("-static", " ".join(shim_link_flags("")).split())
        self.assertNotIn("-static", " ".join(shim_link_flags("-fsanitize=address,undefined")).split())


if __name__ == "__main__":
    unittest.main(verbosity=2)
