"""A job stuck in one GPU kernel: after a few normal steps, `evaluate()` launches a
kernel that spins on a single GPU thread for a very long time (torch.cuda._sleep)
and waits for its result (`.item()`), so the GPU reads ~100% utilized with ~1% of
its SMs busy while Python stands still in evaluate. What a rank stuck in an NCCL
collective looks like to NVML, on one GPU.

usage: kernel_hang.py READY_FILE [--seconds S]
  READY_FILE  written (this pid) just before the stuck kernel is launched
"""
import argparse
import os
import sys
import time

import torch


def train_step(x, w):
    return (x @ w).relu().sum()


def evaluate(seconds):
    # About 1.8e9 cycles a second on an H100: one thread spins, the rest of the GPU idles.
    torch.cuda._sleep(int(seconds * 1.8e9))
    return torch.zeros(1, device="cuda").sum().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ready")
    p.add_argument("--seconds", type=float, default=120.0)
    args = p.parse_args()
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        train_step(x, w).item()
    with open(args.ready + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.replace(args.ready + ".tmp", args.ready)
    start = time.monotonic()
    evaluate(args.seconds)
    print("kernel_hang: evaluate returned after %.1f s" % (time.monotonic() - start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
