#!/usr/bin/env python3
"""bench/nvml_energy.py against the stand-in NVML (tests/worker/fake_nvml.cpp, its path the first
argument): the counter the PyTorch scripts read beside dlbench-worker's, found by PCI bus id or
index, in joules, and none (saying why) where the GPU, the device or the library has none."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import nvml_energy  # noqa: E402

FAKE_NVML = None


class NvmlEnergy(unittest.TestCase):
    def setUp(self):
        for name in ("FAKE_NVML_ENERGY_MJ", "FAKE_NVML_BUS_ID"):
            os.environ.pop(name, None)

    def test_reads_the_counter_in_joules_by_bus_id_or_index(self):
        os.environ["FAKE_NVML_ENERGY_MJ"] = "123456789"
        for where in ({"bus_id": "00000000:3B:00.0"}, {"index": 0}):
            counter, why = nvml_energy.open_counter(library=FAKE_NVML, **where)
            self.assertIsNone(why)
            self.assertEqual(counter.joules(), 123456.789)
            os.environ["FAKE_NVML_ENERGY_MJ"] = "123457789"  # read at each call
            self.assertEqual(counter.joules(), 123457.789)
            os.environ["FAKE_NVML_ENERGY_MJ"] = "123456789"

    def test_no_counter_no_device_or_no_library_says_why(self):
        counter, why = nvml_energy.open_counter(index=0, library=FAKE_NVML)
        self.assertIsNone(counter)
        self.assertEqual(why, "the GPU at index 0 has no energy counter (before Volta, or not exposed)")
        os.environ["FAKE_NVML_ENERGY_MJ"] = "1"
        counter, why = nvml_energy.open_counter(bus_id="00000000:AF:00.0", library=FAKE_NVML)
        self.assertIsNone(counter)
        self.assertTrue(why.startswith("no NVML device at PCI 00000000:AF:00.0"), why)
        counter, why = nvml_energy.open_counter(library="/nonexistent/libnvidia-ml.so.1")
        self.assertIsNone(counter)
        self.assertTrue(why.startswith("NVML not loaded"), why)


if __name__ == "__main__":
    FAKE_NVML = sys.argv.pop(1)
    unittest.main(verbosity=2)
