#!/usr/bin/env python3
"""dlbench-exec as a process: timing is dlbench's, failures are results with reasons, output is bounded.

    exec_test.py PATH/TO/dlbench-exec
"""
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

EXEC = None


def case_env(**overrides):
    env = dict(os.environ)
    env.update({"DLBENCH_RUN": "exec-test", "DLBENCH_MODEL": "resnet50", "DLBENCH_IMAGE_SIZE": "224",
                "DLBENCH_NODES": "1", "DLBENCH_NODE_RANK": "0", "DLBENCH_GPUS_PER_NODE": "2",
                "DLBENCH_BATCH_SIZE": "4", "DLBENCH_PRECISION": "fp32", "DLBENCH_WARMUP_STEPS": "2",
                "DLBENCH_MEASURE_STEPS": "5", "DLBENCH_REPEATS": "3"})
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def sanitized(program):
    """Whether `program` was built with AddressSanitizer (the debug preset)."""
    with open(program, "rb") as f:
        return b"__asan_init" in f.read()


def run_exec(script, *options, timeout=60, **env):
    """Runs `sh -c script` under dlbench-exec; returns (exit code, result document or None, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        p = subprocess.run([EXEC, "--output", out, *options, "--", "sh", "-c", script], env=case_env(**env),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        doc = None
        if os.path.exists(out):
            with open(out) as f:
                doc = json.load(f)
    return p.returncode, doc, p.stderr.decode(errors="replace")


def markers(count, samples=8, sleep=None):
    step = (f"sleep {sleep}; " if sleep else "") + f"echo '@dlbench step {samples}'"
    return f"i=0; while [ $i -lt {count} ]; do {step}; i=$((i+1)); done"


class Timing(unittest.TestCase):
    def test_step_time_is_measured_by_dlbench_whatever_the_script_claims(self):
        # 100 ms per step, and lies about itself: a fake fact, a fake throughput line.
        script = ("import time\n"
                  "print('@dlbench fact stepTimeSeconds 0.001', flush=True)\n"
                  "for i in range(21):\n"
                  "    time.sleep(0.1)\n"
                  "    print('@dlbench step 8', flush=True)\n"
                  "    print('throughput: 1000000 img/s (measured by the script)', flush=True)\n")
        with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
            f.write(script)
            f.flush()
            code, doc, err = run_exec(f"exec {sys.executable} {f.name}")
        self.assertEqual(code, 0, err)
        self.assertEqual(doc["state"], "Succeeded")
        steps = doc["stepTimeSeconds"]
        # time.sleep never returns early, so no step takes less than 100 ms. A marker that reaches
        # the shim late (a loaded machine) makes the next step look shorter by that delay, never
        # the whole repeat: the median and each repeat's throughput hold the line; the bounds above
        # 100 ms leave room for a slow, shared machine.
        self.assertGreaterEqual(steps["median"], 0.099)
        self.assertLess(steps["median"], 0.2)
        self.assertGreater(steps["min"], 0.05)
        for repeat in doc["throughput"]["repeats"]:
            self.assertLessEqual(repeat, 8 / 0.1 * 1.03)  # global batch / step time, never the claim
            self.assertGreater(repeat, 8 / 0.2)
        self.assertEqual(doc["environment"]["facts"]["stepTimeSeconds"], "0.001")  # recorded, never used

    def test_markers_on_stderr_count_too(self):
        code, doc, err = run_exec(markers(21, sleep=0.01).replace("'@dlbench step 8'", "'@dlbench step 8' >&2"))
        self.assertEqual(code, 0, err)
        self.assertEqual(doc["state"], "Succeeded")


class Failures(unittest.TestCase):
    def assertFailed(self, doc, reason, *fragments):
        self.assertIsNotNone(doc)
        self.assertEqual(doc["state"], "Failed", doc)
        self.assertEqual(doc["reason"], reason, doc.get("message"))
        for fragment in fragments:
            self.assertIn(fragment, doc["message"])

    def test_exit_1_is_command_failed_with_the_last_lines(self):
        code, doc, _ = run_exec(markers(3) + "; echo 'RuntimeError: something broke' >&2; exit 1")
        self.assertEqual(code, 1)
        self.assertFailed(doc, "CommandFailed", "exited with code 1 after 3 of 21 step markers",
                          "RuntimeError: something broke")

    def test_nothing_printed_is_no_measurements(self):
        code, doc, _ = run_exec("true")
        self.assertEqual(code, 1)
        self.assertFailed(doc, "NoMeasurements", "printed no \"@dlbench step <samples>\" marker")

    def test_fewer_steps_is_incomplete_and_keeps_the_repeats_completed(self):
        _, doc, _ = run_exec(markers(20, sleep=0.01))
        self.assertFailed(doc, "IncompleteMeasurement", "printed 20 step markers; 21 were needed",
                          "2 of 3 repeats complete, kept here unjudged")
        self.assertEqual(len(doc["throughput"]["repeats"]), 2)
        self.assertNotIn("stability", doc)

    def test_another_batch_is_a_mismatch(self):
        _, doc, _ = run_exec(markers(21, samples=4))
        self.assertFailed(doc, "SampleCountMismatch", "the case's global batch is 8")

    def test_unsupported_and_invalid_markers(self):
        _, doc, _ = run_exec("echo '@dlbench unsupported amp needs a CUDA device'")
        self.assertFailed(doc, "Unsupported", "amp needs a CUDA device")
        _, doc, _ = run_exec("echo '@dlbench step eight'")
        self.assertFailed(doc, "InvalidMarker", "whole number >= 1")

    def test_a_missing_program_is_command_failed(self):
        _, doc, _ = run_exec("exec /nonexistent/train")
        self.assertFailed(doc, "CommandFailed", "/nonexistent/train")

    def test_timeout_stops_the_whole_process_group(self):
        start = time.monotonic()
        code, doc, _ = run_exec("sleep 300 & sleep 300; echo never", "--timeout", "2")
        self.assertLess(time.monotonic() - start, 20)
        self.assertEqual(code, 1)
        self.assertFailed(doc, "Timeout", "0 of 21 step markers")

    def test_sigterm_is_passed_on_and_the_result_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            # A command whose peer is lost may wait on it for minutes: what it completed before is
            # kept (one repeat of 7 steps here, the second not complete).
            p = subprocess.Popen([EXEC, "--output", out, "--", "sh", "-c", markers(9, sleep=0.01) + "; sleep 300"],
                                 env=case_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=20), 1)
            with open(out) as f:
                doc = json.load(f)
            self.assertFailed(doc, "Interrupted", "9 of 21 step markers; 1 of 3 repeats complete, kept here unjudged")
            self.assertEqual(len(doc["throughput"]["repeats"]), 1)
            self.assertGreater(doc["throughput"]["repeats"][0], 0)

    def test_a_flood_of_output_cannot_take_the_shim_down(self):
        # 256 MB without a newline, 300,000 short lines, then the steps: the shim keeps its memory
        # and still counts every marker.
        script = ("head -c 268435456 /dev/zero | tr '\\0' x; echo; yes 'flood line' | head -n 300000; " +
                  markers(21, sleep=0.02))
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        code, doc, _ = run_exec(script, "--quiet", timeout=300)
        self.assertEqual(code, 0, doc)
        self.assertEqual(doc["state"], "Succeeded")
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # A sanitized build's (the debug preset's) memory is AddressSanitizer's: its shadow and
        # quarantine held 66.8 MiB over this flood where a release build's shim held 2.7 MiB
        # (bench/exec_flood_memory.sh, bench/RESULTS.md).
        if not sanitized(EXEC):
            self.assertLess(max(peak_kib, before), 64 * 1024, "dlbench-exec (or the flood) held more than 64 MiB")


def scrape(port):
    """The samples of a /metrics page: {(name, frozenset of label pairs): value}."""
    import re
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def sample(samples, name, **labels):
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) == 1, f"{name} {labels}: {len(found)} samples"
    return found[0]


class LiveMetrics(unittest.TestCase):
    def test_the_loss_gauge_holds_the_loss_after_the_last_finished_repeat(self):
        # Each repeat is 2 + 5 steps. The script prints a loss mid-repeat (not a repeat's), then the
        # loss after the repeat's last step, and waits for the test to scrape before going on.
        with tempfile.TemporaryDirectory() as tmp:
            def steps(n):
                return f"i=0; while [ $i -lt {n} ]; do sleep 0.01; echo '@dlbench step 8'; i=$((i+1)); done; "

            def pause(name):
                return (f"touch {tmp}/{name}.ready; n=0; while [ ! -e {tmp}/{name}.go ] && [ $n -lt 600 ]; "
                        "do sleep 0.05; n=$((n+1)); done; ")
            script = (steps(3) + "echo '@dlbench loss 99'; " + steps(4) + "echo '@dlbench loss 6.5'; " + pause("one") +
                      steps(7) + "echo '@dlbench loss nan'; " + pause("two") + steps(7) + "echo '@dlbench loss 5'")
            out = os.path.join(tmp, "result.json")
            p = subprocess.Popen([EXEC, "--output", out, "--metrics-port", "0", "--", "sh", "-c", script],
                                 env=case_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                port = None
                for line in p.stderr:
                    if line.startswith("dlbench-exec: metrics on port "):
                        port = int(line.split()[-1])
                        break
                self.assertIsNotNone(port, "dlbench-exec never said its metrics port")
                threading.Thread(target=p.stderr.read, daemon=True).start()  # keep the pipe drained

                def at(name):
                    deadline = time.monotonic() + 30
                    while not os.path.exists(f"{tmp}/{name}.ready"):
                        self.assertLess(time.monotonic(), deadline, f"the script never reached {name}")
                        time.sleep(0.05)
                    time.sleep(0.3)  # the marker before the pause has been read by now
                    return scrape(port)

                first = at("one")
                self.assertEqual(sample(first, "dlbench_worker_loss", case="1x2-bs4-fp32", run="exec-test"), 6.5)
                self.assertEqual(sample(first, "dlbench_worker_steps_total", phase="measure"), 5)
                self.assertGreater(sample(first, "dlbench_worker_repeat_throughput_samples_per_second"), 0)
                open(f"{tmp}/one.go", "w").close()
                second = at("two")
                self.assertTrue(math.isnan(sample(second, "dlbench_worker_loss")), "a diverged loss is shown as it is")
                self.assertEqual(sample(second, "dlbench_worker_repeat"), 2)
                open(f"{tmp}/two.go", "w").close()
                self.assertEqual(p.wait(timeout=30), 1)
            finally:
                p.kill()
                p.wait()
            with open(out) as f:
                doc = json.load(f)
            self.assertEqual(doc["reason"], "LossNotFinite", doc)
            self.assertEqual(doc["lossAfterRepeats"], [6.5, "NaN", 5])


class Nodes(unittest.TestCase):
    def test_other_nodes_run_the_command_and_pass_its_exit_status(self):
        code, doc, _ = run_exec("exit 3", DLBENCH_NODES=2, DLBENCH_NODE_RANK=1)
        self.assertEqual(code, 3)
        self.assertIsNone(doc, "only node 0 reports")

    def test_a_missing_case_variable_is_a_usage_error_naming_it(self):
        env = case_env()
        del env["DLBENCH_BATCH_SIZE"]
        p = subprocess.run([EXEC, "--", "true"], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("DLBENCH_BATCH_SIZE is not set", p.stderr)

    def test_a_bad_number_flag_is_a_usage_error_naming_the_flag_and_the_range(self):
        for args, words in ((["--timeout", "0"], "--timeout: 0 is out of range; allowed: 1 to 2592000"),
                            (["--metrics-port", "http"], '--metrics-port: "http" is not a number')):
            p = subprocess.run([EXEC, *args, "--", "true"], env=case_env(), capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(words, p.stderr, args)

    def test_install_copies_a_self_contained_program(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([EXEC, "--install", tmp], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            installed = os.path.join(tmp, "dlbench-exec")
            self.assertTrue(os.access(installed, os.X_OK))
            self.assertIn("dlbench-exec", subprocess.run([installed, "--version"], capture_output=True, text=True).stdout)
            with open(installed, "rb") as f:
                elf = f.read()
            # A sanitizer build (the debug preset) links it dynamically: its runtime cannot be static.
            if not sanitized(installed):
                self.assertFalse(b"ld-linux" in elf[:4096], "dynamically linked: would need the image's libraries")
            self.assertTrue(os.path.exists(os.path.join(tmp, "examples", "pytorch", "dlbench_markers.py")))


if __name__ == "__main__":
    EXEC = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
