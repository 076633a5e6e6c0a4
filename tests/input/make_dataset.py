#!/usr/bin/env python3
"""Writes an ImageFolder data set of generated JPEGs: classes × images of several sizes and
aspect ratios (smooth gradients plus noise and shapes, so that crops and resampling show),
grayscale and CMYK images, PNGs named .jpg and PNGs named .png (or .PNG), WebP images, and optionally broken
files and images of another format torchvision's ImageFolder lists (BMP files, other_NN.bmp).

Usage: make_dataset.py DIR [--classes N] [--per-class N] [--broken N] [--other-formats N]
                           [--sizes small|imagenet]
"""
import argparse
import io
import os
import random

from PIL import Image, ImageDraw

SMALL_SIZES = [(64, 48), (97, 131), (160, 120), (233, 177), (300, 300), (401, 257), (520, 470)]
# ImageNet's training images average about 400 × 350; most are 500 × 375 or 375 × 500.
IMAGENET_SIZES = [(500, 375), (375, 500), (500, 333), (400, 300), (640, 480), (500, 500)]


def picture(rng, width, height, mode="RGB"):
    img = Image.new("RGB", (width, height))
    px = img.load()
    a, b, c = rng.random(), rng.random(), rng.random()
    for y in range(height):
        for x in range(width):
            px[x, y] = (int(255 * (x / width) * a) ^ (y & 31), int(255 * (y / height) * b), int(255 * c * ((x + y) % 64) / 64))
    draw = ImageDraw.Draw(img)
    for _ in range(6):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        draw.ellipse([x0, y0, x0 + rng.randrange(5, width // 2 + 6), y0 + rng.randrange(5, height // 2 + 6)],
                     fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    return img.convert(mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=60)
    ap.add_argument("--broken", type=int, default=0)
    ap.add_argument("--other-formats", type=int, default=0)
    ap.add_argument("--sizes", choices=["small", "imagenet"], default="small")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sizes = SMALL_SIZES if args.sizes == "small" else IMAGENET_SIZES
    # A few base pictures per class, re-encoded with different qualities: fast to write, and
    # every file is a different JPEG.
    for c in range(args.classes):
        folder = os.path.join(args.dir, f"class_{c:03d}")
        os.makedirs(folder, exist_ok=True)
        bases = [picture(rng, *sizes[(c + i) % len(sizes)]) for i in range(3)]
        for i in range(args.per_class):
            img = bases[i % len(bases)]
            if i % 17 == 5:
                img = img.convert("L")  # grayscale JPEGs occur in ImageNet
            elif i % 19 == 7:
                img = img.convert("CMYK")  # and CMYK ones (22 in its training set)
            quality = 70 + (i * 7) % 26
            subsampling = [0, 1, 2][i % 3]  # 4:4:4, 4:2:2, 4:2:0
            if i % 29 == 11:  # a PNG named .jpg, as one of ImageNet's (Pillow opens it by its content)
                img.convert("P" if c % 2 else "RGB").save(os.path.join(folder, f"img_{i:04d}.jpg"), format="PNG")
                continue
            if i % 31 == 17:  # a WebP image, lossy or lossless, with alpha (a gradient) in some
                webp = img.convert("RGB")
                if (i + c) % 2:
                    webp.putalpha(Image.linear_gradient("L").resize(webp.size))
                webp.save(os.path.join(folder, f"img_{i:04d}.webp"), format="WEBP", lossless=c % 3 == 1, quality=80)
                continue
            if i % 23 == 13:  # a PNG named so, which torchvision's ImageFolder lists as it lists JPEGs
                img.convert("RGB").save(os.path.join(folder, f"img_{i:04d}.{'PNG' if c % 2 else 'png'}"), format="PNG")
                continue
            img.save(os.path.join(folder, f"img_{i:04d}.jpg"), quality=quality, subsampling=subsampling)
        with open(os.path.join(folder, "README.txt"), "w") as f:
            f.write("not an image: ignored\n")
    for b in range(args.broken):
        folder = os.path.join(args.dir, f"class_{b % args.classes:03d}")
        if b % 3 == 0:
            data = b"this is not a JPEG at all"
        elif b % 3 == 1:
            buf = io.BytesIO()
            picture(rng, 120, 90).save(buf, "JPEG")
            data = buf.getvalue()[: len(buf.getvalue()) // 3]  # truncated
        else:
            data = b""
        with open(os.path.join(folder, f"broken_{b:02d}.jpg"), "wb") as f:
            f.write(data)
    for n in range(args.other_formats):
        folder = os.path.join(args.dir, f"class_{n % args.classes:03d}")
        picture(rng, 64, 48).save(os.path.join(folder, f"other_{n:02d}.bmp"), format="BMP")


if __name__ == "__main__":
    main()
