"""What scripts/bench-overhead measures besides the profilers' CPU: the machine's
floor for a sample, and what stackscope's reader did per sample.

floor(pid, rate, seconds): the CPU time per tick of a thread that only wakes at
RATE (a timer wake-up), and of one that wakes and makes one process_vm_readv of
512 bytes from the target's heap (the least a sample can cost), from the
tick_floor example of stackscope-sampler, run on the same target in the same
run as the profilers: a figure is judged against the machine it was taken on.

reader_stats(binary, pid, rate, seconds): stackscope attached with
STACKSCOPE_READER_STATS=1 (which times each system call, so it runs apart from
the timed stretches): the bytes it read per sample, its process_vm_readv calls and
the ranges they read, and its /proc stat reads per sample.
"""
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK_FLOOR = os.path.join(ROOT, "target", "release", "examples", "tick_floor")
FLOOR_BYTES = 512
STATS = re.compile(
    r"(\d+) samples, ([\d.]+) memory reads and ([\d.]+) stat reads per sample "
    r"\((\d+) bytes(?: in ([\d.]+) ranges)?\)"
)


def build_floor():
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "stackscope-sampler",
         "--example", "tick_floor"],
        cwd=ROOT,
        check=True,
    )


def floor(pid, rate, seconds):
    """{"wake": us, "wake_read": us} per tick, or None when tick_floor fails."""
    out = subprocess.run(
        [TICK_FLOOR, str(pid), str(rate), str(seconds), str(FLOOR_BYTES)],
        capture_output=True, text=True, timeout=seconds * 8 + 60,
    )
    found = {}
    for line in out.stdout.splitlines():
        label, _, rest = line.partition(":")
        m = re.search(r"([\d.]+) us CPU per tick", rest)
        if m:
            found[label.strip()] = float(m.group(1))
    if "sleep only" not in found or "sleep + process_vm_readv" not in found:
        return None
    return {"wake": found["sleep only"], "wake_read": found["sleep + process_vm_readv"]}


def reader_stats(binary, pid, rate, seconds):
    """{"bytes": per sample, "reads": process_vm_readv calls per sample, "ranges": the
    iovecs of those calls per sample, "stat_reads": per sample}, or None when the reader printed no statistics (py-spy's reader)."""
    env = dict(os.environ, STACKSCOPE_READER_STATS="1")
    with tempfile.TemporaryDirectory(prefix="bench-stats-") as out:
        run = subprocess.run(
            [binary, "attach", "--pid", str(pid), "--rate", str(rate), "--idle",
             "--gpu", "off", "--duration", str(seconds), "-o", out],
            env=env, capture_output=True, text=True, timeout=seconds * 4 + 60,
        )
    m = STATS.search(run.stdout + run.stderr)
    if not m:
        return None
    return {
        "bytes": float(m.group(4)),
        "reads": float(m.group(2)),
        "stat_reads": float(m.group(3)),
        # A build before the ranges were counted says none.
        "ranges": float(m.group(5)) if m.group(5) else None,
    }
