"""One rank of test_collectives' 2-process gloo run: python3 dist_worker.py TMP RANK WORLD."""

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"),
                os.path.dirname(os.path.abspath(__file__))]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import common  # noqa: E402
import longstraw_emit as le  # noqa: E402


def main():
    tmp, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"), rank=rank,
                            world_size=world)
    w = common.writer(tmp, rank=rank, world=world)
    cp = le.Collectives(w, "cp")
    wd = le.Collectives(w, "world")
    with w.phase("replay", 0):
        t = torch.arange(4, dtype=torch.float64) * (rank + 1)
        cp.all_reduce(t, op="sum", purpose="dkv_sum", layer=1, step=0)
        m = torch.tensor([float(rank), -float(rank)], dtype=torch.float32)
        cp.all_reduce(m, op="max", purpose="lse_max", layer=1, step=0)
        a = torch.full((3,), float(rank + 1), dtype=torch.float64)
        cp.all_reduce(a, op="avg", purpose="grad_finalize", step=0)
        assert torch.allclose(a, torch.full((3,), 1.5, dtype=torch.float64)), a
        b = torch.tensor([rank * 10 + 7], dtype=torch.int64)
        cp.broadcast(b, 1, purpose="seed_sync", step=0)
        assert int(b) == 17
        outs = [torch.zeros(2, dtype=torch.float16) for _ in range(world)]
        cp.all_gather(outs, torch.full((2,), float(rank), dtype=torch.float16), purpose="kv_gather", layer=0)
        if rank == 0:
            cp.send(torch.ones(5), 1, purpose="ring_kv", layer=0)
        else:
            r = torch.zeros(5)
            cp.recv(r, 0, purpose="ring_kv", layer=0)
            assert float(r.sum()) == 5.0
        # a reduction logged but never performed: each rank's buffer is its own
        fake = torch.arange(4, dtype=torch.float64) * (rank + 1)
        cp.note("allreduce", "sum", fake, purpose="dkv_sum", layer=1, step=0)
        # a reduction performed below the API (here: by hand), noted with its output
        real = torch.arange(4, dtype=torch.float64) * (rank + 1)
        dist.all_reduce(real)
        cp.note("allreduce", "sum", real, purpose="out_sum", layer=1, step=0, performed_output=real)
        wd.barrier(purpose="step_end", step=0)
    w.close()
    dist.barrier()
    if rank == 0:
        le.write_manifest(os.path.join(tmp, "run"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
