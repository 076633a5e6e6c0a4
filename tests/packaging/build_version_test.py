#!/usr/bin/env python3
"""A build says which revision it is: every program's --version is the project's version with the
revision as semver build metadata ("0.1.0+g1a2b3c4d5e6f", ".dirty" where a tracked file differed
from that commit, "+unknown" where the build could not tell), and every result, status and metric
carries that string, so that `dlbench compare` tells two builds apart and `dlbench run --resume`
does not mix them. cmake/BuildVersion.cmake writes the one source that holds it at every build, and
rewrites it only when it changes; scripts/source-revision.sh asks git; an image build, whose context
has no .git, passes DLBENCH_SOURCE_REVISION, which the configure checks.

    build_version_test.py BUILD_BIN_DIR
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
SCRIPT = os.path.join(ROOT, "cmake", "BuildVersion.cmake")
REVISION_SCRIPT = os.path.join(ROOT, "scripts", "source-revision.sh")
PROGRAMS = ("dlbench", "dlbench-worker", "dlbench-exec", "dlbench-input", "dlbench-operator")


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(dlbench\s+VERSION (\S+)", f.read()).group(1)


def write_version(output, source_dir, revision=""):
    """cmake -P cmake/BuildVersion.cmake as the build runs it; the version the written source returns."""
    subprocess.run(["cmake", "-D", "VERSION=9.8.7", "-D", f"SOURCE_DIR={source_dir}", "-D", f"OUTPUT={output}",
                    "-D", f"REVISION={revision}", "-P", SCRIPT], check=True, capture_output=True, text=True)
    with open(output) as f:
        return re.search(r'return "([^"]*)";', f.read()).group(1)


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


class BuildVersion(unittest.TestCase):
    def test_every_program_says_the_same_version_and_its_revision(self):
        said = {}
        for program in PROGRAMS:
            out = subprocess.run([os.path.join(BIN, program), "--version"], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, f"{program} --version: {out.stderr}")
            found = re.fullmatch(rf"{re.escape(program)} (\S+)\n", out.stdout)
            self.assertIsNotNone(found, f"{program} --version printed {out.stdout!r}")
            said[program] = found.group(1)
        self.assertEqual(len(set(said.values())), 1, said)
        version = said["dlbench"]
        self.assertRegex(version, rf"^{re.escape(project_version())}\+(g[0-9a-f]{{12}}(\.dirty)?|unknown)$")
        # Built from this checkout: its commit is HEAD's (a build older than the last commit fails
        # here, and says to rebuild).
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:
            self.assertTrue(version.split("+")[1].startswith("g" + head.stdout.strip()),
                            f"the programs in {BIN} say {version}, HEAD is {head.stdout.strip()}: rebuild")

    def test_the_revision_from_git_clean_dirty_and_untracked(self):
        with tempfile.TemporaryDirectory(prefix="dlbench-revision-") as work:
            repo = os.path.join(work, "repo")
            os.makedirs(os.path.join(repo, "scripts"))
            with open(REVISION_SCRIPT) as f, open(os.path.join(repo, "scripts", "source-revision.sh"), "w") as g:
                g.write(f.read())
            git(repo, "init", "-q")
            git(repo, "add", ".")
            git(repo, "commit", "-q", "-m", "first")
            commit = git(repo, "rev-parse", "--short=12", "HEAD")
            output = os.path.join(work, "version.cpp")
            self.assertEqual(write_version(output, repo), f"9.8.7+g{commit}")
            # A file git does not track (build output, say) changes nothing; a file touched but the
            # same changes nothing; a tracked file changed makes it dirty.
            open(os.path.join(repo, "untracked.o"), "w").close()
            os.utime(os.path.join(repo, "scripts", "source-revision.sh"))
            self.assertEqual(write_version(output, repo), f"9.8.7+g{commit}")
            with open(os.path.join(repo, "scripts", "source-revision.sh"), "a") as f:
                f.write("# changed\n")
            self.assertEqual(write_version(output, repo), f"9.8.7+g{commit}.dirty")
            git(repo, "commit", "-q", "-am", "second")
            second = git(repo, "rev-parse", "--short=12", "HEAD")
            self.assertNotEqual(second, commit)
            self.assertEqual(write_version(output, repo), f"9.8.7+g{second}")

    def test_a_given_revision_wins_and_no_checkout_says_unknown(self):
        with tempfile.TemporaryDirectory(prefix="dlbench-revision-") as work:
            output = os.path.join(work, "version.cpp")
            self.assertEqual(write_version(output, work, revision="gabcdef123456"), "9.8.7+gabcdef123456")
            self.assertEqual(write_version(output, ROOT, revision="g1"), "9.8.7+g1", "the argument wins over git")
            not_a_checkout = os.path.join(work, "sources")
            os.makedirs(os.path.join(not_a_checkout, "scripts"))
            with open(REVISION_SCRIPT) as f, open(os.path.join(not_a_checkout, "scripts", "source-revision.sh"), "w") as g:
                g.write(f.read())
            self.assertEqual(write_version(output, not_a_checkout), "9.8.7+unknown")

    def test_an_unchanged_revision_leaves_the_source_untouched(self):
        # Rewritten, the source would compile and every program link again at every build.
        with tempfile.TemporaryDirectory(prefix="dlbench-revision-") as work:
            output = os.path.join(work, "version.cpp")
            write_version(output, work, revision="gsame")
            os.utime(output, (1_000_000_000, 1_000_000_000))
            write_version(output, work, revision="gsame")
            self.assertEqual(os.stat(output).st_mtime, 1_000_000_000)
            write_version(output, work, revision="gother")
            self.assertNotEqual(os.stat(output).st_mtime, 1_000_000_000)

    def test_a_revision_that_is_not_build_metadata_is_refused_at_configure(self):
        with tempfile.TemporaryDirectory(prefix="dlbench-revision-") as build:
            done = subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DDLBENCH_BUILD_TESTS=OFF",
                                   "-DDLBENCH_WITH_CUDA=OFF", "-DDLBENCH_WITH_MPI=OFF",
                                   "-DDLBENCH_SOURCE_REVISION=g12 34/x"], capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn('DLBENCH_SOURCE_REVISION: "g12 34/x" is not semver build metadata; allowed: letters, digits, '
                      "'.' and '-'", re.sub(r"\s+", " ", done.stderr))


if __name__ == "__main__":
    unittest.main()
