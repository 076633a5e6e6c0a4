#!/usr/bin/env python3
"""Which damaged images each dlbench-input build refuses, against what Pillow (torchvision's loader)
refuses: COUNT files damaged as tests/input/damage.py damages them (bits flipped, header bytes
replaced, cut short, runs repeated or cut, 0xFF bytes planted; every other PNG's checksums made
right), from Pillow-written JPEGs, PNGs and WebP images of every kind the pipeline decodes, all in one ImageFolder
class. Each build answers with `dlbench-input check` (or, where a build has no check, `transform`
file by file, each in a fresh process), on the default decoding path and the whole-image one.
Prints a table for bench/RESULTS.md.

    /usr/bin/python3 bench/damaged_images_vs_pillow.py BUILD/bin/dlbench-input [MORE...] [--count 3000] [--seed 1]

Run it with an interpreter that has Pillow (Debian's /usr/bin/python3 with python3-pil).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "input"))
import damage  # noqa: E402

from PIL import Image  # noqa: E402


def refused_by_check(tool, root, flags):
    p = subprocess.run([tool, "check", root, "--threads", "2", *flags], capture_output=True, text=True)
    if p.returncode == 2:
        return None  # no check subcommand in this build
    return {r["path"] for r in json.loads(p.stdout)["refused"]}


def refused_file_by_file(tool, paths, flags, tmp):
    refused = set()
    for path in paths:
        p = subprocess.run([tool, "transform", path, "--top", "0", "--left", "0", "--height", "1", "--width", "1",
                            "--image-size", "8", "--output", os.path.join(tmp, "sample.raw"), *flags],
                           capture_output=True, text=True)
        if p.returncode != 0:
            refused.add(path)
    return refused


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tools", nargs="+")
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "images", "a")
        os.makedirs(folder)
        pillow_refuses, kinds = set(), {}
        for name, data in damage.damaged_set(damage.pillow_bases(), args.count, args.seed).items():
            path = os.path.join(folder, name + ".jpg")
            with open(path, "wb") as f:
                f.write(data)
            kinds[path] = "PNG" if "png" in name else "WebP" if "webp" in name else "JPEG"
            try:
                with Image.open(path) as img:
                    img.convert("RGB")
            except Exception:
                pillow_refuses.add(path)
        print(f"{args.count} damaged files (seed {args.seed}): Pillow refuses {len(pillow_refuses)}")
        print("| build | decoding | format | files | as Pillow | decoded, Pillow refuses | refused, Pillow decodes "
              "| seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for tool in args.tools:
            for label, flags in (("crop only (default)", []), ("whole image", ["--crop-only", "off"])):
                start = time.monotonic()
                refused = refused_by_check(tool, os.path.dirname(folder), flags)
                how = "check"
                if refused is None:
                    refused = refused_file_by_file(tool, sorted(kinds), flags, tmp)
                    how = "transform, a process a file"
                seconds = time.monotonic() - start
                for form in ("JPEG", "PNG", "WebP"):
                    paths = [p for p, k in kinds.items() if k == form]
                    extra = sum(1 for p in paths if p not in refused and p in pillow_refuses)
                    missing = sum(1 for p in paths if p in refused and p not in pillow_refuses)
                    print(f"| {tool} | {label} | {form} | {len(paths)} | {len(paths) - extra - missing} | {extra} "
                          f"| {missing} | {seconds:.2f} ({how}) |")


if __name__ == "__main__":
    main()
