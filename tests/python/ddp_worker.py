"""One rank of test_collectives' DDP run: python3 ddp_worker.py TMP RANK WORLD HOOK(0|1)."""

import json
import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"),
                os.path.dirname(os.path.abspath(__file__))]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import common  # noqa: E402
import longstraw_emit as le  # noqa: E402


def main():
    tmp, rank, world, hook = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, f"store{int(hook)}"), rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    run = "ddp_hook" if hook else "ddp_plain"
    w = common.writer(tmp, rank=rank, world=world, run=run, groups=[le.Group("dp", "dp", list(range(world)))])
    if hook:
        dp = le.Collectives(w, "dp")
        ddp.register_comm_hook(None, dp.ddp_comm_hook("grad_allreduce", step=lambda: 0))
    torch.manual_seed(100 + rank)  # each rank its own data
    x = torch.randn(4, 6, dtype=torch.float64)
    with w.phase("replay", 0):
        ddp(x).pow(2).sum().backward()
    w.close()
    grads = {n: p.grad.flatten().tolist() for n, p in net.named_parameters()}
    with open(os.path.join(tmp, f"{run}-grads-{rank}.json"), "w") as f:
        json.dump(grads, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
