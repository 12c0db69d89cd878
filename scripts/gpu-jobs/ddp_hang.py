"""A torchrun job (gloo, CPU tensors) where one rank deadlocks: every rank loads
its shard, then joins an all_reduce; rank 1's loader takes a lock it already
holds (refresh_index), so ranks 0 and 2 wait in all_reduce for a peer that never
comes. Run with `torchrun --nproc_per_node 3 ddp_hang.py READY_DIR`; each rank
writes READY_DIR/rank-N (its pid) when it reaches its final place.
"""
import os
import sys
import threading

import torch
import torch.distributed as dist

INDEX_LOCK = threading.Lock()


def refresh_index(rank):
    with INDEX_LOCK:
        if rank == 1:
            refresh_index(rank)  # the lock is not reentrant: this rank never gets past here


def load_shard(rank, ready_dir):
    note_ready(rank, ready_dir)
    refresh_index(rank)
    return torch.ones(1024) * rank


def note_ready(rank, ready_dir):
    path = os.path.join(ready_dir, "rank-%d" % rank)
    with open(path + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.replace(path + ".tmp", path)


def main():
    ready_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    shard = load_shard(rank, ready_dir)
    dist.all_reduce(shard)  # ranks 0 and 2 wait here for rank 1
    print("rank %d: reduced %.1f" % (rank, float(shard[0])), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
