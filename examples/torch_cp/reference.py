"""Independent reference for the torch_cp example: float64, one process, whole sequences.

The same math as the trainer written again plainly, sharing no code with it (not model.py, not
cp_step.py, not even its safetensors module): for each member the full sequence prompt + response
runs token by token through the recurrence and through plain masked softmax attention, and autograd
takes the gradient of the GRPO loss over everything. No prompt state, no CP, no merge.

    python3 reference.py --weights W.safetensors --batch batch.json --out DIR
writes DIR/logprobs.safetensors, DIR/grads.safetensors, DIR/loss.json.
"""
import argparse
import json
import math
import os
import struct
import sys

import torch

ATTN_HEADS = 2      # attention heads and head size are not recoverable from the shapes alone
RMS_EPS = 1e-6


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n].decode())
    body = blob[8 + n:]
    out = {}
    for name, meta in head.items():
        if name == "__metadata__":
            continue
        fmt = {"F64": ("d", torch.float64, 8), "F32": ("f", torch.float32, 4)}[meta["dtype"]]
        a, b = meta["data_offsets"]
        vals = struct.unpack("<%d%s" % ((b - a) // fmt[2], fmt[0]), body[a:b])
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(meta["shape"])
    return out


def write_safetensors(path, tensors):
    header, data = {}, b""
    for name in sorted(tensors):
        vals = tensors[name].detach().to(torch.float64).reshape(-1).tolist()
        chunk = struct.pack("<%dd" % len(vals), *vals)
        header[name] = {"dtype": "F64", "shape": list(tensors[name].shape),
                        "data_offsets": [len(data), len(data) + len(chunk)]}
        data += chunk
    hj = json.dumps(header).encode()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + data)
    os.replace(tmp, path)


def norm(x, w):
    return w * x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + RMS_EPS)


def recurrent_mixer(x, W, p):
    """Token-by-token gated delta rule over the WHOLE sequence x [T, d], from a zero state."""
    H = W[p + "A_log"].shape[0]
    dk = W[p + "in_qkv.weight"].shape[0] // (3 * H)
    outs = []
    S = [torch.zeros(dk, dk, dtype=x.dtype) for _ in range(H)]
    for t in range(x.shape[0]):
        m = W[p + "in_qkv.weight"] @ x[t]
        m = m * torch.sigmoid(m)
        braw = W[p + "in_b.weight"] @ x[t]
        araw = W[p + "in_a.weight"] @ x[t]
        o_heads = []
        for j in range(H):
            q = m[j * dk:(j + 1) * dk]
            k = m[H * dk + j * dk:H * dk + (j + 1) * dk]
            v = m[2 * H * dk + j * dk:2 * H * dk + (j + 1) * dk]
            q = q / torch.sqrt(q.dot(q) + 1e-6) / math.sqrt(dk)
            k = k / torch.sqrt(k.dot(k) + 1e-6)
            beta = 1.0 / (1.0 + torch.exp(-braw[j]))
            decay = torch.exp(-torch.exp(W[p + "A_log"][j]) * torch.log1p(torch.exp(araw[j] + W[p + "dt_bias"][j])))
            Sd = decay * S[j]
            delta = beta * (v - Sd.t() @ k)
            S[j] = Sd + torch.outer(k, delta)
            o_heads.append(S[j].t() @ q)
        outs.append(W[p + "out.weight"] @ torch.cat(o_heads))
    return torch.stack(outs)


def attention_mixer(x, W, p):
    """Plain causal softmax attention over the whole sequence x [T, d]."""
    T = x.shape[0]
    hd = W[p + "q.weight"].shape[0] // ATTN_HEADS
    Q, K, V = (x @ W[p + n + ".weight"].t() for n in ("q", "k", "v"))
    mask = torch.tril(torch.ones(T, T)) > 0
    heads = []
    for j in range(ATTN_HEADS):
        sl = slice(j * hd, (j + 1) * hd)
        s = (Q[:, sl] @ K[:, sl].t()) / math.sqrt(hd)
        s = torch.where(mask, s, torch.tensor(float("-inf"), dtype=x.dtype))
        heads.append(torch.softmax(s, dim=1) @ V[:, sl])
    return torch.cat(heads, dim=1) @ W[p + "o.weight"].t()


def sequence_logprobs(W, prompt, response, temperature=1.0):
    """log p(response[t] | prompt, response[:t]) for every t, from the whole sequence."""
    seq = prompt + response[:-1]
    h = W["embed.weight"][torch.tensor(seq)]
    i = 0
    while f"layers.{i}.norm1.weight" in W:
        x = norm(h, W[f"layers.{i}.norm1.weight"])
        if f"layers.{i}.gdn.A_log" in W:
            h = h + recurrent_mixer(x, W, f"layers.{i}.gdn.")
        else:
            h = h + attention_mixer(x, W, f"layers.{i}.attn.")
        i += 1
    logits = norm(h, W["norm.weight"]) @ W["lm_head.weight"].t()
    logits = logits[len(prompt) - 1:] / temperature
    logp = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return torch.stack([logp[t, response[t]] for t in range(len(response))])


def group_advantages(rewards):
    G = len(rewards)
    if G < 2:
        return [0.0] * G
    mu = sum(rewards) / G
    sd = math.sqrt(sum((r - mu) ** 2 for r in rewards) / (G - 1))
    return [(r - mu) / (sd + 1e-4) for r in rewards]


def grpo_loss(W, batch, epsilon=0.2, temperature=1.0, old=None):
    """(loss, [log-probs per member]); OLD: old log-probs per member (default: the batch's, else own)."""
    prompt, responses = batch["prompt"], batch["responses"]
    adv = batch.get("advantages") or group_advantages(batch["rewards"])
    old = old if old is not None else batch.get("old_logprobs")
    G = len(responses)
    total, lps = 0.0, []
    for i, y in enumerate(responses):
        lp = sequence_logprobs(W, prompt, y, temperature)
        lps.append(lp)
        lo = torch.tensor(old[i], dtype=torch.float64) if old is not None else lp.detach()
        ratio = torch.exp(lp - lo)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
        per_token = -torch.min(ratio * adv[i], clipped * adv[i])
        total = total + per_token.sum() / (G * len(y))
    return total, lps


def compute(weights_path, batch, epsilon=0.2, temperature=1.0):
    """(logprobs [sum R], grads {name: tensor}, loss) at the weights in WEIGHTS_PATH."""
    W = {n: t.clone().requires_grad_(True) for n, t in read_safetensors(weights_path).items()}
    loss, lps = grpo_loss(W, batch, epsilon, temperature)
    loss.backward()
    grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in W.items()}
    return torch.cat([lp.detach() for lp in lps]), grads, float(loss)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epsilon", type=float, default=0.2)
    ap.add_argument("--temperature", type=float, default=1.0)
    a = ap.parse_args(argv)
    with open(a.batch) as f:
        batch = json.load(f)
    lp, grads, loss = compute(a.weights, batch, a.epsilon, a.temperature)
    os.makedirs(a.out, exist_ok=True)
    members, k = {}, 0
    for i, y in enumerate(batch["responses"]):
        members[f"member.{i}"] = lp[k:k + len(y)]
        k += len(y)
    write_safetensors(os.path.join(a.out, "logprobs.safetensors"), members)
    write_safetensors(os.path.join(a.out, "grads.safetensors"), grads)
    with open(os.path.join(a.out, "loss.json.tmp"), "w") as f:
        json.dump({"loss": loss}, f)
    os.replace(os.path.join(a.out, "loss.json.tmp"), os.path.join(a.out, "loss.json"))


if __name__ == "__main__":
    main(sys.argv[1:])
