"""A real PyTorch training job whose input pipeline can starve the GPU, for
checking stackscope on a GPU machine (never run by the test suite).

A torchvision ResNet-50 (weights=None) trains on synthetic images: --images
small JPEGs (48x48, made with Pillow at start, kept as bytes in memory), read
through a torch.utils.data.DataLoader (batch --batch, default 64) whose
Dataset.__getitem__ decodes one JPEG and runs augment_pixels(), a pure-Python
colour jitter over the pixel list for --augment-ms (default 60 ms) a image.
The trainer moves the batch to the GPU, resizes it to 224x224 there and runs
forward, backward and an SGD step; `loss.item()` ends each step (as logging
does), so the trainer waits there while the GPU computes.

The step's GPU time is set at start: one ResNet-50 step on an H100 takes tens
of milliseconds, far less than the workers need for a batch, so each batch is
trained --repeats times (default: as many as make a step last about
--gpu-step-ms, 400 ms, measured after a warm-up; printed). With the defaults
a worker needs 64 x 60 ms = 3.8 s a batch:
  --workers 2    a batch every ~1.9 s, the GPU busy ~0.4 s of it (~20%):
                 starved; the trainer waits in the DataLoader's __next__,
                 the workers run augment_pixels
  --workers 12   a batch every ~0.32 s, faster than the 0.4 s step: the GPU
                 is busy (~100%), the trainer waits in loss.item()
  --workers 0 --slow-read-ms 40
                 the trainer itself reads (time.sleep: slow storage) and
                 augments each image, ~100 ms an image, 6.4 s a batch: the
                 GPU idles ~95% of the time, the trainer's stack shows
                 __getitem__ -> read_image / augment_pixels under main

usage: dataloader_train.py [--workers N] [--slow-read-ms MS] [--seconds S]
                           [--ready FILE] [--batch B] [--augment-ms MS]
                           [--gpu-step-ms MS] [--repeats R] [--images N]
  --ready FILE   written (this process's pid) once the loop's first step is
                 done
  --seconds S    stop after S seconds of training (default 300)
Runs on the CPU when CUDA is absent (slowly; for a smoke test).
"""
import argparse
import io
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, Dataset

SIZE = 48


def make_jpegs(count):
    """Synthetic 48x48 JPEGs: gradients with a per-image tint and noise."""
    g = torch.Generator().manual_seed(0)
    images = []
    for i in range(count):
        base = torch.linspace(0, 255, SIZE).view(1, SIZE, 1).expand(SIZE, SIZE, 3)
        tint = torch.randint(0, 128, (1, 1, 3), generator=g)
        noise = torch.randint(0, 32, (SIZE, SIZE, 3), generator=g)
        pixels = ((base + tint + noise) % 256).to(torch.uint8).numpy()
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
        images.append((buf.getvalue(), i % 1000))
    return images


def augment_pixels(pixels, budget):
    """Pure-Python colour jitter over the pixel list, repeated for `budget`
    seconds (at least one pass)."""
    deadline = time.monotonic() + budget
    out = list(pixels)
    gain = 3
    while True:
        for i in range(len(out)):
            out[i] = (out[i] * gain + 7) % 256
        gain = gain % 5 + 2
        if time.monotonic() >= deadline:
            return bytes(out)


class JpegDataset(Dataset):
    """Decodes a JPEG and augments it; `slow_read` seconds of sleep first
    stand for slow storage."""

    def __init__(self, jpegs, augment_secs, slow_read_secs, length):
        self.jpegs = jpegs
        self.augment_secs = augment_secs
        self.slow_read_secs = slow_read_secs
        self.length = length

    def __len__(self):
        return self.length

    def read_image(self, index):
        if self.slow_read_secs > 0:
            time.sleep(self.slow_read_secs)
        return self.jpegs[index % len(self.jpegs)]

    def __getitem__(self, index):
        data, label = self.read_image(index)
        image = Image.open(io.BytesIO(data)).convert("RGB")
        pixels = augment_pixels(image.tobytes(), self.augment_secs)
        tensor = torch.frombuffer(bytearray(pixels), dtype=torch.uint8)
        return tensor.view(SIZE, SIZE, 3).permute(2, 0, 1), label


def train_step(model, optimizer, images, labels, repeats):
    """`repeats` forward/backward/SGD passes over one batch; the loss read
    at the end waits for the GPU."""
    loss = None
    for _ in range(repeats):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    return loss.item()


def to_device(images, labels, device):
    images = images.to(device, non_blocking=True).float().div_(255.0)
    images = F.interpolate(images, size=(224, 224), mode="bilinear", align_corners=False)
    return images.contiguous(memory_format=torch.channels_last), labels.to(device)


def calibrate(model, optimizer, device, batch, target_ms):
    """Repeats that make a step last about target_ms (warm-up first)."""
    images = torch.rand(batch, 3, 224, 224, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    for _ in range(3):
        train_step(model, optimizer, images, labels, 1)
    start = time.perf_counter()
    train_step(model, optimizer, images, labels, 2)
    one = (time.perf_counter() - start) / 2.0
    return max(1, round(target_ms / 1000.0 / one)), one


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--slow-read-ms", type=float, default=0.0)
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--ready")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--augment-ms", type=float, default=60.0)
    p.add_argument("--gpu-step-ms", type=float, default=400.0)
    p.add_argument("--repeats", type=int, help="default: calibrated to --gpu-step-ms")
    p.add_argument("--images", type=int, default=512)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None)
    model = model.to(device, memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.repeats:
        repeats, one = args.repeats, float("nan")
    elif cuda:
        repeats, one = calibrate(model, optimizer, device, args.batch, args.gpu_step_ms)
    else:
        repeats, one = 1, float("nan")
    print(
        "dataloader_train: pid %d, %s, workers %d, slow read %g ms, augment %g ms, "
        "one step %.1f ms, %d repeats a batch"
        % (os.getpid(), device, args.workers, args.slow_read_ms, args.augment_ms,
           one * 1000.0, repeats),
        flush=True,
    )

    dataset = JpegDataset(
        make_jpegs(args.images), args.augment_ms / 1000.0, args.slow_read_ms / 1000.0, 1 << 30
    )
    loader = DataLoader(
        dataset,
        batch_size=args.batch,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        pin_memory=cuda,
    )
    start = time.monotonic()
    deadline = start + args.seconds
    steps = 0
    loss = 0.0
    last_report = start
    for images, labels in loader:
        images, labels = to_device(images, labels, device)
        loss = train_step(model, optimizer, images, labels, repeats)
        steps += 1
        if steps == 1 and args.ready:
            tmp = "%s.tmp" % args.ready
            with open(tmp, "w") as f:
                f.write("%d\n" % os.getpid())
            os.replace(tmp, args.ready)
        now = time.monotonic()
        if now - last_report >= 5.0:
            print("dataloader_train: %d steps in %.1f s, loss %.3f"
                  % (steps, now - start, loss), flush=True)
            last_report = now
        if now >= deadline:
            break
    print("dataloader_train: done, %d steps in %.1f s, loss %.3f"
          % (steps, time.monotonic() - start, loss), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
