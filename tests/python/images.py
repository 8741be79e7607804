"""What Pillow and torchvision make of images, for the image-folder tests (#30 item 2).

usage:
  images.py write DIR           test images in DIR: photo.jpg (q90), photo.png, grey.jpg, rgba.png,
                                progressive.jpg, 4:4:4 and 4:2:0 JPEGs, a tall and a wide PNG,
                                cmyk.jpg, rgb16.png, grey16.png, gamma.png, palette.png (with
                                tRNS), grey_alpha.png
  images.py decode FILE OUT     Pillow's decode of FILE, .convert("RGB"), as raw H x W x 3 bytes
  images.py crops RGB H W S BOXES OUT
                                the raw RGB image (H x W x 3 bytes) through torchvision's
                                resized_crop(box, [S, S], antialias) on the PIL image and on the
                                uint8 tensor, and horizontal_flip: BOXES is lines "top left h w";
                                OUT gets, per box, S*S*3 bytes (PIL) then S*S*3 (tensor) then the
                                flipped PIL crop
  images.py eval RGB H W R S OUT
                                Resize(R) then CenterCrop(S), PIL and tensor (antialias)
  images.py rrc_fallback H W OUT
                                RandomResizedCrop.get_params on an H x W image whose draws all fail
  images.py folder IDX_DIR OUT N_TRAIN N_VAL
                                Fashion-MNIST's t10k split as an ImageFolder (even indices JPEG q95,
                                odd PNG) OUT/folder/{train,val}/<class>/, and the same images as IDX
                                files OUT/idx/ (train-*, t10k-*)
  images.py samples ROOT OUT    torchvision.datasets.ImageFolder(ROOT).samples as "label path" lines
  images.py batch JOBS          each line of JOBS is one of the commands above (one Python, one
                                import of torch for all)
"""
import gzip
import os
import sys

import numpy as np
from PIL import Image


def photo(h, w, seed):
    """A smooth image with edges and noise (a JPEG's typical content)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([
        128 + 100 * np.sin(x / 17.0) * np.cos(y / 23.0),
        128 + 90 * np.sin((x + y) / 31.0),
        (x * 255.0 / w) * (y > h / 3) + 60 * (x < w / 2),
    ], axis=-1)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def write(d):
    os.makedirs(d, exist_ok=True)
    p = photo(375, 500, 1)
    Image.fromarray(p).save(f"{d}/photo.jpg", quality=90)
    Image.fromarray(p).save(f"{d}/photo.png")
    Image.fromarray(p).save(f"{d}/photo444.jpg", quality=95, subsampling=0)
    Image.fromarray(p).save(f"{d}/progressive.jpg", quality=85, progressive=True)
    Image.fromarray(p[:, :, 0]).save(f"{d}/grey.jpg", quality=90)
    rgba = np.concatenate([p, np.full(p.shape[:2] + (1,), 100, np.uint8)], axis=-1)
    Image.fromarray(rgba).save(f"{d}/rgba.png")
    Image.fromarray(photo(401, 123, 2)).save(f"{d}/tall.png")
    Image.fromarray(photo(77, 300, 3)).save(f"{d}/wide.png")
    # What Pillow reads its own way: a CMYK JPEG (Adobe's inverted CMYK, as ImageNet's 22),
    # 16-bit PNGs without a gAMA chunk (the high byte; greyscale as I;16, clipped to 255 by
    # convert("RGB")) and an 8-bit PNG whose gAMA chunk Pillow ignores.
    Image.fromarray(p).convert("CMYK").save(f"{d}/cmyk.jpg", quality=90)
    Image.fromarray(p).convert("P", palette=Image.Palette.ADAPTIVE).save(f"{d}/palette.png", transparency=3)
    Image.fromarray(np.stack([p[:, :, 1], p[:, :, 2]], axis=-1), "LA").save(f"{d}/grey_alpha.png")
    rng = np.random.default_rng(4)
    png_raw(f"{d}/rgb16.png", rng.integers(0, 65536, (37, 29, 3)), 2, 16)
    png_raw(f"{d}/grey16.png", rng.integers(0, 600, (23, 31)), 0, 16)
    png_raw(f"{d}/gamma.png", rng.integers(0, 256, (19, 27, 3)), 2, 8, png_chunk(b"gAMA", (55556).to_bytes(4, "big")))


def png_chunk(kind, data):
    import zlib
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return len(data).to_bytes(4, "big") + kind + data + crc.to_bytes(4, "big")


def png_raw(path, samples, color_type, depth, extra=b""):
    """A PNG of `samples` (H x W [x C]) as they are, which Pillow cannot write (16-bit RGB)."""
    import zlib
    h, w = samples.shape[:2]
    rows = b"".join(b"\x00" + samples[y].astype(">u2" if depth == 16 else "u1").tobytes() for y in range(h))
    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([depth, color_type, 0, 0, 0])
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
                png_chunk(b"IDAT", zlib.compress(rows)) + png_chunk(b"IEND", b""))


def raw(path):
    return np.fromfile(path, dtype=np.uint8)


def crops(rgb_path, h, w, s, boxes_path, out):
    import torch
    import torchvision.transforms.functional as F

    arr = raw(rgb_path).reshape(h, w, 3)
    pil = Image.fromarray(arr)
    ten = torch.from_numpy(arr.copy()).permute(2, 0, 1)
    with open(out, "wb") as f:
        for line in open(boxes_path):
            top, left, bh, bw = (int(v) for v in line.split())
            a = F.resized_crop(pil, top, left, bh, bw, [s, s], antialias=True)
            b = F.resized_crop(ten, top, left, bh, bw, [s, s], antialias=True)
            f.write(np.asarray(a).tobytes())
            f.write(b.permute(1, 2, 0).contiguous().numpy().tobytes())
            f.write(np.asarray(F.hflip(a)).tobytes())


def evaluation(rgb_path, h, w, r, s, out):
    import torch
    import torchvision.transforms as T

    arr = raw(rgb_path).reshape(h, w, 3)
    t = T.Compose([T.Resize(r, antialias=True), T.CenterCrop(s)])
    with open(out, "wb") as f:
        f.write(np.asarray(t(Image.fromarray(arr))).tobytes())
        f.write(t(torch.from_numpy(arr.copy()).permute(2, 0, 1)).permute(1, 2, 0).contiguous().numpy().tobytes())


def rrc_fallback(h, w, out):
    import torch
    import torchvision.transforms as T

    top, left, bh, bw = T.RandomResizedCrop.get_params(torch.zeros(3, h, w), [0.08, 1.0], [3 / 4, 4 / 3])
    open(out, "w").write(f"{top} {left} {bh} {bw}\n")


def idx(path, magic, arr):
    with gzip.open(path, "wb") as f:
        f.write(np.array([magic, *arr.shape], dtype=">i4").tobytes())
        f.write(arr.astype(np.uint8).tobytes())


def folder(idx_dir, out, n_train, n_val):
    def read(name, offset):
        with gzip.open(f"{idx_dir}/{name}.gz") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

    images = read("t10k-images-idx3-ubyte", 16).reshape(-1, 28, 28)
    labels = read("t10k-labels-idx1-ubyte", 8)
    assert n_train + n_val <= len(images)
    splits = {"train": range(0, n_train), "val": range(n_train, n_train + n_val)}
    for split, ids in splits.items():
        if not ids:
            continue
        for c in range(10):
            os.makedirs(f"{out}/folder/{split}/class_{c}", exist_ok=True)
        for i in ids:
            img = Image.fromarray(images[i])
            base = f"{out}/folder/{split}/class_{labels[i]}/{i:05d}"
            if i % 2 == 0:
                img.save(base + ".jpg", quality=95)
            else:
                img.save(base + ".png")
    os.makedirs(f"{out}/idx", exist_ok=True)
    # The IDX twin holds the pixels the folder decodes to (the JPEGs' are lossy).
    decoded = np.stack([
        np.asarray(Image.open(f"{out}/folder/{s}/class_{labels[i]}/{i:05d}.{'jpg' if i % 2 == 0 else 'png'}"))
        for s, ids in splits.items() for i in ids
    ])
    tr, va = decoded[:n_train], decoded[n_train:]
    idx(f"{out}/idx/train-images-idx3-ubyte.gz", 2051, tr)
    idx(f"{out}/idx/train-labels-idx1-ubyte.gz", 2049, labels[:n_train])
    idx(f"{out}/idx/t10k-images-idx3-ubyte.gz", 2051, va)
    idx(f"{out}/idx/t10k-labels-idx1-ubyte.gz", 2049, labels[n_train:n_train + n_val])


def samples(root, out):
    import torchvision.datasets as D

    with open(out, "w") as f:
        for path, label in D.ImageFolder(root).samples:
            f.write(f"{label} {path}\n")


def main():
    run(sys.argv[1], sys.argv[2:])


def run(cmd, args):
    if cmd == "batch":
        for line in open(args[0]):
            if line.strip():
                words = line.split()
                run(words[0], words[1:])
    elif cmd == "write":
        write(args[0])
    elif cmd == "decode":
        open(args[1], "wb").write(np.asarray(Image.open(args[0]).convert("RGB")).tobytes())
    elif cmd == "crops":
        crops(args[0], int(args[1]), int(args[2]), int(args[3]), args[4], args[5])
    elif cmd == "eval":
        evaluation(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), args[5])
    elif cmd == "rrc_fallback":
        rrc_fallback(int(args[0]), int(args[1]), args[2])
    elif cmd == "folder":
        folder(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "samples":
        samples(args[0], args[1])
    else:
        sys.exit(f"images.py: unknown command {cmd!r}; see the docstring")


if __name__ == "__main__":
    main()
