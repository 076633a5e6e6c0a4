#!/usr/bin/env python3
"""How ctest schedules this suite: what every test takes of tests/resources.json.

The test presets run ctest with 4 jobs over a resource spec of 2 cores (and 20 GiB). That only
holds the machine to two computing tests at a time if every test says what it takes: a test
registered without RESOURCE_GROUPS would run as a fifth or third computing process. So every
test takes cores, except the ones tests/CMakeLists.txt names as waiting (its arguments); none asks
for more than the spec has (ctest would fail it as "insufficient resources"); a test that keeps
PROCESSORS 2 takes both cores; a test on fewer cores than the spec holds waits passively in
OpenMP (spinning threads take the core of the test beside it); and the gtest cases of the input library carry both their labels
(CMake 3.25's discovery flattens a list-valued property, which once dropped `input`).

Usage: scheduling_test.py CTEST BUILD_DIR RESOURCE_SPEC [WAITING_TEST ...]
"""
import json
import subprocess
import sys
import unittest


def requirements(test):
    """{resource type: slots} summed over the test's resource groups."""
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    taken = {}
    for group in props.get("RESOURCE_GROUPS", []):
        for requirement in group["requirements"]:
            taken[requirement[".type"]] = taken.get(requirement[".type"], 0) + requirement["slots"]
    return props, taken


class Scheduling(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ctest, build, spec = sys.argv[1:4]
        cls.waiting = set(sys.argv[4:])
        listing = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True,
                                 check=True, timeout=120)
        cls.tests = json.loads(listing.stdout)["tests"]
        with open(spec) as f:
            local = json.load(f)["local"][0]
        cls.slots = {kind: sum(r["slots"] for r in ids) for kind, ids in local.items()}

    def test_the_suite_is_listed(self):
        self.assertGreater(len(self.tests), 100)

    def test_every_test_takes_cores_except_those_that_wait(self):
        without = {t["name"] for t in self.tests if "cores" not in requirements(t)[1]}
        present = {t["name"] for t in self.tests}
        self.assertEqual(without, self.waiting & present,
                         "a test without RESOURCE_GROUPS cores:N runs beside two computing tests")

    def test_no_test_asks_for_more_than_the_spec_holds(self):
        for test in self.tests:
            for kind, slots in requirements(test)[1].items():
                self.assertIn(kind, self.slots, f"{test['name']} asks for {kind}, which tests/resources.json lacks")
                self.assertLessEqual(slots, self.slots[kind], f"{test['name']} asks for {slots} {kind}")

    def test_a_test_on_both_processors_takes_both_cores(self):
        for test in self.tests:
            props, taken = requirements(test)
            if props.get("PROCESSORS") == 2:
                self.assertEqual(taken.get("cores"), self.slots["cores"], test["name"])

    def test_a_test_on_fewer_than_every_core_waits_passively(self):
        spinning = [t["name"] for t in self.tests
                    if requirements(t)[1].get("cores", 0) < self.slots["cores"]
                    and "OMP_WAIT_POLICY=PASSIVE" not in requirements(t)[0].get("ENVIRONMENT", [])]
        self.assertEqual(spinning, [], "OpenMP threads spinning at barriers beside another test")
        # Discovered gtest cases and tests registered one by one alike.
        passive = {t["name"] for t in self.tests if "OMP_WAIT_POLICY=PASSIVE" in requirements(t)[0].get("ENVIRONMENT", [])}
        self.assertIn("golden.alexnet.committed", passive)
        present = {t["name"] for t in self.tests}
        for name in ("WorkerCli.ResNet50WritesAValidResultWithThreeRepeats", "ctest.Scheduling"):
            if name in present:
                self.assertIn(name, passive)

    def test_the_input_librarys_cases_carry_both_labels(self):
        labelled = [t["name"] for t in self.tests
                    if {"unit", "input"} <= set(requirements(t)[0].get("LABELS", []))]
        self.assertIn("JpegFolder.ScansClassesInOrder", labelled)
        self.assertIn("PretrainingReader.EachEpochReadsEverySequenceOnceAcrossTheRanks", labelled)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
