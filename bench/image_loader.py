"""The image-folder benchmark's photographs and PyTorch's side (make bench, section 14).

usage:
  image_loader.py prepare WHEEL OUT N   N JPEGs of about 500x375 (quality 90) in OUT/train/<class>/,
                                        made from the photographs scikit-image's wheel ships
                                        (WHEEL: the .whl file; nothing of it is imported)
  image_loader.py pytorch DIR BATCH WORKERS BATCHES
                                        torchvision's ImageFolder(DIR/train) with RandomResizedCrop(224),
                                        RandomHorizontalFlip, ToTensor, Normalize through
                                        DataLoader(num_workers=WORKERS): prints images/s over BATCHES
                                        batches after the first (the workers' start excluded)
"""
import io
import os
import sys
import time
import zipfile

PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "motorcycle_right.png",
          "rocket.jpg", "hubble_deep_field.jpg", "ihc.png", "retina.jpg"]


def prepare(wheel, out, n):
    import numpy as np
    from PIL import Image

    with zipfile.ZipFile(wheel) as z:
        photos = [Image.open(io.BytesIO(z.read(f"skimage/data/{p}"))).convert("RGB") for p in PHOTOS]
    rng = np.random.default_rng(0)
    for i in range(n):
        img = photos[i % len(photos)]
        w, h = img.size
        # A random crop of 60-100% of each side, resized to ImageNet's typical 500x375 (or 375x500).
        cw, ch = int(w * rng.uniform(0.6, 1)), int(h * rng.uniform(0.6, 1))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        size = (500, 375) if cw >= ch else (375, 500)
        crop = img.crop((x, y, x + cw, y + ch)).resize(size, Image.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        d = f"{out}/train/class_{i % 10}"
        os.makedirs(d, exist_ok=True)
        crop.save(f"{d}/{i:06d}.jpg", quality=90)


def pytorch(root, batch, workers, batches):
    import torch
    import torchvision.datasets as D
    import torchvision.transforms as T

    t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = torch.utils.data.DataLoader(D.ImageFolder(f"{root}/train", transform=t), batch_size=batch,
                                         shuffle=True, num_workers=workers, drop_last=True,
                                         persistent_workers=False)
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    s = time.perf_counter() - start
    print(f"{batch * batches / s:.1f}")


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "prepare":
        prepare(a[0], a[1], int(a[2]))
    elif cmd == "pytorch":
        pytorch(a[0], int(a[1]), int(a[2]), int(a[3]))
    else:
        sys.exit(f"image_loader.py: unknown command {cmd!r}")


if __name__ == "__main__":
    main()
