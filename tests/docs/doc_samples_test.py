#!/usr/bin/env python3
"""Sample outputs in the README and docs/ are the real binaries' outputs.

Every ```text block whose first line is `$ COMMAND` is run (from the repository root, with
`dlbench`, `dlbench-worker`, `dlbench-exec` and `dlbench-input` taken from BIN_DIR) and its
stdout and stderr together must match the block's lines in order: a line `...` stands for any
number of lines, and nothing else may differ. Blocks without `$ ` (a benchmark's timing, which
no machine repeats) are not run.

    doc_samples_test.py BIN_DIR
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import unittest

BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAMS = ("dlbench", "dlbench-worker", "dlbench-exec", "dlbench-input")


def samples():
    """(file, line number, command, expected lines) of every runnable sample."""
    out = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```text" and i + 1 < len(lines) and lines[i + 1].startswith("$ "):
                end = lines.index("```", i + 1)
                out.append((os.path.relpath(path, ROOT), i + 2, lines[i + 1][2:], lines[i + 2:end]))
                i = end
            i += 1
    return out


def matches(expected, actual):
    """Whether actual follows expected line by line, a `...` line (indented or not) taking any run of lines."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and matches(expected[1:], actual[1:])


class DocSamples(unittest.TestCase):
    def test_there_are_samples(self):
        # validate, report and help at least: a rename that hides them all must not pass quietly.
        commands = [command.split()[:2] for _, _, command, _ in samples()]
        for wanted in (["dlbench", "validate"], ["dlbench", "report"], ["dlbench", "help"]):
            self.assertIn(wanted, commands)

    def test_every_sample_is_what_the_binary_prints(self):
        for where, line, command, expected in samples():
            with self.subTest(f"{where}:{line}: {command}"):
                argv = shlex.split(command)
                self.assertIn(argv[0], PROGRAMS, "samples run dlbench's own programs")
                argv[0] = os.path.join(BIN, argv[0])
                result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
                actual = (result.stdout + result.stderr).strip("\n").split("\n")
                while expected and expected[-1] == "":  # blank lines around a block do not count
                    expected = expected[:-1]
                while expected and expected[0] == "":
                    expected = expected[1:]
                self.assertTrue(matches(expected, actual),
                                f"{where}:{line}: `{command}` printed\n" + "\n".join(actual))


if __name__ == "__main__":
    unittest.main(verbosity=2)
