"""torch_cp: a small PyTorch context-parallel GRPO trainer (CPU, gloo, 1-4 processes).

    python3 train.py --mode init --seed 1 --out DIR            DIR/weights.safetensors, DIR/batch.json
    python3 train.py --mode run --cp 2 --weights W --batch B --out DIR [--grad-mode full|detached]
                     [--dtype f64|f32] [--fault NAME] [--optimizer adamw|sgd] [--no-evidence]
    python3 train.py --mode reference --weights W --batch B --out DIR
    python3 train.py --mode loss --cp 2 --weights LIST.txt --batch B --out DIR

`--cp N` starts N processes itself (torch.multiprocessing, a FileStore rendezvous); under mpirun
(OMPI_COMM_WORLD_SIZE set) the ranks are mpirun's and --cp must equal their number.
See README.md for the transaction, the outputs and the fault table.
"""
import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch                      # noqa: E402
import torch.distributed as dist  # noqa: E402

import cp_step                    # noqa: E402
import evidence                   # noqa: E402
import model as M                 # noqa: E402
import safetensors_io as st       # noqa: E402

PROFILE = os.path.normpath(os.path.join(HERE, "..", "..", "profiles", "torch-cp.json"))


class UsageError(Exception):
    pass


# ------------------------------------------------------------------ batches
def reward_of(response, vocab=M.CONFIG["vocab"]):
    """The fixed reward: the fraction of tokens in the lower half of the vocabulary."""
    return sum(1 for t in response if t < vocab // 2) / len(response)


def default_batch(seed, P=13, G=4, R=5, vocab=M.CONFIG["vocab"]):
    g = torch.Generator().manual_seed(seed + 1000)
    prompt = torch.randint(0, vocab, (P,), generator=g).tolist()
    responses = [torch.randint(0, vocab, (R + (i % 2),), generator=g).tolist() for i in range(G)]
    return {"prompt": prompt, "responses": responses, "rewards": [reward_of(y) for y in responses]}


def init_batch(seed, W):
    """default_batch with old log-probs: the policy's own, moved by up to +-0.3 per token, so that
    the ratios differ from 1 and some are clipped (the loss is then not trivially 0)."""
    b = default_batch(seed)
    job = {"mode": "loss", "cp": 1, "dtype": "f64", "grad_mode": "detached", "faults": [], "batch": b,
           "epsilon": 0.2, "temperature": 1.0, "seed": seed, "group": len(b["responses"]),
           "response_len": 1, "optimizer": "sgd", "lr": 0.0, "weights": W}
    with tempfile.TemporaryDirectory(prefix="torch_cp-init-") as tmp:
        lp = launch(1, [job], tmp)[0]["logprobs"].tolist()
    g = torch.Generator().manual_seed(seed + 2000)
    old, k = [], 0
    for y in b["responses"]:
        noise = (0.6 * torch.rand(len(y), generator=g, dtype=torch.float64) - 0.3).tolist()
        old.append([lp[k + t] + noise[t] for t in range(len(y))])
        k += len(y)
    b["old_logprobs"] = old
    return b


MAX_PROMPT, MAX_GROUP, MAX_RESPONSE = 4096, 64, 1024      # an example's sizes, not a model's
MAX_BATCH_BYTES = 16 << 20


def check_batch(batch, path, vocab=M.CONFIG["vocab"]):
    def bad(field, why):
        raise UsageError(f"--batch {path}: {field}: {why}")

    def ids(x):
        return all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in x)
    if not isinstance(batch, dict):
        bad("(top level)", "not an object")
    p = batch.get("prompt")
    if not isinstance(p, list) or not 2 <= len(p) <= MAX_PROMPT or not ids(p):
        bad("prompt", f"needs 2 to {MAX_PROMPT} token ids in [0, {vocab})")
    rs = batch.get("responses")
    if rs is None:
        return
    if not isinstance(rs, list) or not 1 <= len(rs) <= MAX_GROUP:
        bad("responses", f"needs 1 to {MAX_GROUP} responses")
    for i, y in enumerate(rs):
        if not isinstance(y, list) or not 1 <= len(y) <= MAX_RESPONSE or not ids(y):
            bad(f"responses[{i}]", f"needs 1 to {MAX_RESPONSE} token ids in [0, {vocab})")
    def finite(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    rw = batch.get("rewards")
    if not isinstance(rw, list) or len(rw) != len(rs) or not all(finite(x) for x in rw):
        bad("rewards", "needs one finite number per response")
    for key in ("old_logprobs", "advantages"):
        v = batch.get(key)
        if v is None:
            continue
        if key == "advantages":
            ok = isinstance(v, list) and len(v) == len(rs) and all(finite(x) for x in v)
        else:
            ok = (isinstance(v, list) and len(v) == len(rs)
                  and all(isinstance(o, list) and len(o) == len(y) and all(finite(x) for x in o)
                          for o, y in zip(v, rs)))
        if not ok:
            bad(key, "needs one finite number per response" if key == "advantages"
                else "needs one list per response, one finite number per token")


# ------------------------------------------------------------------ one job on one rank
def run_job(comm, job):
    """One GRPO step (or the loss only). Returns the results on every rank (rank 0's are written)."""
    dtype = evidence.torch_dtype(job["dtype"])
    batch = job["batch"]
    writer, le = None, None
    if job.get("run_dir"):
        le = evidence.import_emitter()
        if le is None:
            raise UsageError("longstraw_emit not found (PYTHONPATH or python/ of the repository); "
                             "use --no-evidence to run without a run directory")
        dp = comm.dp
        grank, gworld = (comm.ranks[comm.rank], comm.world * dp.size) if dp else (comm.rank, comm.world)
        cp_name, dp_name = evidence.group_names(comm)
        writer = evidence.open_writer(le, job["run_dir"], grank, gworld, run_config(job), PROFILE,
                                      cp_ranks=comm.ranks, dp_ranks=dp.comm.ranks if dp else None,
                                      names=(cp_name, dp_name))
        groups = {cp_name: comm.group, "world": None} if dp else {"cp": None}
        if dp:
            groups[dp_name] = dp.comm.group
        comm.inst = le.instrument(writer, groups=groups)   # every torch.distributed call, traced
        comm.declare = le.Collectives(writer, group=cp_name, process_group=comm.group)  # note(): not performed
        if dp:
            dp.comm.inst = comm.inst
    ev = evidence.Evidence(writer)
    W = {n: t.to(dtype).clone().requires_grad_(True) for n, t in job["weights"].items()}
    names = list(W)
    dp = comm.dp if comm.dp is not None and job["mode"] == "run" else None
    if dp is not None:          # DDP around the CP model: W's tensors become the Policy's parameters
        W = {n: torch.nn.Parameter(t.detach()) for n, t in W.items()}
        dp.ddp = torch.nn.parallel.DistributedDataParallel(Policy(W), process_group=dp.comm.group,
                                                           broadcast_buffers=False)
    step = cp_step.Step(W, comm, ev, grad_mode=job["grad_mode"], faults=list(job["faults"]) + hidden_bugs(),
                        epsilon=job["epsilon"], temperature=job["temperature"], dp=dp)
    step.capture(batch["prompt"])
    responses = batch.get("responses")
    sampled = responses is None
    if sampled:
        responses = step.rollout(job["group"], job["response_len"], job["seed"])
        rewards = [reward_of(y) for y in responses]
    else:
        with ev.phase("rollout"):           # the responses come from the batch: nothing sampled
            rewards = batch["rewards"]
    adv = batch.get("advantages") or cp_step.advantages_of(rewards)
    scored = step.score(responses)          # the policy's own log-probs, before any backward
    if batch.get("old_logprobs") is not None:
        old = [torch.tensor(o, dtype=dtype) for o in batch["old_logprobs"]]
    elif job.get("old") is not None:
        old = [o.to(dtype) for o in job["old"]]
    elif sampled and "stale-old-offset" in step.faults:
        old = step.sampler_logprobs         # bug: the sampler's log-probs, read one position early
    else:
        old = scored
    if writer is not None:                  # the run's path (config "paths"): what selected the code
        record_path(writer, sampled, batch.get("old_logprobs") is not None, len(batch["prompt"]) - 1, comm.world)
    lps, loss = step.replay(responses, adv, old)
    if step.dp is not None:      # this replica replayed its members only: the policy's log-probs, all of them
        lps = scored
    out = {"logprobs": torch.cat(lps), "loss": loss, "responses": responses, "rewards": rewards,
           "old": old}
    if job["mode"] == "loss":
        return out
    replicated = {n: (W[n].grad.clone() if W[n].grad is not None else torch.zeros_like(W[n])) for n in names}
    for n in names:
        W[n].grad = None
    if job["grad_mode"] == "full":
        step.prompt_bwd()
    grads, disagree = step.finalize(replicated, names)
    probe = None
    if job.get("probe_every", 0) > 0:      # the example runs one step, step 0: probed for every K
        probe = gradient_probe(le or evidence.import_emitter(), writer, comm, job, W, names, grads,
                               responses, adv, old, step.faults)
    with ev.phase("optimizer"):
        params = {n: W[n].detach().clone() for n in names}
        for n in names:
            params[n].grad = grads[n].clone()
        opt = (torch.optim.SGD(list(params.values()), lr=job["lr"]) if job["optimizer"] == "sgd" else
               torch.optim.AdamW(list(params.values()), lr=job["lr"], betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=0.0))
        opt.step()
        gnorm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))
        ev.optimizer_step(n_params=sum(p.numel() for p in params.values()), lr=job["lr"], grad_norm=gnorm)
    ev.param_digests([(n, params[n]) for n in names])
    ev.step_metrics("grpo", loss=loss, reward_mean=sum(rewards) / len(rewards), grad_norm=gnorm,
                    grad_digest_disagreements=disagree)
    if disagree and comm.rank == 0:
        print(f"torch_cp: warning: {disagree} rank(s) finalized a gradient that differs from rank 0's",
              file=sys.stderr)
    out.update(grads=grads, params={n: p.detach() for n, p in params.items()}, disagree=disagree, probe=probe)
    if writer is not None:
        writer.close(status="complete", steps=1, steps_exact=1, grad_digest_disagreements=1 if disagree else 0)
        comm.inst = comm.declare = None      # close() removed the instrumentation
        if comm.dp is not None:
            comm.dp.comm.inst = None
        dist.barrier()
        if dist.get_rank() == 0:     # the world's rank 0: under --dp every replica has a CP rank 0
            le.write_manifest(job["run_dir"])
    return out


def record_path(writer, sampled, old_given, T, N):
    """Every decision of the run's path (profiles/torch-cp.json "paths"; docs/contract.md section 2):
    the three the example takes (responses sampled or given, old log-probs computed or given, the shards
    of its T captured positions over N ranks) and those it never varies: no reference policy (beta 0),
    one prompt group a step, a fresh prompt state, a fresh start, no page or capture-chunk grid (nothing
    a shard boundary can cut: aligned), no built-in task, and autograd's whole graph kept through the
    backward (replay taped), the prompt state in device memory (state_tier device)."""
    writer.path("responses", "sampled" if sampled else "given")
    writer.path("old_logprobs", "given" if old_given else "computed")
    writer.path("shards", shards_path(T, N))
    for key, value in (("reference", "none"), ("prompt_groups", "one"), ("prefix", "fresh"), ("start", "fresh"),
                       ("pages", "aligned"), ("chunks", "aligned"), ("task", "none"), ("replay", "taped"),
                       ("state_tier", "device")):
        writer.path(key, value)


def shards_path(T, N):
    """The run's "shards" path value: one rank, shards of equal size, or not (T captured positions)."""
    return "one" if N == 1 else "even" if T % N == 0 else "uneven"


def gradient_probe(le, writer, comm, job, W, names, grads, responses, adv, old, faults):
    """le.gradient_probe on this step: the finalized gradient against finite differences of the step's
    own loss (capture and replay without backward, the batch held fixed: the responses, the old
    log-probs, the advantages), one direction per layer group, on every rank. The probe's forwards
    are not the step's: they run on a plain Comm and write no events (only the gradient_probe event)."""
    quiet = evidence.Comm(comm.rank, comm.world, group=comm.group, ranks=comm.ranks)
    dtype = evidence.torch_dtype(job["dtype"])
    old = [o.detach().to(dtype) for o in old]

    def loss_fn():
        s = cp_step.Step(W, quiet, evidence.Evidence(None), grad_mode="full", faults=faults,
                         epsilon=job["epsilon"], temperature=job["temperature"])
        s.capture(job["batch"]["prompt"])
        _, loss = s.replay(responses, adv, old, backward=False)
        return loss, s.loss_scale
    if le is None:
        raise UsageError("--probe-every needs longstraw_emit (PYTHONPATH or python/ of the repository)")
    step = 0
    return le.gradient_probe(writer, step, loss_fn, [(n, W[n]) for n in names], grads, grad_mode=job["grad_mode"],
                             objective="grpo", seed=(job["seed"] * 1000003 + step) % (1 << 53), groups="layer")


def hidden_bugs():
    """TORCH_CP_BUG=FAULT[,FAULT]: faults that act but are not declared in the run's configuration,
    as a bug in the code would (the fault table of README.md audits such builds). The variable is in
    the build identity (evidence.build_artifacts): a buggy build never shares the clean one's digest."""
    bugs = [f for f in os.environ.get("TORCH_CP_BUG", "").split(",") if f and f != "none"]
    for f in bugs:
        if f not in cp_step.FLAGS:
            raise UsageError(f"TORCH_CP_BUG: unknown fault '{f}' (one of {', '.join(cp_step.FLAGS)})")
    return bugs


def run_config(job):
    return {"objective": "grpo", "grad_mode": job["grad_mode"], "dtype": job["dtype"],
            "cp_ranks": job["cp"], "group": len(job["batch"].get("responses") or [0] * job["group"]),
            "steps_requested": 1, "strategy": "longstraw", "faults": list(job["faults"]),
            "n_layers": len(M.CONFIG["layers"]), "epsilon": job["epsilon"], "beta": 0.0,
            "temperature": job["temperature"], "train_mode": "full",
            "model": dict(M.CONFIG),
            "options": {"seed": job["seed"], "optimizer": job["optimizer"], "probe_every": job.get("probe_every", 0)},
            "run_id": job.get("run_id", "run-torch-cp")} | ({"dp_ranks": job["dp"]} if job.get("dp", 1) > 1 else {})


def worker(rank, world, store, jobs, results_dir):
    """Entry of every rank: join the gloo group, run JOBS in order, rank 0 saves each result."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
    try:
        ids = [j.get("run_id") for j in jobs]
        dist.broadcast_object_list(ids, 0)   # one run id per job on every rank (mpirun: rank 0's)
        jobs = [dict(j, run_id=i) if i else j for j, i in zip(jobs, ids)]
        comm = make_comm(rank, world, jobs[0].get("dp", 1))
        for k, job in enumerate(jobs):
            res = run_job(comm, job)
            if rank == 0 and results_dir:
                torch.save(res, os.path.join(results_dir, f"job-{k}.pt"))
            if rank == 0 and job.get("out"):
                write_outputs(job, res)
        dist.barrier()
    finally:
        dist.destroy_process_group()


class Policy(torch.nn.Module):
    """The model's tensors as one module, so that DDP can wrap it: its forward runs the closure it is
    handed (one member's branch and loss, CP collectives inside), DDP's reducer averaging the
    gradient of what it returns over the replicas when it is backpropagated."""

    def __init__(self, W):
        super().__init__()
        self.params = torch.nn.ParameterList(list(W.values()))

    def forward(self, member_loss):
        return member_loss()


class DP:
    """This rank's replica (index of size) and the Comm over the ranks of its CP index in every
    replica; ddp is set per job."""

    def __init__(self, index, size, comm):
        self.index, self.size, self.comm, self.ddp = index, size, comm, None


def make_comm(rank, world, D):
    """The CP Comm of global rank RANK of WORLD = D x N processes (replica d = rank // N owns the
    global ranks d*N .. d*N+N-1), with .dp its DP (None for D = 1). Every rank creates every group,
    in one order (torch.distributed's rule)."""
    if D <= 1:
        comm = evidence.Comm(rank, world)
        comm.dp = None
        return comm
    N = world // D
    d, c = divmod(rank, N)
    cp_groups = [dist.new_group(list(range(k * N, (k + 1) * N))) for k in range(D)]
    dp_groups = [dist.new_group(list(range(j, world, N))) for j in range(N)]
    comm = evidence.Comm(c, N, group=cp_groups[d], ranks=range(d * N, (d + 1) * N))
    comm.dp = DP(d, D, evidence.Comm(d, D, group=dp_groups[c], ranks=range(c, world, N)))
    return comm


def launch(world, jobs, results_dir=None):
    """Run JOBS on WORLD processes; with RESULTS_DIR, returns rank 0's results, one per job."""
    if "OMPI_COMM_WORLD_SIZE" in os.environ:
        n = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        if n != world:
            raise UsageError(f"--cp x --dp = {world} processes but mpirun started {n}")
        ns = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_ess_base_jobid") or "job"
        store = "file://" + os.path.join(tempfile.gettempdir(), f"torch_cp-store-{ns}")
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), n, store, jobs, results_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="torch_cp-") as tmp:
            store = "file://" + os.path.join(tmp, "store")
            if world == 1:
                worker(0, 1, store, jobs, results_dir)
            else:
                # fork where the platform has it: the ranks inherit the imported torch (a CP-2 run 4.2 s
                # against spawn's 7.5 s, which imports it again in every rank; the outputs and the build
                # identity the same).  The launcher runs no parallel op before it, and each rank sets one
                # intra-op thread first (worker), so no OpenMP pool crosses the fork.
                import torch.multiprocessing as mp
                method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
                mp.start_processes(worker, args=(world, store, jobs, results_dir), nprocs=world, join=True,
                                   start_method=method)
    if results_dir:
        return [torch.load(os.path.join(results_dir, f"job-{k}.pt")) for k in range(len(jobs))]
    return None


# ------------------------------------------------------------------ outputs
def write_json(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def member_tensors(flat, responses):
    """The log-probs file's tensors: member.0 ... member.G-1, one log-prob per response token."""
    parts = flat.split([len(y) for y in responses])
    return {f"member.{i}": p.contiguous() for i, p in enumerate(parts)}


def write_outputs(job, res):
    out = job["out"]
    if job["mode"] == "loss":
        return
    st.save(os.path.join(out, "logprobs.safetensors"), member_tensors(res["logprobs"], res["responses"]))
    st.save(os.path.join(out, "grads.safetensors"), res["grads"])
    st.save(os.path.join(out, "params.safetensors"), res["params"])
    write_json(os.path.join(out, "loss.json"), {"loss": res["loss"]})
    b = dict(job["batch"], responses=res["responses"], rewards=res["rewards"])
    if b.get("old_logprobs") is None:      # the old log-probs the step used (computed: the trainer's own)
        b["old_logprobs"] = [o.double().tolist() for o in res["old"]]
    write_json(os.path.join(out, "batch.json"), b)


def parse(argv):
    ap = argparse.ArgumentParser(prog="train.py", description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["init", "run", "reference", "loss"], default="run")
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1,
                    help="data-parallel replicas, each a CP group of --cp ranks (DDP around the CP model; "
                         "the group's members split over them: --group a multiple of it)")
    ap.add_argument("--dtype", choices=["f64", "f32"], default="f64")
    ap.add_argument("--grad-mode", choices=["full", "detached"], default="full")
    ap.add_argument("--fault", action="append", default=[],
                    help="a fault flag (repeatable; '' or 'none' = no fault): " + ", ".join(cp_step.FLAGS))
    ap.add_argument("--weights")
    ap.add_argument("--batch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--group", type=int, default=4, help="responses sampled without --batch")
    ap.add_argument("--response-len", type=int, default=5)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--no-evidence", action="store_true", help="write no run directory")
    ap.add_argument("--probe-every", type=int, default=1,
                    help="the gradient probe every K steps (le.gradient_probe: a gradient_probe event; 0: never; "
                         "needs the run directory)")
    ap.add_argument("--prompt-len", type=int, default=13, help="the prompt drawn from --seed without --batch")
    a = ap.parse_args(argv)
    if not 1 <= a.cp <= 4:
        raise UsageError(f"--cp {a.cp}: must be 1 to 4")
    if not 1 <= a.dp <= 4 or a.dp * a.cp > 8:
        raise UsageError(f"--dp {a.dp}: must be 1 to 4, and --dp x --cp at most 8 processes")
    a.weights, a.batch = a.weights or None, a.batch or None   # an adapter's empty placeholder
    a.fault = [f for x in a.fault for f in x.split(",") if f and f != "none"]
    for f in a.fault:
        if f not in cp_step.FLAGS:
            raise UsageError(f"--fault {f}: unknown (one of {', '.join(cp_step.FLAGS)})")
    hidden_bugs()                           # a bad TORCH_CP_BUG is a usage error, before any process starts
    if a.probe_every < 0:
        raise UsageError(f"--probe-every {a.probe_every}: must be 0 (never) or a positive number of steps")
    if not 2 <= a.prompt_len <= MAX_PROMPT:
        raise UsageError(f"--prompt-len {a.prompt_len}: must be 2 to {MAX_PROMPT}")
    if a.group < 1 or a.response_len < 1:
        raise UsageError("--group and --response-len must be at least 1")
    if a.temperature <= 0:
        raise UsageError("--temperature must be positive")
    return a


def load_weights(path, what="--weights"):
    try:
        W = st.load(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"{what} {path}: {e}") from None
    want = M.param_shapes()
    for n, shape in want.items():
        if n not in W:
            raise UsageError(f"{what} {path}: tensor {n} is missing")
        if list(W[n].shape) != shape:
            raise UsageError(f"{what} {path}: tensor {n} has shape {list(W[n].shape)}, expected {shape}")
    extra = sorted(set(W) - set(want))
    if extra:
        raise UsageError(f"{what} {path}: unknown tensor {extra[0]}")
    return {n: W[n].to(torch.float64) for n in want}


def _not_json(name):
    raise ValueError(f"{name} is not JSON")


def load_batch(path):
    if path is None:
        return None
    try:
        if os.path.getsize(path) > MAX_BATCH_BYTES:
            raise UsageError(f"--batch {path}: larger than {MAX_BATCH_BYTES} bytes")
        with open(path) as f:
            b = json.load(f, parse_constant=_not_json)
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"--batch {path}: {e}") from None
    check_batch(b, path)
    return b


def main(argv):
    a = parse(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.mode == "init":
        W = M.init_weights(a.seed)
        st.save(os.path.join(a.out, "weights.safetensors"), W)
        write_json(os.path.join(a.out, "batch.json"), init_batch(a.seed, W))
        return 0
    if a.weights is None:
        raise UsageError(f"--mode {a.mode} needs --weights")
    batch = load_batch(a.batch)
    if a.mode == "reference":
        import reference
        if batch is None or batch.get("responses") is None:
            raise UsageError("--mode reference needs --batch with responses and rewards")
        reference.main(["--weights", a.weights, "--batch", a.batch, "--out", a.out,
                        "--epsilon", str(a.epsilon), "--temperature", str(a.temperature)])
        return 0
    if batch is None:
        batch = {"prompt": default_batch(a.seed, P=a.prompt_len)["prompt"]}
    if len(batch["prompt"]) - 1 < a.cp:
        raise UsageError(f"--batch {a.batch}: prompt: {len(batch['prompt'])} tokens leave "
                         f"{len(batch['prompt']) - 1} captured positions, fewer than --cp {a.cp}")
    G = len(batch["responses"]) if batch.get("responses") is not None else a.group
    if a.mode == "run" and G % a.dp:
        raise UsageError(f"--dp {a.dp}: the group's {G} members do not split evenly over {a.dp} replicas")
    job = {"mode": "run", "cp": a.cp, "dp": a.dp if a.mode == "run" else 1, "dtype": a.dtype,
           "grad_mode": a.grad_mode, "faults": a.fault,
           "batch": batch, "epsilon": a.epsilon, "temperature": a.temperature, "seed": a.seed,
           "group": a.group, "response_len": a.response_len, "optimizer": a.optimizer, "lr": a.lr}
    if a.mode == "loss":
        job["dtype"] = "f64"           # the finite differences are float64's (the protocol's)
        return loss_mode(a, job)
    job.update(weights=load_weights(a.weights), out=a.out,
               run_dir=None if a.no_evidence else os.path.join(a.out, "run"),
               probe_every=0 if a.no_evidence else a.probe_every,
               run_id=f"run-torch-cp-{int(time.time())}-{os.getpid()}")
    t0 = time.time()
    launch(a.cp * a.dp, [job])
    if os.environ.get("OMPI_COMM_WORLD_RANK", "0") == "0":
        print(f"torch_cp: cp={a.cp}{f' dp={a.dp}' if a.dp > 1 else ''} {a.dtype} {a.grad_mode} faults={a.fault or 'none'}: "
              f"{a.out} ({time.time() - t0:.1f} s, {platform.node()})")
    return 0


def loss_mode(a, job):
    """The loss at each weights file listed in --weights (old log-probs: the batch's, else the first file's)."""
    try:
        with open(a.weights) as f:
            paths = [ln.strip() for ln in f if ln.strip()]
    except OSError as e:
        raise UsageError(f"--weights {a.weights}: {e}") from None
    if not paths:
        raise UsageError(f"--weights {a.weights}: lists no weights file")
    if job["batch"].get("responses") is None:
        raise UsageError("--mode loss needs --batch with responses and rewards")
    base = dict(job, mode="loss", weights=load_weights(paths[0], f"--weights {a.weights}: line 1:"))
    with tempfile.TemporaryDirectory(prefix="torch_cp-loss-") as tmp:
        first = launch(a.cp, [base], tmp)[0]
        jobs = [dict(base, weights=load_weights(p, f"--weights {a.weights}: line {i + 1}:"),
                     old=first["old"]) for i, p in enumerate(paths)]
        res = launch(a.cp, jobs, tmp)
    write_json(os.path.join(a.out, "losses.json"), {"losses": [r["loss"] for r in res]})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"train.py: {e}", file=sys.stderr)
        sys.exit(2)
