#!/usr/bin/env python3
"""bench/pytorch_image_models.py builds, for every image model, the network dlbench-worker trains:
the same parameter count as the worker's header line, and a finite loss of about ln(classes)
before training, so that a side-by-side comparison times the same work on both sides.

    pytorch_image_models_test.py PATH/dlbench-worker    (run by a python3 that imports torch)
"""
import math
import os
import re
import subprocess
import sys
import unittest

WORKER = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import pytorch_image_models  # noqa: E402
import torch  # noqa: E402

# The smallest image each model takes (dlbench-worker --list-models), to keep the steps cheap.
IMAGE = {"inception_v3": 299, "alexnet": 63}
CLASSES = {"deeplabv3plus": 19}


def worker_parameters(model, image):
    done = subprocess.run([WORKER, "--model", model, "--image-size", str(image), "--batch-size", "1",
                           "--warmup-steps", "0", "--measure-steps", "1", "--repeats", "1", "--threads", "2"],
                          capture_output=True, text=True, timeout=300, cwd="/tmp")
    found = re.search(r", (\d+) parameters,", done.stdout + done.stderr)
    if found is None:
        raise AssertionError(f"{model}: no parameter count in dlbench-worker's output:\n{done.stdout}{done.stderr}")
    return int(found.group(1))


class PyTorchImageModels(unittest.TestCase):
    def test_each_model_is_the_workers_network(self):
        torch.manual_seed(0)
        for name in pytorch_image_models.MODELS:
            with self.subTest(name):
                image = IMAGE.get(name, 32)
                model, labels, loss_of = pytorch_image_models.build(name, 2, image, image, "cpu")
                self.assertEqual(sum(p.numel() for p in model.parameters()), worker_parameters(name, image))
                self.assertTrue(model.training)
                with torch.no_grad():
                    loss = loss_of(model(torch.randn(2, 3, image, image)), labels).item()
                # Untrained: about ln(classes), InceptionV3's 1.4 times that (its auxiliary term).
                expected = math.log(CLASSES.get(name, 1000)) * (1.4 if name == "inception_v3" else 1)
                self.assertTrue(math.isfinite(loss) and 0.5 * expected < loss < 2 * expected, (name, loss, expected))
        if "deeplabv3plus" in pytorch_image_models.MODELS:
            _, labels, _ = pytorch_image_models.build("deeplabv3plus", 4, 32, 32, "cpu")
            self.assertEqual(tuple(labels.shape), (4, 32, 32))
            self.assertTrue(((labels < 19) | (labels == pytorch_image_models.IGNORE_INDEX)).all())

    def test_an_unknown_model_is_refused_naming_the_allowed(self):
        with self.assertRaisesRegex(ValueError, "model 'bert-base': allowed resnet50, resnet152"):
            pytorch_image_models.build("bert-base", 1, 32, 32, "cpu")


if __name__ == "__main__":
    unittest.main(verbosity=2)
