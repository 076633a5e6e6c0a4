"""Files damaged as copies and disks damage them, for the tests that hold dlbench's decoders to
Pillow's answers (golden_test.py), to bounded time and memory (tests/fuzz/hostile_input_test.py)
and for bench/damaged_images_vs_pillow.py. Only pillow_bases() needs Pillow."""
import io
import random
import zlib

KINDS = 6  # the ways damaged() damages a file, taken in turn


def damaged(data, kind, rng):
    """`data` damaged the `kind`-th way (0 to KINDS - 1): bits flipped, header bytes replaced, cut
    short, a run repeated, a run cut, 0xFF bytes planted (in a JPEG's entropy-coded data libjpeg
    reads a marker there)."""
    d = bytearray(data)
    if kind == 0:
        for _ in range(rng.choice([1, 2, 4, 16])):
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        for _ in range(rng.choice([1, 3, 8])):
            d[rng.randrange(min(len(d), 700))] = rng.randrange(256)
    elif kind == 2:
        d = d[:rng.randrange(1, len(d))]
    elif kind == 3:
        a, at = rng.randrange(len(d)), rng.randrange(len(d))
        d[at:at] = d[a:a + rng.randrange(1, 300)]
    elif kind == 4:
        a = rng.randrange(len(d))
        del d[a:a + rng.randrange(1, 64)]
    else:
        for _ in range(rng.choice([1, 4])):
            at = rng.randrange(len(d) - 1)
            d[at:at + 2] = bytes([0xFF, rng.randrange(256)])
    return bytes(d)


def fixed_png_checksums(data):
    """`data` with each chunk's CRC made right again where the chunks still parse, so that a reader
    goes past the checksums to the damage."""
    d = bytearray(data)
    at = 8
    while at + 12 <= len(d):
        length = int.from_bytes(d[at:at + 4], "big")
        if at + 12 + length > len(d):
            break
        d[at + 8 + length:at + 12 + length] = zlib.crc32(d[at + 4:at + 8 + length]).to_bytes(4, "big")
        at += 12 + length
    return bytes(d)


def damaged_set(bases, count, seed):
    """`count` files {name: bytes} from `bases` ({name: bytes}, taken in turn, each damaged every
    way in turn); every other damaged PNG (a name containing "png") has its checksums made right."""
    rng = random.Random(seed)
    names = sorted(bases)
    out = {}
    for i in range(count):
        name = names[i % len(names)]
        round_ = i // len(names)
        data = damaged(bases[name], round_ % KINDS, rng)
        if "png" in name and round_ % 2 == 0:
            data = fixed_png_checksums(data)
        out[f"{i:04d}-{name}"] = data
    return out


def pillow_bases():
    """{name: bytes}: a 97 x 73 picture written by Pillow in every kind the pipeline decodes: JPEGs
    baseline 4:2:0 and 4:4:4, progressive, grey, CMYK baseline and progressive, PNGs RGB,
    palette, grey with alpha, RGBA and interlaced, and WebP images lossy and lossless."""
    from PIL import Image
    picture = Image.new("RGB", (97, 73))
    picture.putdata([(x * 255 // 97, y * 255 // 73, (x * y) % 256) for y in range(73) for x in range(97)])
    bases = {}
    for name, mode, form, options in (
            ("baseline420", "RGB", "JPEG", {}), ("baseline444", "RGB", "JPEG", {"subsampling": 0}),
            ("progressive", "RGB", "JPEG", {"progressive": True}), ("grey", "L", "JPEG", {}),
            ("cmyk", "CMYK", "JPEG", {}), ("cmyk-progressive", "CMYK", "JPEG", {"progressive": True}),
            ("png-rgb", "RGB", "PNG", {}), ("png-palette", "P", "PNG", {}), ("png-grey-alpha", "LA", "PNG", {}),
            ("png-rgba", "RGBA", "PNG", {}), ("png-interlaced", "RGB", "PNG", {"interlace": 1}),
            ("webp-lossy", "RGB", "WEBP", {"quality": 80}), ("webp-lossless", "RGB", "WEBP", {"lossless": True})):
        buffer = io.BytesIO()
        picture.convert(mode).save(buffer, form, **({"quality": 90} if form == "JPEG" else {}), **options)
        bases[name] = buffer.getvalue()
    return bases
