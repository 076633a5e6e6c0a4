#!/usr/bin/env python3
"""bench/ncu_summary.py reads Nsight Compute's CSV as the GPU machine writes it: kernels
grouped by their function name, times summed in any unit ncu prints, other lines skipped."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import ncu_summary  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, kernel, value, unit="nsecond", metric="gpu__time_duration.sum"):
    return (f'"{i}","4242","dlbench-worker","gpu-1","{kernel}","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


LOG = [
    "==PROF== Connected to process 4242 (/bundle/bin/dlbench-worker)",
    "bert-base 64 x 128, amp: step 1",
    HEADER,
    row(0, "void dlbench::worker::kernels::(anonymous namespace)::layer_norm_forward_kernel<__half>(const T1 *, "
           "const float *, const float *, T1 *, float *, float *, long, int, float)", "20,000"),
    row(1, "layer_norm_forward_kernel", "10000"),
    row(2, "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", "1.5", unit="msecond"),
    row(3, "softmax_forward_registers_kernel<__half, 4>(const T1 *, T1 *, long, int)", "40", unit="usecond"),
    row(4, "softmax_forward_registers_kernel", "999", metric="dram__bytes.sum"),  # another metric: not time
    "==PROF== Disconnected from process 4242",
]


class NcuSummary(unittest.TestCase):
    def test_names_lose_their_namespaces_templates_and_parameters(self):
        self.assertEqual(ncu_summary.short_name("void a::(anonymous namespace)::k<float, 2>(const T1 *, int)"), "k")
        self.assertEqual(ncu_summary.short_name("k<Pack<__half>, int>"), "k")
        self.assertEqual(ncu_summary.short_name("sm90_xmma_gemm_f16"), "sm90_xmma_gemm_f16")

    def test_times_are_grouped_and_summed_in_seconds(self):
        times = list(ncu_summary.kernel_times(LOG))
        self.assertEqual([name for name, _ in times], ["layer_norm_forward_kernel", "layer_norm_forward_kernel",
                                                       "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
                                                       "softmax_forward_registers_kernel"])
        self.assertAlmostEqual(times[0][1], 20e-6)
        self.assertAlmostEqual(times[2][1], 1.5e-3)
        self.assertAlmostEqual(times[3][1], 40e-6)

    def test_the_table_puts_the_largest_first_with_shares(self):
        table = ncu_summary.summarize(LOG, top=2)
        lines = table.splitlines()
        self.assertEqual(lines[0], "4 kernel launches, 1.57 ms of kernel time")
        self.assertTrue(lines[4].startswith("| sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64 | 1 | 1.50 | 95.5% |"),
                        lines[4])
        self.assertEqual(lines[5], "| softmax_forward_registers_kernel | 1 | 0.04 | 2.5% | 40.0 |")
        self.assertEqual(lines[6], "| (1 more kernels) | 2 | 0.03 | 1.9% | |")
        self.assertEqual(len(lines), 7)

    def test_an_unknown_unit_is_an_error_not_a_wrong_number(self):
        with self.assertRaisesRegex(ValueError, "unknown time unit 'cycle'"):
            list(ncu_summary.kernel_times([HEADER, row(0, "k", "5", unit="cycle")]))

    def test_a_log_without_kernel_rows_fails_saying_so(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("==PROF== ncu: no kernels were profiled\n")
        try:
            run = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench", "ncu_summary.py"), f.name],
                                 capture_output=True, text=True, timeout=60)
        finally:
            os.unlink(f.name)
        self.assertEqual(run.returncode, 1)
        self.assertIn("no gpu__time_duration.sum rows", run.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
