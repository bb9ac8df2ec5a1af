#!/usr/bin/env python3
# test_peer_scripts.py — what bench/'s peer drivers do before they reach a GPU:
# peer_train_step.py refuses malformed rows and counts naming the value, and both it and
# peer_scan.py exit 77 (skipped), not with a traceback, where PyTorch, a GPU or the peer
# is missing. The timing itself needs the peer's built extensions and a GPU;
# scripts/gpu_session.sh's peer and peerstep phases run it.
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "peer_train_step.py")
SCAN_SCRIPT = os.path.join(HERE, "peer_scan.py")


def run(*args, script=SCRIPT):
    with tempfile.TemporaryDirectory() as d:
        return subprocess.run([sys.executable, script, "--out", os.path.join(d, "o.json"), *args],
                              capture_output=True, text=True, timeout=120)


# (arguments, what the refusal must say): each refused with exit 2 before any child starts
REFUSALS = [
    (("--rows", "768:2048"), "'768:2048' is not d_model:T:layers"),
    (("--rows", "768:2k:1"), "'768:2k:1' is not three integers d_model:T:layers"),
    (("--rows", "768:0:1"), "'768:0:1' needs d_model, T and layers > 0"),
    (("--dtypes", "float32,bf16"), "bf16 not one of float32, bfloat16, float16"),
    (("--reps", "0"), "--reps 0"),
]


class PeerTrainStepArgs(unittest.TestCase):
    def test_bad_arguments_are_refused_naming_the_value(self):
        for args, message in REFUSALS:
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)

    def test_missing_torch_or_gpu_or_peer_is_a_skip_not_a_crash(self):
        # here: no PyTorch, or no GPU, or (on a GPU machine) no peer at this path: 77
        r = run("--peer-py", "/nonexistent", "--rows", "64:16:1", "--reps", "1")
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertRegex(r.stderr, "PyTorch does not import|no usable GPU|does not import")


class PeerScanSkips(unittest.TestCase):
    def test_missing_torch_or_gpu_or_module_is_a_skip_not_a_crash(self):
        r = run("--module", "/nonexistent/selective_scan_cuda.so", "--cases", "16:1", "--reps", "1",
                script=SCAN_SCRIPT)
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertRegex(r.stderr, "PyTorch does not import|no usable GPU|not loadable")


if __name__ == "__main__":
    unittest.main()
