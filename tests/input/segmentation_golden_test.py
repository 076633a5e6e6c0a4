#!/usr/bin/env python3
"""dlbench's Cityscapes pipeline against torchvision's segmentation reference (Debian's PyTorch
1.13) on a generated data set: for the same draws (RandomResize's size, the flip, RandomCrop's
corner) the image sample is bit for bit torchvision's on PIL (bilinear resize, flip, pad with 0,
crop, to_tensor, normalize) and the labels are the nearest-resized label ids, flipped, padded
with 255, cropped and mapped to Cityscapes' 19 training ids. Also: the shards cover every pair
once per epoch, and broken pairs are skipped and counted.

Usage: segmentation_golden_test.py DLBENCH_INPUT   (run with an interpreter that has torch and torchvision)
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch  # noqa: F401  (torchvision needs it)
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F
except ImportError as e:  # pragma: no cover - the CMake test is only added where torch exists
    print(f"SKIP: needs torch, torchvision and PIL: {e}")
    sys.exit(0)

TOOL = os.path.abspath(sys.argv.pop(1))
WIDTH, HEIGHT = 317, 151  # odd sizes, so that every resize rounds somewhere
CROP_H, CROP_W = 96, 160

# cityscapesScripts' labels.py: id -> trainId for the 19 training classes; every other id is 255.
TRAIN_IDS = {7: 0, 8: 1, 11: 2, 12: 3, 13: 4, 17: 5, 19: 6, 20: 7, 21: 8, 22: 9, 23: 10, 24: 11, 25: 12, 26: 13,
             27: 14, 28: 15, 31: 16, 32: 17, 33: 18}
ID_TO_TRAIN = np.full(256, 255, dtype=np.int32)
for label_id, train_id in TRAIN_IDS.items():
    ID_TO_TRAIN[label_id] = train_id


def tool(*args, check=True):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"dlbench-input {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr}")
    return p


def reference(image_path, label_path, resized_h, resized_w, flip, top, left):
    """torchvision's references/segmentation transforms, the draws given."""
    image = Image.open(image_path).convert("RGB")
    target = Image.open(label_path)
    image = F.resize(image, [resized_h, resized_w])  # bilinear: PIL's antialiasing filter
    target = F.resize(target, [resized_h, resized_w], interpolation=InterpolationMode.NEAREST)
    if flip:
        image, target = F.hflip(image), F.hflip(target)
    pad_h, pad_w = max(CROP_H - resized_h, 0), max(CROP_W - resized_w, 0)
    if pad_h or pad_w:  # pad_if_smaller, on each side that is smaller than the crop
        image = F.pad(image, [0, 0, pad_w, pad_h], fill=0)
        target = F.pad(target, [0, 0, pad_w, pad_h], fill=255)
    image, target = F.crop(image, top, left, CROP_H, CROP_W), F.crop(target, top, left, CROP_H, CROP_W)
    pixels = F.normalize(F.to_tensor(image), [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).numpy()
    return pixels, ID_TO_TRAIN[np.asarray(target, dtype=np.uint8)]


def dlbench_sample(image_path, label_path, resized_h, resized_w, flip, top, left, out):
    tool("transform-segmentation", image_path, label_path, "--resized-height", resized_h, "--resized-width", resized_w,
         "--flip", int(flip), "--top", top, "--left", left, "--crop-height", CROP_H, "--crop-width", CROP_W,
         "--output", out)
    pixels = np.fromfile(out, dtype=np.float32).reshape(3, CROP_H, CROP_W)
    labels = np.fromfile(out + ".labels", dtype=np.int32).reshape(CROP_H, CROP_W)
    return pixels, labels


class Golden(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "cityscapes")
        tool("generate", cls.data, "--data", "cityscapes", "--cities", 2, "--per-city", 3, "--width", WIDTH,
             "--height", HEIGHT, "--broken", 1)
        # And a pair of noise at Cityscapes' own size, where every pixel differs from its neighbours: a
        # resampler or a nearest neighbour one pixel off shows at once (the generated scenes are made
        # of large regions), and PIL's nearest positions, stepped in double, drift at 2048 and 1024.
        noise = np.random.default_rng(3)
        cls.noise = (os.path.join(cls.tmp.name, "noise_leftImg8bit.png"), os.path.join(cls.tmp.name, "noise_labelIds.png"))
        Image.fromarray(noise.integers(0, 256, (1024, 2048, 3), dtype=np.uint8)).save(cls.noise[0])
        Image.fromarray(noise.integers(0, 34, (1024, 2048), dtype=np.uint8)).save(cls.noise[1])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def pairs(self):
        lines = tool("shard", self.data, "--data", "cityscapes").stdout.splitlines()
        return [tuple(line.split("\t")) for line in lines]

    def test_the_scan_pairs_every_image_with_its_labels(self):
        scan = json.loads(tool("scan", self.data, "--data", "cityscapes").stdout)
        self.assertEqual(scan, {"cities": ["city00", "city01"], "pairs": 7, "unpairedImages": 0})
        os.remove(os.path.join(self.data, "gtFine", "train", "city01", "city01_000002_000019_gtFine_labelIds.png"))
        try:
            scan = json.loads(tool("scan", self.data, "--data", "cityscapes").stdout)
            self.assertEqual((scan["pairs"], scan["unpairedImages"]), (6, 1))
        finally:
            tool("generate", self.data, "--data", "cityscapes", "--cities", 2, "--per-city", 3, "--width", WIDTH,
                 "--height", HEIGHT, "--broken", 1)

    def test_samples_are_torchvisions_bit_for_bit(self):
        rng = random.Random(5)
        pairs = [p for p in self.pairs() if "broken" not in p[0]]

        def random_draws(height, width, count):
            draws = []
            for _ in range(count):
                size = rng.randint(int(0.5 * height), int(2.0 * height))
                resized_h, resized_w = size, int(size * width / height)  # F.resize(img, size): the shorter side
                top = rng.randint(0, max(resized_h, CROP_H) - CROP_H)
                left = rng.randint(0, max(resized_w, CROP_W) - CROP_W)
                draws.append((resized_h, resized_w, rng.random() < 0.5, top, left))
            return draws

        draws = [
            (HEIGHT, WIDTH, False, 0, 0),              # no resize at all: a plain crop
            (HEIGHT * 2, WIDTH * 2, True, 17, 40),     # upsampling, flipped
            (75, 158, False, 0, 0),                    # smaller than the crop both ways: padded
            (75, 158, True, 0, 0),                     # padded and flipped (the pad stays right)
            (120, 253, True, 24, 93),                  # padded below, inside across
        ] + random_draws(HEIGHT, WIDTH, 12)
        cases = [(pairs[i % len(pairs)], draw) for i, draw in enumerate(draws)]
        cases += [(self.noise, draw) for draw in random_draws(1024, 2048, 12) + [(1027, 2054, True, 500, 1800)]]
        out = os.path.join(self.tmp.name, "sample.raw")
        for (image_path, label_path), draw in cases:
            with self.subTest(draw=draw, image=os.path.basename(image_path)):
                want_pixels, want_labels = reference(image_path, label_path, *draw)
                got_pixels, got_labels = dlbench_sample(image_path, label_path, *draw, out)
                np.testing.assert_array_equal(got_pixels, want_pixels)
                np.testing.assert_array_equal(got_labels, want_labels)
                self.assertTrue(set(np.unique(got_labels)) <= set(range(19)) | {255})

    def test_padding_is_ignored_and_training_ids_appear(self):
        image_path, label_path = self.pairs()[0]
        _, labels = dlbench_sample(image_path, label_path, 75, 158, False, 0, 0, os.path.join(self.tmp.name, "p.raw"))
        self.assertTrue((labels[75:, :] == 255).all() and (labels[:, 158:] == 255).all())
        self.assertGreater(len(set(np.unique(labels[:75, :158])) - {255}), 2)

    def test_the_pipeline_covers_the_shards_and_skips_the_broken_pair(self):
        shards = [set(line.split("\t")[0] for line in
                      tool("shard", self.data, "--data", "cityscapes", "--rank", r, "--world", 2).stdout.splitlines())
                  for r in range(2)]
        self.assertFalse(shards[0] & shards[1])
        self.assertEqual(len(shards[0] | shards[1]), 7)
        dump = os.path.join(self.tmp.name, "first.raw")
        result = json.loads(tool("measure", self.data, "--data", "cityscapes", "--batch-size", 4, "--batches", 3,
                                 "--crop-height", CROP_H, "--crop-width", CROP_W, "--threads", 2,
                                 "--dump-first", dump).stdout)
        self.assertEqual(result["files"], 7)
        self.assertEqual(result["skippedFiles"], 1)
        self.assertIn("broken", result["skipped"][0]["path"])
        self.assertIn("not a PNG", result["skipped"][0]["why"])
        pixels = np.fromfile(dump, dtype=np.float32)
        self.assertEqual(pixels.size, 4 * 3 * CROP_H * CROP_W)
        self.assertTrue(np.isfinite(pixels).all())
        with open(dump + ".labels") as f:
            labels = {int(line) for line in f}
        self.assertTrue(labels <= set(range(19)) | {255}, labels)

    def test_check_names_the_broken_pair_of_all_of_them(self):
        report = json.loads(tool("check", self.data, "--data", "cityscapes", "--crop-height", CROP_H,
                                 "--crop-width", CROP_W, "--threads", 2).stdout)
        self.assertEqual((report["samples"], report["refusedCount"], report["samplesAre"]),
                         (7, 1, "image and label PNG pairs"))
        self.assertIn("broken", report["refused"][0]["path"])
        self.assertEqual(report["refused"][0]["why"], "not a PNG file")


class Refusals(unittest.TestCase):
    def test_unusable_data_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = tool("measure", tmp, "--data", "cityscapes", check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("has no leftImg8bit/train directory", p.stderr)
            os.makedirs(os.path.join(tmp, "leftImg8bit", "train", "aachen"))
            os.makedirs(os.path.join(tmp, "gtFine", "train", "aachen"))
            p = tool("measure", tmp, "--data", "cityscapes", check=False)
            self.assertIn("no image with its labels", p.stderr)
            # A colour label image (gtFine's _color.png saved under the labelIds name) is refused per pair.
            Image.new("RGB", (40, 30), (128, 64, 128)).save(os.path.join(tmp, "leftImg8bit", "train", "aachen",
                                                                         "aachen_000000_000019_leftImg8bit.png"))
            Image.new("RGB", (40, 30), (128, 64, 128)).save(os.path.join(tmp, "gtFine", "train", "aachen",
                                                                         "aachen_000000_000019_gtFine_labelIds.png"))
            p = tool("measure", tmp, "--data", "cityscapes", "--crop-height", 16, "--crop-width", 16, check=False)
            self.assertEqual(p.returncode, 1)
            self.assertIn("none of the 1 image and label PNG pairs of rank 0's share", p.stderr)
            self.assertIn("not an 8-bit greyscale PNG", p.stderr)
            p = tool("measure", tmp, "--data", "voc", check=False)
            self.assertEqual(p.returncode, 2)
            self.assertIn("imagefolder, cityscapes", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
