#!/usr/bin/python3
"""Independent reference for the `dense` family (trainer/families/dense/README.md).

Written from docs/model.md, not from the trainer's code: a decoder whose every layer is
the hybrid family's gated full-attention block (section 1.2: zero-centred RMSNorm, q (with
its output gate) / k / v projections with LoRA, q/k RMSNorm, partial NeoX RoPE, GQA causal
softmax, sigmoid output gate, o projection; then zero-centred RMSNorm and the SwiGLU MLP),
no Gated DeltaNet layer. The token-by-token attention step, the MLP, the weights reader and
the GRPO loss of section 4 are tests/reference/hybrid_ref.py's (itself Python written from
docs/model.md, sharing nothing with the C code); this file builds the model of attention
layers only and reads the dense config keys. Standard library only.

usage:
  dense_ref.py WEIGHTS.safetensors BATCH.json --json OUT.json
      WEIGHTS from `longstraw-train --save-init`, BATCH from `--dump-batch` (a dense
      config). Writes, for longstraw-parity to compare, {"policy": [[...]],
      "ref_policy": [[...]], "advantages": [...], "loss": X, "decisions": {"count": 0,
      "kinds": {}}}: the log-probs of every response token under (a) the policy (base
      weights + (alpha/r) B A on every LoRA target in the file) and (b) the reference
      policy (adapters off in train_mode lora; the step-0 weights, i.e. (a), in full),
      the advantages of the batch's rewards and the loss of docs/model.md section 4
      from (a) and the batch's old_logprobs and ref_logprobs.

exit: 0 written, 1 a mismatch (a missing tensor, a wrong shape, an inconsistent batch),
2 bad usage.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "reference"))
import hybrid_ref as H  # noqa: E402  (the shared math, written from docs/model.md)

CONFIG_KEYS = ("family", "vocab", "d_model", "n_layers", "ffn_dim", "rms_eps", "rope_theta",
               "attn_heads", "attn_kv_heads", "head_dim", "rope_dim", "train_mode", "lora_r",
               "lora_alpha", "lora_experts", "grad_mode", "epsilon", "beta", "temperature")
GDN_KEYS = ("gdn_hk", "gdn_hv", "gdn_dk", "gdn_dv", "conv_kernel")


class DenseModel(H.Model):
    """hybrid_ref.Model with every layer an attention layer: its step, attn_step, rope,
    new_state/copy_state (KV lists only) and group_logprobs are the hybrid reference's."""

    def __init__(self, cfg, tensors, with_lora):
        self.cfg = cfg
        self.V, self.d, self.L, self.I = cfg["vocab"], cfg["d_model"], cfg["n_layers"], cfg["ffn_dim"]
        self.eps = float(cfg["rms_eps"])
        self.theta = float(cfg["rope_theta"])
        self.H, self.Hkv = cfg["attn_heads"], cfg["attn_kv_heads"]
        self.hd, self.dr = cfg["head_dim"], cfg["rope_dim"]
        if self.H % self.Hkv or self.dr % 2 or self.dr > self.hd:
            raise H.Mismatch("config: inconsistent head dims %r" % cfg)
        r = cfg.get("lora_r")
        self.t = tensors
        self.with_lora = with_lora
        self.scale = (float(cfg.get("lora_alpha")) / float(r)) if (with_lora and r) else 0.0
        self.lora_r = r
        stray = sorted(n for n in tensors if ".gdn." in n)
        if stray:
            raise H.Mismatch("weights: %s: a GDN tensor in a dense model (every layer is attention)" % stray[0])
        d, I, Hh, Hkv, hd = self.d, self.I, self.H, self.Hkv, self.hd
        self.embed = H.rows(*self.need("embed.weight", [self.V, d]))
        self.lm_head = self.linear("lm_head", [self.V, d], lora_ok=False)
        self.final_g = self.gamma0("norm.weight", d)
        self.layers = []
        for i in range(self.L):
            p = "layers.%d." % i
            self.layers.append({
                "attn": True,
                "g1": self.gamma0(p + "norm1.weight", d),
                "g2": self.gamma0(p + "norm2.weight", d),
                "q": self.linear(p + "attn.q", [Hh * 2 * hd, d]),
                "k": self.linear(p + "attn.k", [Hkv * hd, d]),
                "v": self.linear(p + "attn.v", [Hkv * hd, d]),
                "o": self.linear(p + "attn.o", [d, Hh * hd]),
                "qn": self.gamma0(p + "attn.q_norm.weight", hd),
                "kn": self.gamma0(p + "attn.k_norm.weight", hd),
                "gate": self.linear(p + "mlp.gate", [I, d]),
                "up": self.linear(p + "mlp.up", [I, d]),
                "down": self.linear(p + "mlp.down", [d, I])})
        expected = 3 + 11 * self.L  # docs/model.md section 5, attention layers only (weights)
        base = [n for n in tensors if not n.endswith((".lora_A", ".lora_B"))]
        if len(base) != expected:
            raise H.Mismatch("weights: %d base tensors, a dense model of %d layers has %d"
                             % (len(base), self.L, expected))


def load_batch(path):
    try:
        with open(path) as f:
            batch = json.load(f)
    except (OSError, ValueError) as e:
        raise H.Mismatch("cannot read batch %s: %s" % (path, e))
    if not isinstance(batch, dict):
        raise H.Mismatch("batch %s: not a JSON object" % path)
    for key in H.BATCH_KEYS:
        if key not in batch:
            raise H.Mismatch("batch %s: key %r (docs/model.md section 6) missing" % (path, key))
    cfg = batch["config"]
    if cfg.get("family") != "dense":
        raise H.Usage("this reference covers family dense only, batch has %r" % cfg.get("family"))
    for key in CONFIG_KEYS:
        if key not in cfg:
            raise H.Mismatch("batch %s config: key %r missing" % (path, key))
    for key in GDN_KEYS:
        if key in cfg:
            raise H.Mismatch("batch %s config: key %r belongs to the hybrid family" % (path, key))
    G = len(batch["responses"])
    if G == 0 or any(len(batch[k]) != G for k in ("rewards", "old_logprobs", "ref_logprobs")):
        raise H.Mismatch("batch %s: %d responses but rewards/old/ref sized otherwise" % (path, G))
    for i, y in enumerate(batch["responses"]):
        if not y or len(batch["old_logprobs"][i]) != len(y) or len(batch["ref_logprobs"][i]) != len(y):
            raise H.Mismatch("batch %s: member %d: tokens and log-probs differ in length" % (path, i))
    for tok in list(batch["prompt"]) + [t for y in batch["responses"] for t in y]:
        if not (isinstance(tok, int) and 0 <= tok < cfg["vocab"]):
            raise H.Mismatch("batch %s: token %r outside the vocabulary" % (path, tok))
    if not batch["prompt"]:
        raise H.Mismatch("batch %s: empty prompt" % path)
    return batch


def write_json(weights_path, batch_path, out_path):
    batch = load_batch(batch_path)
    tensors, dtype = H.read_safetensors(weights_path)
    cfg = batch["config"]
    temp = float(cfg["temperature"])
    prompt, responses = list(batch["prompt"]), [list(y) for y in batch["responses"]]
    policy = DenseModel(cfg, tensors, True).group_logprobs(prompt, responses, temp)
    lora = any(n.endswith(".lora_A") for n in tensors)
    if cfg["train_mode"] == "lora" and lora:
        ref = DenseModel(cfg, tensors, False).group_logprobs(prompt, responses, temp)
    else:  # train_mode full: the reference is the step-0 weights, i.e. the policy at step 1
        ref = policy
    adv = H.advantages([float(r) for r in batch["rewards"]])
    loss, _ = H.grpo_loss(policy, batch["old_logprobs"], batch["ref_logprobs"], adv,
                          float(cfg["epsilon"]), float(cfg["beta"]))
    # no discrete decision in this family (no top-k, no routing)
    doc = {"policy": policy, "ref_policy": ref, "advantages": adv, "loss": loss,
           "decisions": {"count": 0, "kinds": {}}}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, out_path)
    print("dense_ref: %s (%s, %d tensors), P=%d G=%d -> %s" % (weights_path, dtype, len(tensors), len(prompt),
                                                               len(responses), out_path))


def main(argv):
    args = argv[1:]
    try:
        if args and args[0] in ("-h", "--help"):
            print(__doc__)
            return 0
        if len(args) != 4 or args[2] != "--json":
            raise H.Usage("expected WEIGHTS.safetensors BATCH.json --json OUT.json")
        write_json(args[0], args[1], args[3])
        return 0
    except H.Usage as e:
        sys.stderr.write("dense_ref: usage error: %s\n%s" % (e, __doc__))
        return 2
    except H.Mismatch as e:
        sys.stderr.write("dense_ref: FAIL: %s\n" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
