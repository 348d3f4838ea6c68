"""One rank of test_intercept's 2-process gloo run: python3 intercept_worker.py TMP RANK WORLD MODE.

The trainer code below calls torch.distributed directly, never a wrapper: le.instrument(w) alone
puts every call in the trace. MODE: "all" (every intercepted function, sync and async, point to
point and batched, DDP), "stale" (rank 0 changes its isend buffer before the send completes),
"unmapped" (a call on a process group no header group names)."""

import json
import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"),
                os.path.dirname(os.path.abspath(__file__))]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import common  # noqa: E402
import longstraw_emit as le  # noqa: E402


def every_call(inst, rank, world):
    other = 1 - rank
    with inst.context(purpose="dkv_sum", layer=1):
        t = torch.arange(4, dtype=torch.float64) * (rank + 1)
        dist.all_reduce(t)                                            # 0 sync allreduce
        assert t.tolist() == [0.0, 3.0, 6.0, 9.0]
    m = torch.tensor([float(rank), -float(rank)], dtype=torch.float32)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)                         # 1 purpose: its name
    b = torch.tensor([rank * 10 + 7], dtype=torch.int64)
    dist.broadcast(b, 1)                                             # 2
    outs = [torch.zeros(2, dtype=torch.float16) for _ in range(world)]
    dist.all_gather(outs, torch.full((2,), float(rank), dtype=torch.float16))   # 3
    flat = torch.zeros(2 * world)  # gloo has no all_gather_into_tensor: refused, no event, its gseq reused
    try:
        dist.all_gather_into_tensor(flat, torch.full((2,), float(rank)))
    except RuntimeError:
        pass
    dist.all_gather(list(flat.view(world, 2)), torch.full((2,), float(rank)))   # 4
    # async: issued 5, 6; waited in reverse order: the events are still written 5 then 6
    a1 = torch.ones(3) * (rank + 1)
    a2 = torch.ones(2, dtype=torch.float64) * (rank + 1)
    w1 = dist.all_reduce(a1, async_op=True)
    w2 = dist.all_reduce(a2, async_op=True)
    w2.wait()
    w1.wait()
    assert a1.tolist() == [3.0] * 3
    # a future, never a wait(): settled by the future's completion
    a3 = torch.ones(2) * (rank + 1)
    dist.all_reduce(a3, async_op=True).get_future().wait()          # 7
    dist.barrier()                                                   # 8
    # point to point: blocking, async, tagged, batched; their own channels
    with inst.context(purpose="state_handoff", layer=0):
        if rank == 0:
            dist.send(torch.arange(5, dtype=torch.float32), 1)
            dist.isend(torch.full((3,), 2.5, dtype=torch.float64), 1, tag=7).wait()
        else:
            r = torch.zeros(5)
            dist.recv(r, 0)
            assert r.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
            r2 = torch.zeros(3, dtype=torch.float64)
            dist.irecv(r2, 0, tag=7).wait()
    sbuf = torch.full((4,), float(rank))
    rbuf = torch.zeros(4)
    ops = [dist.P2POp(dist.isend, sbuf, other), dist.P2POp(dist.irecv, rbuf, other)]
    with inst.context(purpose="ring_kv", layer=2):
        for wk in dist.batch_isend_irecv(ops):
            wk.wait()
    assert rbuf.tolist() == [float(other)] * 4
    # an async call never waited on: close() settles it
    dist.all_reduce(torch.ones(2), async_op=True)                    # 9
    # the probe's re-evaluations: performed, not recorded
    with inst.paused():
        dist.all_reduce(torch.ones(1))


def ddp_step(rank):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    torch.manual_seed(100 + rank)
    x = torch.randn(4, 6, dtype=torch.float64)
    ddp(x).pow(2).sum().backward()
    got = {n: p.grad.flatten().tolist() for n, p in net.named_parameters()}
    # DDP's gradient by hand: the mean over the ranks of each rank's own gradient
    want = None
    for r in range(2):
        torch.manual_seed(0)
        ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
        torch.manual_seed(100 + r)
        ref(torch.randn(4, 6, dtype=torch.float64)).pow(2).sum().backward()
        g = {n: p.grad.flatten() / 2 for n, p in ref.named_parameters()}
        want = g if want is None else {n: want[n] + g[n] for n in g}
    return got, {n: v.tolist() for n, v in want.items()}


def main():
    tmp, rank, world, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store-" + mode), rank=rank,
                            world_size=world)
    w = common.writer(tmp, rank=rank, world=world, run="run-" + mode)
    inst = le.instrument(w, groups={"cp": None})
    result = {}
    if mode == "all":
        with w.phase("replay", 0):
            every_call(inst, rank, world)
        with w.phase("finalize", 0):
            result["grads"], result["expected"] = ddp_step(rank)
    elif mode == "stale":
        with w.phase("capture", 0), inst.context(purpose="state_handoff", layer=0):
            if rank == 0:
                s = torch.ones(4)
                wk = dist.isend(s, 1)
                s.mul_(0.5)          # the state's last update lands after the hand-off was issued
                wk.wait()
            else:
                r = torch.zeros(4)
                dist.recv(r, 0)
    elif mode == "unmapped":
        sub = dist.new_group([0])
        with w.phase("capture", 0):
            if rank == 0:
                try:
                    dist.all_reduce(torch.ones(1), group=sub)
                except ValueError as e:
                    result["error"] = str(e)
    w.close()
    with open(os.path.join(tmp, f"{mode}-result-{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    if rank == 0:
        le.write_manifest(os.path.join(tmp, "run-" + mode))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
