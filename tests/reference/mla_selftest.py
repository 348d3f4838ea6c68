#!/usr/bin/python3
"""The self-test of mla_ref.py (`mla_ref.py --self-test`, ctest mla_reference_selftest).

Internal properties of the reference on random weights of configs/mla-tiny.json (whose keys
and docs/model.md section 2.4 values it checks first); the list is in mla_ref.py's usage text.
Every check runs and is counted; any failure makes the self-test exit 1.
"""

import json
import math
import os
import random
import sys
import tempfile
import time

import hybrid_ref as hr
import mla_ref as M

TINY = {"family": "mla", "vocab": 256, "d_model": 64, "n_layers": 4, "ffn_dim": 128, "rms_eps": 1e-6,
        "rope_theta": 10000, "first_dense": 1, "heads": 4, "q_rank": 48, "kv_rank": 32, "d_nope": 16,
        "d_rope": 8, "d_v": 12, "index_heads": 4, "index_dim": 16, "index_topk": 8, "n_experts": 8,
        "n_group": 4, "topk_group": 2, "experts_per_token": 2, "expert_dim": 32, "routed_scale": 2.5}
RUN = {"train_mode": "lora", "lora_r": 4, "lora_alpha": 8, "lora_experts": True, "grad_mode": "full",
       "epsilon": 0.2, "beta": 0.04, "temperature": 1.0}


class Checks:
    def __init__(self):
        self.ran, self.failures, self.t0 = 0, [], time.monotonic()

    def cond(self, name, ok, detail):
        self.ran += 1
        print("mla_ref: check %-44s %s%s" % (name, detail, "" if ok else "  FAIL"), flush=True)
        if not ok:
            self.failures.append("%s: %s" % (name, detail))

    def close(self, name, err, tol, what="max |diff|"):
        self.cond(name, err <= tol, "%s = %.3g (tol %g)" % (what, err, tol))  # NaN fails

    def part(self, name):
        now = time.monotonic()
        print("mla_ref: -- %s (%.1f s so far)" % (name, now - self.t0), flush=True)


def maxdiff(a, b):
    fa, fb = flat(a), flat(b)
    if len(fa) != len(fb) or not fa:
        return float("inf")
    return max(abs(x - y) if x == x and y == y else float("inf") for x, y in zip(fa, fb))


def flat(x):
    if isinstance(x, (list, tuple)):
        return [v for e in x for v in flat(e)]
    return [x]


def selection_ok(sel, scores, k):
    """sel is the top-k of scores under the tie rule, checked as properties (not by sorting):
    size, distinct, ordered by (score desc, index asc), nothing left out that beats or ties
    with a lower index one of the selected."""
    n = len(scores)
    if len(sel) != min(k, n) or len(set(sel)) != len(sel) or any(not 0 <= s < n for s in sel):
        return False
    for a, b in zip(sel, sel[1:]):
        if not (scores[a] > scores[b] or (scores[a] == scores[b] and a < b)):
            return False
    last = sel[-1]
    chosen = set(sel)
    for u in range(n):
        if u not in chosen and (scores[u] > scores[last] or (scores[u] == scores[last] and u < last)):
            return False
    return True


def rng_tokens(rng, n, V):
    return [rng.randrange(V) for _ in range(n)]


def self_test():
    here = os.path.dirname(os.path.abspath(__file__))
    cfg_path = os.path.join(here, "..", "..", "configs", "mla-tiny.json")
    C = Checks()
    C.part("config %s" % os.path.normpath(cfg_path))
    file_cfg = M.read_json(cfg_path, "config")
    C.cond("mla-tiny keys are the section 6 mla keys", sorted(file_cfg) == sorted(M.MODEL_KEYS),
           "%d keys, extra %s, missing %s" % (len(file_cfg), sorted(set(file_cfg) - set(M.MODEL_KEYS)),
                                              sorted(set(M.MODEL_KEYS) - set(file_cfg))))
    bad = [k for k in TINY if file_cfg.get(k) != TINY[k]]
    C.cond("mla-tiny values are the section 2.4 row", not bad, "differing: %s" % bad)
    cfg = dict(TINY, **RUN)
    D = M.dims(cfg)
    K = D["index_topk"]
    tensors = M.random_weights(cfg, 1, lora_r=4, lora_experts=True)
    rng = random.Random(7)
    toks = rng_tokens(rng, 21, D["vocab"])  # 20 positions, top-k active from position 8

    C.part("(0) section 0 primitives against hand values")
    th = 10000.0
    e = [0.0] * 8
    e0, e1 = list(e), list(e)
    e0[0], e1[2] = 1.0, 1.0
    p1 = 10000.0 ** (-2.0 / 8)  # angle of pair i = 1 at position 1
    want = [  # (got, expected)
        (M.rope_interleaved(e0, 1, th), [math.cos(1), math.sin(1)] + [0.0] * 6),
        (M.rope_interleaved(e1, 1, th), [0.0, 0.0, math.cos(p1), math.sin(p1)] + [0.0] * 4),
        (M.rope_neox_prefix(e0 + [5.0], 1, 8, th), [math.cos(1), 0, 0, 0, math.sin(1), 0, 0, 0, 5.0]),
        (M.rope_neox_prefix([0, 0, 0, 0, 0, 1.0, 0, 0], 1, 8, th), [0, -math.sin(p1), 0, 0, 0, math.cos(p1), 0, 0]),
        (M.rmsnorm([3.0, 4.0], [1.0, 2.0], 0.0), [3.0 / math.sqrt(12.5), 8.0 / math.sqrt(12.5)]),
        (M.layernorm([1.0, 3.0], [2.0, 1.0], [0.5, 0.0], 0.0), [-1.5, 1.0]),
        (M.topk([1.0, 3.0, 3.0, 2.0, 3.0], 4), [1, 2, 4, 3]),
        (M.topk([0.0, -0.0, 0.0], 2), [0, 1]),
    ]
    worst = max(maxdiff(g, w) for g, w in want)
    C.close("(0) RoPE (both), RMSNorm, LayerNorm, top-k", worst, 1e-15)

    C.part("(a) absorbed vs naive MLA, T=%d, index_topk %d" % (len(toks) - 1, K))
    t0 = time.monotonic()
    tr_n, tr_a = [], []
    naive = M.Model(cfg, tensors, True)
    lp_n = naive.sequence_logprobs(toks, trace=tr_n)
    lp_a = M.Model(cfg, tensors, True, absorbed=True).sequence_logprobs(toks, trace=tr_a)
    scale = max(abs(v) for r in tr_n for v in r["attn"])
    C.close("(a) attention outputs, every layer and position", maxdiff([r["attn"] for r in tr_n],
                                                                       [r["attn"] for r in tr_a]), 1e-12,
            "max |diff| (outputs up to %.2f)" % scale)
    C.close("(a) log-probs", maxdiff(lp_n, lp_a), 1e-12)
    C.cond("(a) same selections", [r["sel"] for r in tr_n] == [r["sel"] for r in tr_a],
           "%d selections" % len(tr_n))
    print("mla_ref:    (a) %.2f s" % (time.monotonic() - t0))

    C.part("(b) DSA")
    t0 = time.monotonic()
    big = dict(cfg, index_topk=len(toks) + 3)
    tr_b = []
    lp_big = M.Model(big, tensors, True).sequence_logprobs(toks, trace=tr_b)
    tr_d = []
    dense = M.Model(cfg, tensors, True, dense=True)
    lp_dense = dense.sequence_logprobs(toks, trace=tr_d)
    C.close("(b) index_topk >= T equals dense causal: log-probs", maxdiff(lp_big, lp_dense), 1e-12)
    C.close("(b) ... attention outputs", maxdiff([r["attn"] for r in tr_b], [r["attn"] for r in tr_d]), 1e-12)
    C.cond("(b) ... every s <= t selected", all(sorted(r["sel"]) == list(range(r["pos"] + 1)) for r in tr_b),
           "%d selections" % len(tr_b))
    gap = maxdiff(lp_n, lp_dense)
    C.cond("(b) control: top-%d differs from dense" % K, gap > 1e-6, "max |log-prob diff| = %.3g" % gap)
    sizes_ok = all(len(r["sel"]) == min(K, r["pos"] + 1) and all(0 <= s <= r["pos"] for s in r["sel"])
                   for r in tr_n)
    active = sum(1 for r in tr_n if r["pos"] + 1 > K)
    C.cond("(b) |S_t| = min(k_top, t+1), s <= t", sizes_ok and active > 0,
           "%d selections, %d with the top-k active" % (len(tr_n), active))
    C.cond("(b) S_t is the top-k by the tie rule", all(selection_ok(r["sel"], r["scores"], K) for r in tr_n),
           "property check on %d rows" % len(tr_n))
    # attention reads the selected positions only: perturb one cache entry of layer 0
    for absorbed in (False, True):
        m = M.Model(cfg, tensors, True, absorbed=absorbed)
        st = m.new_state()
        p = len(toks) - 2
        for pos in range(p):
            m.step(st, toks[pos], pos)
        lay = m.layers[0]
        x = M.rmsnorm(m.embed[toks[p]], lay["g1"], m.eps)
        rec = {}
        base = m.mla(lay, m.copy_state(st)[0], x, p, rec)
        sel = set(rec["sel"])
        def changed(positions):
            s0 = m.copy_state(st)[0]
            for s in positions:
                s0["ckv"][s] = [v + 0.5 for v in s0["ckv"][s]]
                s0["kpe"][s] = [v - 0.5 for v in s0["kpe"][s]]
                s0["exp"].pop(s, None)
            return maxdiff(base, m.mla(lay, s0, x, p, None))
        unsel = sorted(set(range(p)) - sel)
        d_un = changed(unsel)  # every unselected cache entry at once
        d_sel = min(changed([s]) for s in sorted(sel) if s < p)  # each earlier selected one alone
        C.cond("(b) attention reads S_t only (%s)" % ("absorbed" if absorbed else "naive"),
               d_un == 0.0 and d_sel > 1e-6 and len(unsel) > 0,
               "query %d: all %d unselected entries changed -> |diff| %.3g; each of %d selected -> >= %.3g"
               % (p, len(unsel), d_un, len([s for s in sel if s < p]), d_sel))
    # constructed exact ties: layer 0's indexer key made position-independent on its RoPE dims,
    # so that equal tokens have bit-equal keys (layer 0's input depends on the token only)
    tie_t = dict(tensors)
    dr = D["d_rope"]
    for nm in ("layers.0.indexer.k_norm.weight", "layers.0.indexer.k_norm.bias"):
        shp, v = tie_t[nm]
        tie_t[nm] = (shp, [0.0] * dr + list(v[dr:]))
    tm = M.Model(cfg, tie_t, True)
    tr = []
    tm.sequence_logprobs([11] * 15, trace=tr)
    rows0 = [r for r in tr if r["layer"] == 0]
    ok = all(r["sel"] == list(range(min(K, r["pos"] + 1))) and len(set(r["scores"])) == 1 for r in rows0)
    nz = sum(1 for r in rows0 if r["scores"][0] != 0.0)
    C.cond("(b) one repeated token: S_t = first k positions", ok and nz > 0,
           "%d rows, every row one tied score, %d of them non-zero" % (len(rows0), nz))
    alt = [11, 42] * 10
    tr = []
    tm.sequence_logprobs(alt, trace=tr)
    good, straddle, ordered = True, 0, 0
    for r in (r for r in tr if r["layer"] == 0):
        n, sc = r["pos"] + 1, r["scores"]
        a = [s for s in range(n) if alt[s] == 11]
        b = [s for s in range(n) if alt[s] == 42]
        if any(sc[s] != sc[a[0]] for s in a) or (b and any(sc[s] != sc[b[0]] for s in b)):
            good = False
            continue
        hi, lo = (a, b) if not b or sc[a[0]] >= sc[b[0]] else (b, a)
        expect = (hi + lo)[:min(K, n)] if not b or sc[a[0]] != sc[b[0]] else list(range(min(K, n)))
        good = good and r["sel"] == expect
        straddle += len(hi) > K or (len(hi) < K < n)
        ordered += bool(b) and sc[a[0]] != sc[b[0]]
    C.cond("(b) two alternating tokens: lowest indices of each tied class", good and straddle > 0 and ordered > 0,
           "%d rows with a tie across the cut, %d with the two classes' scores distinct" % (straddle, ordered))
    print("mla_ref:    (b) %.2f s" % (time.monotonic() - t0))

    C.part("(c) MoE routing")
    t0 = time.monotonic()
    moe = [r for r in tr_n + tr_d if "idx" in r]
    E, NG, TG, KE, rho = D["n_experts"], D["n_group"], D["topk_group"], D["experts_per_token"], D["routed_scale"]
    gsz = E // NG
    okg = oki = okd = True
    wsum = wrel = 0.0
    limited = sprime_w = 0
    for r in moe:
        sp, s = r["sp"], r["s"]
        gs = [max(sp[g * gsz + i] + sp[g * gsz + j] for i in range(gsz) for j in range(i + 1, gsz))
              for g in range(NG)]
        okg = okg and gs == r["gscore"] and selection_ok(r["kept"], gs, TG)
        allowed = [e for e in range(E) if e // gsz in r["kept"]]
        inside = [sp[e] if e in allowed else M.NEG_INF for e in range(E)]
        oki = oki and selection_ok(r["idx"], inside, KE)
        okd = okd and len({e // gsz for e in r["idx"]}) <= TG
        wsum = max(wsum, abs(sum(r["w"]) - rho) / rho)
        den = sum(s[e] for e in r["idx"])
        wrel = max(wrel, max(abs(w - rho * s[e] / den) / rho for w, e in zip(r["w"], r["idx"])))
        dsp = sum(sp[e] for e in r["idx"])
        sprime_w += max(abs(w - rho * sp[e] / dsp) for w, e in zip(r["w"], r["idx"])) > 1e-6
        limited += M.topk(sp, KE) != r["idx"]
    C.cond("(c) kept groups: top-%d by sum of top-2 s', tie rule" % TG, okg and bool(moe), "%d routings" % len(moe))
    C.cond("(c) experts: top-%d of s' in the kept groups" % KE, oki and okd,
           "%d routings, %d where group limiting changed the choice" % (len(moe), limited))
    C.close("(c) sum of weights = rho", wsum, 1e-15, "max |sum w - rho|/rho")
    C.close("(c) w_k = rho s_k / sum s (from s)", wrel, 1e-15, "max |diff|/rho")
    C.cond("(c) control: weights from s' would differ", sprime_w == len(moe), "%d of %d routings" % (sprime_w, len(moe)))
    cases = [  # (s', n_group, topk_group, k, kept, idx, what)
        ([0.5] * 8, 4, 2, 2, [0, 1], [0, 1], "all tied"),
        ([0.5, 0.5, 0.75, 0.25, 0.5, 0.5, 0.75, 0.25], 4, 2, 2, [0, 1], [2, 0], "tied groups, tied experts"),
        ([0.875, 0.0, 0.625, 0.625, 0.75, 0.625, 0.125, 0.125], 4, 2, 2, [2, 1], [4, 2],
         "group limiting excludes the best expert; 3-way expert tie"),
        ([1.0, 1.0, 0.0, 0.0, 0.75, 0.75, 0.75, 0.75], 2, 1, 2, [0], [0, 1], "top-2 of a group, not its sum"),
        ([0.25, 0.5, 0.5, 0.25, 0.5, 0.25, 0.25, 0.5], 4, 3, 3, [0, 1, 2], [1, 2, 4], "ties across kept groups"),
    ]
    bad = []
    for sp, ng, tg, k, kept, idx, what in cases:
        got = M.route(sp, ng, tg, k)
        if got[0] != kept or got[1] != idx:
            bad.append("%s: kept %s idx %s, expected %s %s" % (what, got[0], got[1], kept, idx))
    C.cond("(c) constructed routing ties", not bad, "; ".join(bad) or "%d cases" % len(cases))
    # router_bias selects, s weighs: router zero (s = 1/2 exactly), a chosen bias
    bt = dict(tensors)
    bt["layers.1.moe.router.weight"] = ([E, D["d_model"]], [0.0] * (E * D["d_model"]))
    bt["layers.1.moe.router_bias"] = ([E], [0.0, 0.03, 0.01, 0.0, 0.05, 0.04, 0.0, 0.0])
    tr = []
    M.Model(cfg, bt, True).sequence_logprobs(toks[:6], trace=tr)
    r1 = [r for r in tr if r["layer"] == 1]
    ok = all(r["kept"] == [2, 0] and r["idx"] == [4, 5] and r["w"] == [rho / 2, rho / 2] for r in r1)
    C.cond("(c) router_bias selects, s weighs", ok,
           "%d tokens: groups %s experts %s weights %s" % (len(r1), r1[0]["kept"], r1[0]["idx"], r1[0]["w"]))
    print("mla_ref:    (c) %.2f s" % (time.monotonic() - t0))

    C.part("(d) branch split, LoRA, the file modes")
    t0 = time.monotonic()
    prompt = rng_tokens(rng, 12, D["vocab"])
    resp = [rng_tokens(rng, n, D["vocab"]) for n in (3, 5, 4)]
    grp = naive.group_logprobs(prompt, resp, 1.0)
    full = [naive.sequence_logprobs(prompt + y)[len(prompt) - 1:] for y in resp]
    C.close("(d) branch split = full sequence per member", maxdiff(grp, full), 1e-12)
    ref = M.Model(cfg, tensors, False).group_logprobs(prompt, resp, 1.0)
    zb = M.random_weights(cfg, 1, lora_r=4, lora_experts=True, lora_b_zero=True)
    zp = M.Model(cfg, zb, True).group_logprobs(prompt, resp, 1.0)
    zr = M.Model(cfg, zb, False).group_logprobs(prompt, resp, 1.0)
    C.cond("(d) LoRA: B = 0 gives policy == reference; random B does not",
           maxdiff(zp, zr) == 0.0 and maxdiff(grp, ref) > 1e-6,
           "B=0 |diff| %.3g, random B |diff| %.3g" % (maxdiff(zp, zr), maxdiff(grp, ref)))
    with tempfile.TemporaryDirectory(prefix="mla_ref.") as tmp:
        wpath, w2, bpath, opath = (os.path.join(tmp, n) for n in ("w.safetensors", "w2.safetensors",
                                                                     "batch.json", "out.json"))
        cpath = os.path.join(tmp, "cfg.json")
        with open(cpath, "w") as f:
            json.dump(file_cfg, f)
        rc = [M.main(["mla_ref.py", "--random-weights", cpath, wpath, "--seed", "5", "--lora-r", "4"]),
              M.main(["mla_ref.py", "--random-weights", cpath, w2, "--seed", "5", "--lora-r", "4"])]
        same = open(wpath, "rb").read() == open(w2, "rb").read()
        M.main(["mla_ref.py", "--random-weights", cpath, w2, "--seed", "6", "--lora-r", "4"])
        differ = open(wpath, "rb").read() != open(w2, "rb").read()
        C.cond("(d) --random-weights: rc 0, a seed's file reproducible", rc == [0, 0] and same and differ,
               "rc %s, same seed identical %s, other seed differs %s" % (rc, same, differ))
        bcfg = dict(file_cfg, **dict(RUN, lora_experts=False))
        wt, _ = hr.read_safetensors(wpath)
        pm = M.Model(bcfg, wt, True)
        pol = pm.group_logprobs(prompt, resp, 1.0)
        rfp = M.Model(bcfg, wt, False).group_logprobs(prompt, resp, 1.0)
        rewards = [1.0, 0.0, 0.5]
        old = [[v + 0.3 * (-1) ** t for t, v in enumerate(lp)] for lp in pol]
        batch = {"config": bcfg, "prompt": prompt, "responses": resp, "rewards": rewards,
                 "advantages": hr.advantages(rewards), "old_logprobs": old, "ref_logprobs": rfp}
        with open(bpath, "w") as f:
            json.dump(batch, f)
        rc = M.main(["mla_ref.py", wpath, bpath, "--json", opath])
        doc = M.read_json(opath, "output") if rc == 0 else {}
        loss, census = hr.grpo_loss(pol, old, rfp, hr.advantages(rewards), 0.2, 0.04)
        ok = (rc == 0 and sorted(doc) == ["advantages", "decisions", "loss", "policy", "ref_policy"]
              and doc["policy"] == pol and doc["ref_policy"] == rfp and doc["loss"] == loss)
        C.cond("(d) --json: policy, ref_policy, loss", ok, "rc %d, loss %r, clip census %s"
               % (rc, doc.get("loss"), {k: v for k, v in census.items() if k != "max_kl"}))
        # the decisions: both forwards' DSA top-k and MoE routing, every kind counted, the smallest margins
        # positive and where they were made; Margins' rule by hand (a gap, an exact tie, a tie at 0 held by
        # clamped values, a decision with nothing left out)
        dec = doc.get("decisions", {})
        kinds = dec.get("kinds", {})
        mg = M.Margins()
        mg.note("a", [0.9, 0.5, 0.4], 1, (0, 3, None))
        mg.note("b", [3.0, 2.0, 2.0, 1.0], 2, (1, 4, 0))
        mg.note("c", [0.7, 0.0, 0.0], 2, (2, 5, 1), [None, 0.25, 0.125])
        mg.note("d", [1.0, 2.0], 2, (0, 0, None))
        hand = mg.doc()
        C.cond("(d) --json: decisions of every kind, margins measured",
               rc == 0 and sorted(kinds) == ["dsa_topk", "moe_expert", "moe_group"]
               and dec["count"] == sum(k["count"] for k in kinds.values()) > 0
               and all(k["smallest"]["relative"] > 0 for k in kinds.values()),
               "decisions %r" % {k: (v["count"], v["smallest"]["relative"]) for k, v in kinds.items()})
        C.cond("(d) Margins by hand: gap 0.4 of 0.9, an exact tie 0, a tie at 0 held by clamps 0.125, none left out",
               abs(hand["kinds"]["a"]["smallest"]["relative"] - 0.4 / 0.9) < 1e-15
               and hand["kinds"]["b"]["smallest"]["relative"] == 0.0
               and hand["kinds"]["c"]["smallest"]["relative"] == 0.125 and "d" not in hand["kinds"]
               and hand["count"] == 3 and hand["kinds"]["b"]["smallest"]["member"] == 0,
               "%r" % hand)
        rc_abs = M.main(["mla_ref.py", wpath, bpath, "--json", opath, "--absorbed"])
        d_abs = maxdiff(M.read_json(opath, "output")["policy"], pol) if rc_abs == 0 else float("inf")
        C.close("(d) --json --absorbed vs naive policy", d_abs, 1e-12)
        # usage and mismatches
        hyb = dict(batch, config=dict(bcfg, family="hybrid"))
        hpath = os.path.join(tmp, "hyb.json")
        with open(hpath, "w") as f:
            json.dump(hyb, f)
        ex = dict(batch, config=dict(bcfg, lora_experts=True))
        epath = os.path.join(tmp, "ex.json")
        with open(epath, "w") as f:
            json.dump(ex, f)
        stray = dict(wt)
        stray["layers.0.indexer.q.lora_A"] = ([4, D["q_rank"]], [0.0] * (4 * D["q_rank"]))
        stray["layers.0.indexer.q.lora_B"] = ([D["index_heads"] * D["index_dim"], 4],
                                              [0.0] * (4 * D["index_heads"] * D["index_dim"]))
        spath = os.path.join(tmp, "stray.safetensors")
        hr.write_safetensors(spath, stray, "F64")
        err = sys.stderr
        try:
            sys.stderr = open(os.devnull, "w")
            got = [M.main(["mla_ref.py"]), M.main(["mla_ref.py", wpath, bpath]),
                   M.main(["mla_ref.py", "--random-weights", cpath]), M.main(["mla_ref.py", wpath, hpath, "--json", opath]),
                   M.main(["mla_ref.py", "--bogus"]), M.main(["mla_ref.py", wpath, epath, "--json", opath]),
                   M.main(["mla_ref.py", spath, bpath, "--json", opath])]
        finally:
            sys.stderr.close()
            sys.stderr = err
        C.cond("(d) exits: usage 2, hybrid batch 2; LoRA sets off-target 1", got == [2, 2, 2, 2, 2, 1, 1],
               "rc %s" % got)
    print("mla_ref:    (d) %.2f s" % (time.monotonic() - t0))

    total = time.monotonic() - C.t0
    if C.failures:
        raise M.Mismatch("%d of %d check(s) failed:\n  %s" % (len(C.failures), C.ran, "\n  ".join(C.failures)))
    print("mla_ref: OK, %d checks passed in %.1f s" % (C.ran, total))
