#!/usr/bin/env python3
"""trace-summary.py — where one decode token's time goes, from a thin-run kernel timeline.

    THIN_CUDA_TRACE=20 THIN_CUDA_TRACE_FILE=t.csv thin-run ... ; python3 bench/trace-summary.py t.csv

The timeline (kernels/cuda_backend.cu, trace_token) has one line per block of the traced kernels
(matvecs, decode attention, MLP): its launch, SM, and the global-timer times at which it started, at
which its wait for the previous kernel returned, and at which it ended. Kernels are taken in
order of their first block's start; per layer they are q/k/v, attention, o, gate/up, down (or,
with the MLP kernel, q/k/v, attention, o, mlp; with the attention + o kernel too, q/k/v,
attention+o, mlp), and the LM head closes the token. Per step
(averaged over layers) it prints:

  lead    how long before the previous kernel's last block ended this kernel's first block began
          (its weights were being fetched then)
  release from the previous kernel's last block ending to this kernel's first wait returning
  span    from the previous kernel's last block ending to this one's last block ending: the
          step's share of the token
  body    from this kernel's first wait returning to its last block ending
  blocks  blocks recorded (per warp for the matvec)

and, for the decode attention, the mean time of each phase its blocks mark after their wait
returns: K/V and q in, scores + softmax + weighted V sum, cluster barrier, combine and the
second cluster barrier, to the end (blocks that combine over the cluster), and apart from those
the first two and to the end for blocks that had the context to themselves; for the attention + o
kernel, K/V and q in, attention, cluster barrier and combine, o rows, residual add; for the MLP kernel,
the mean time of each of its blocks' phases after the wait returns, and the same for the blocks
that end first (the earlier half of each launch) and last (its last 5 %), with when they started
and where they sit in the grid; then its blocks by how many of them shared an SM and by tenth of
the grid, with when they started, waited and ended. Per step it also prints when its first block
started on each SM against the previous kernel's last block ending there (the SM handed over),
and for the matvecs of trace builds that mark their prologue, when their warps that started before
and after the previous kernel's end entered, ended the prologue, asked for the norm weights,
returned from the wait and ended.
"""
import csv
import sys
from collections import OrderedDict, defaultdict

STEPS = ["q/k/v", "attention", "o", "gate/up", "down"]
STEPS_MLP = ["q/k/v", "attention", "o", "mlp"]  # with the MLP kernel (kernels/mlp.cu)
STEPS_AO = ["q/k/v", "attention+o", "mlp"]  # and the attention + o kernel (kernels/attn_o.cu)
STEPS_QAO = ["attn block", "mlp"]  # the attention block kernel (kernels/attn_o.cu's qao_kernel)


def step_names(n, steps=STEPS):
    """Layers, and the step name of each of a token's n kernels (or phases): per layer steps, then
    the LM head."""
    n_layers = (n - 1) // len(steps)
    names = [steps[i % len(steps)] for i in range(n_layers * len(steps))]
    return n_layers, names + ["lm_head"] * (n - len(names))


def in_order(cnt):
    """The steps seen (keys of cnt), in the order of a layer, the LM head last."""
    return [name for name in ["attn block"] + STEPS[:2] + ["attention+o"] + STEPS[2:] + ["mlp", "lm_head"]
            if name in cnt]


def print_phases(what, rows, names, unit=" blocks"):
    """The mean time of each phase over the blocks' rows (times: the wait's end, the marks, the
    block's end), one line; nothing without rows."""
    if rows:
        print(f"{what}, mean over {len(rows)}{unit} (us):",
              ", ".join(f"{n} {sum(p[i + 1] - p[i] for p in rows) / len(rows) / 1e3:.2f}"
                        for i, n in enumerate(names)))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: trace-summary.py TRACE.csv")
    grids = OrderedDict()
    stream = {}
    try:
        f = open(sys.argv[1], newline="")
    except OSError as e:
        sys.exit(f"trace-summary: {sys.argv[1]}: {e.strerror}")
    with f:
        rd = csv.DictReader(f)
        for r in rd:
            if r.get("kind") == "4":  # the persistent decode kernel: one record per block and phase
                try:
                    stream.setdefault(int(r["units"]), []).append(
                        [int(r[k]) for k in ("t0", "t1", "m0", "t2", "m1", "m2")])
                except (KeyError, TypeError, ValueError):
                    sys.exit(f"trace-summary: {sys.argv[1]}: line {rd.line_num}: bad stream record")
                continue
            try:
                g = grids.setdefault(r["grid"], {"kind": int(r["kind"]), "units": int(r["units"]),
                                                 "t0": [], "t1": [], "t2": [], "sm": []})
                g["t0"].append(int(r["t0"]))
                g["t1"].append(int(r["t1"]))
                g["t2"].append(int(r["t2"]))
                g["sm"].append(int(r["sm"]))  # per record, beside t0 .. t2
                marks = [int(r.get(f"m{k}", 0) or 0) for k in range(4)]
            except (KeyError, TypeError, ValueError):
                sys.exit(f"trace-summary: {sys.argv[1]}: line {rd.line_num}: "
                         "not a thin-run timeline (grid,kind,units,sm,block,t0,t1,t2,m0..m3)")
            if g["kind"] in (6, 7):  # the attention + o kernel, the attention block kernel: t1, m0..m3, t2
                g.setdefault("ao" if g["kind"] == 6 else "qao", []).append([int(r["t1"])] + marks + [int(r["t2"])])
            elif g["kind"] == 5:  # t0, t1, m0..m3, t2, block, sm
                g.setdefault("mlp", []).append([int(r["t0"]), int(r["t1"])] + marks +
                                               [int(r["t2"]), int(r["block"]), int(r["sm"])])
            elif g["kind"] == 2:  # matvecs: t0, m0 (the prologue's end), m1 (the norm weights asked), t1, t2
                if marks[0] and marks[1]:
                    g.setdefault("mv", []).append([int(r["t0"]), marks[0], marks[1], int(r["t1"]), int(r["t2"])])
            elif all(marks):
                g.setdefault("phases", []).append([int(r["t1"])] + marks + [int(r["t2"])])
            elif marks[0] and marks[1] and not marks[2] and not marks[3]:
                g.setdefault("phases1", []).append([int(r["t1"])] + marks[:2] + [int(r["t2"])])
    if stream:
        stream_summary(stream)
    ks = sorted(grids.values(), key=lambda g: min(g["t0"]))
    if not ks:
        if stream:
            return
        sys.exit("trace-summary: no records")
    kinds = {g["kind"] for g in ks}
    n_layers, names = step_names(len(ks), STEPS_QAO if 7 in kinds else STEPS_AO if 6 in kinds
                                 else STEPS_MLP if 5 in kinds else STEPS)
    agg = defaultdict(lambda: defaultdict(float))
    cnt = defaultdict(int)
    prev_end = None
    for name, g in zip(names, ks):
        t0, t1, t2 = min(g["t0"]), min(g["t1"]), max(g["t2"])
        a = agg[name]
        if prev_end is not None:
            a["lead"] += (prev_end - t0) / 1e3
            a["release"] += (t1 - prev_end) / 1e3
            a["span"] += (t2 - prev_end) / 1e3
            a["n_prev"] += 1
        else:
            a["span"] += (t2 - t0) / 1e3
        a["body"] += (t2 - t1) / 1e3
        a["tail"] += (t2 - sorted(g["t2"])[len(g["t2"]) // 2]) / 1e3
        a["blocks"] += len(g["t0"])
        a["sms"] += len(set(g["sm"]))
        cnt[name] += 1
        prev_end = t2
    total = (max(max(g["t2"]) for g in ks) - min(ks[0]["t0"])) / 1e3
    print(f"kernels traced: {len(ks)} ({n_layers} layers); token (first start to last end): {total:.1f} us")
    print(f"{'step':10} {'n':>3} {'lead':>7} {'release':>8} {'span':>7} {'body':>7} {'tail':>6} {'blocks':>7} {'SMs':>5}  us each; span summed")
    tot_span = 0.0
    for name in in_order(cnt):
        n = cnt[name]
        a = agg[name]
        tot_span += a["span"]
        np_ = max(a["n_prev"], 1)  # the token's first kernel has no predecessor
        print(f"{name:10} {n:3d} {a['lead']/np_:7.2f} {a['release']/np_:8.2f} {a['span']/n:7.2f} "
              f"{a['body']/n:7.2f} {a['tail']/n:6.2f} {a['blocks']/n:7.0f} {a['sms']/n:5.0f}  {a['span']:8.1f}")
    print(f"{'sum':10} {'':3} {'':7} {'':8} {'':7} {'':7} {'':6} {'':7} {'':5}  {tot_span:8.1f}")
    print("tail: last block's end minus the median block's end")
    handover(ks, names)
    mv_prologue(ks, names)
    print_phases("attention phases", [p for g in ks for p in g.get("phases", [])],
                 ["K/V and q in", "scores + softmax + V sum", "cluster barrier", "combine", "to the end"])
    print_phases("attention+o phases", [p for g in ks for p in g.get("ao", [])],
                 ["K/V and q in", "attention", "cluster barrier + combine", "o rows", "residual add"])
    print_phases("attention block phases", [p for g in ks for p in g.get("qao", [])],
                 ["x, q, k, v, newest K/V in", "attention", "cluster barrier + combine", "o rows",
                  "residual add"])
    pm = [b[1:7] for g in ks for b in g.get("mlp", [])]  # t1, m0..m3, t2
    print_phases("mlp phases", pm, ["gate/up (block's first warp)", "to h complete", "down (first thread)",
                                    "wait for every block's staging", "residual add"])
    if pm:
        mlp_ends(ks)
        mlp_by_sm(ks)
    print_phases("attention phases of single blocks", [p for g in ks for p in g.get("phases1", [])],
                 ["K/V and q in", "scores + softmax + V sum", "to the end"], unit="")


def handover(ks, names):
    """Per step, over the SMs that both it and the kernel before it ran on: this kernel's first
    block start on the SM minus the previous kernel's last block end there (negative: it started
    beside the previous kernel's blocks), as quantiles over SMs and layers."""
    gaps = defaultdict(list)
    for name, prev, g in zip(names[1:], ks, ks[1:]):
        last = {}
        for sm, t2 in zip(prev["sm"], prev["t2"]):
            last[sm] = max(last.get(sm, t2), t2)
        first = {}
        for sm, t0 in zip(g["sm"], g["t0"]):
            first[sm] = min(first.get(sm, t0), t0)
        gaps[name] += [(first[sm] - last[sm]) / 1e3 for sm in first if sm in last]
    if not any(gaps.values()):
        return
    print("start on an SM after the previous kernel's last block there ended (us; over SMs and layers):")
    print(f"  {'step':10} {'SMs':>6} {'p10':>7} {'p50':>7} {'p90':>7} {'beside':>7}")
    for name in in_order(gaps):
        v = sorted(gaps[name])
        if not v:
            continue
        q = [v[min(len(v) - 1, int(f * len(v)))] for f in (0.1, 0.5, 0.9)]
        beside = sum(1 for x in v if x < 0) / len(v)
        print(f"  {name:10} {len(v):6d} {q[0]:7.2f} {q[1]:7.2f} {q[2]:7.2f} {100 * beside:6.0f}%")


def mv_prologue(ks, names):
    """Per matvec step, its warps that started before the previous kernel's last block ended
    (early) and after it (late): medians over those warps of every layer of when each entered,
    ended its prologue (its first weights requested and, for q/k/v, the rotation computed), had
    its norm weights asked, returned from the wait and ended, from the previous kernel's last
    block end (trace builds that mark m0 and m1)."""
    rows = defaultdict(lambda: defaultdict(list))
    for name, prev, g in zip(names[1:], ks, ks[1:]):
        if not g.get("mv"):
            continue
        end = max(prev["t2"])
        for rec in g["mv"]:
            rows[name]["late" if rec[0] > end else "early"].append([(t - end) / 1e3 for t in rec])
    if not rows:
        return
    print("matvec warps by start, medians from the previous kernel's last block end (us):")
    print(f"  {'step':16} {'warps':>6} {'share':>6} {'entry':>7} {'prolog':>7} {'norm':>7} {'waited':>7} {'end':>7}")
    for name in in_order(rows):
        n = sum(len(v) for v in rows[name].values())
        for kind in ("early", "late"):
            v = rows[name].get(kind)
            if not v:
                continue
            med = [sorted(c)[len(c) // 2] for c in zip(*v)]
            print(f"  {name + ' ' + kind:16} {len(v):6d} {100 * len(v) / n:5.0f}% "
                  + " ".join(f"{x:7.2f}" for x in med))


def mlp_ends(ks):
    """The MLP kernel's blocks that end first (the earlier half) against those that end last (the
    last 5 %), per launch, then averaged over layers: when they started and waited (from the
    launch's first wait returning), how long each phase took, and when they ended."""
    rows = {"first half": [], "last 5 %": []}
    for g in ks:
        bl = g.get("mlp")  # t0, t1, m0..m3, t2, block
        if not bl:
            continue
        nb = max(b[7] for b in bl) + 1
        w0 = min(b[1] for b in bl)
        ends = sorted(b[6] for b in bl)
        sets = {"first half": [b for b in bl if b[6] <= ends[len(ends) // 2]],
                "last 5 %": [b for b in bl if b[6] >= ends[int(len(ends) * 0.95)]]}
        for k, bs in sets.items():
            # per block: start, wait (from w0), its five phases, end (from w0), place in the grid
            per = [[b[0] - w0, b[1] - w0] + [b[i + 1] - b[i] for i in range(1, 6)] + [b[6] - w0]
                   for b in bs]
            row = [sum(c) / len(bs) / 1e3 for c in zip(*per)]
            rows[k].append(row + [sum(b[7] for b in bs) / len(bs) / nb])
    if not rows["first half"]:
        return
    hdr = ["start", "wait", "gate/up", "h", "down", "staged", "add", "end", "index"]
    print("mlp blocks by when they end, us from the launch's first wait (mean over layers; index: "
          "block index / grid):")
    print(f"  {'blocks':10} " + " ".join(f"{h:>7}" for h in hdr))
    for k, rs in rows.items():
        print(f"  {k:10} " + " ".join(f"{sum(r[i] for r in rs) / len(rs):7.2f}" for i in range(len(hdr))))


def mlp_by_sm(ks):
    """Where the MLP kernel's blocks ran: its blocks grouped by how many of the launch's blocks
    shared their SM, and by tenth of the grid (block index), with when they started, when their
    wait returned and when they ended, from the previous kernel's last block ending (mean over
    layers)."""
    by_n, by_tenth = defaultdict(list), defaultdict(list)
    prev_end = None
    for g in ks:
        bl = g.get("mlp")  # t0, t1, m0..m3, t2, block, sm
        if bl and prev_end is not None:
            nb = max(b[7] for b in bl) + 1
            on_sm = defaultdict(int)
            for b in bl:
                on_sm[b[8]] += 1
            for b in bl:
                row = [(b[0] - prev_end) / 1e3, (b[1] - prev_end) / 1e3, (b[6] - prev_end) / 1e3]
                by_n[on_sm[b[8]]].append(row)
                by_tenth[b[7] * 10 // nb].append(row)
        prev_end = max(g["t2"])
    if not by_n:
        return
    for title, key, groups in (
            ("mlp blocks by how many of the launch's blocks shared their SM, us from the previous "
             "kernel's last block ending (mean over layers):", "on the SM", by_n),
            ("mlp blocks by tenth of the grid (block index), same clock:", "tenth", by_tenth)):
        print(title)
        print(f"  {key:>9} {'blocks':>7} {'started':>8} {'waited':>7} {'ended':>7}")
        for k in sorted(groups):
            rs = groups[k]
            print(f"  {k:9d} {len(rs):7d} " + " ".join(f"{sum(r[i] for r in rs) / len(rs):{w}.2f}"
                                                       for i, w in enumerate((8, 7, 7))))


def stream_summary(stream):
    """Phases of the persistent decode kernel (kernels/stream.cu), averaged per step over layers."""
    phs = sorted(stream)
    n_layers, names = step_names(len(phs))
    agg = defaultdict(lambda: defaultdict(float))
    cnt = defaultdict(int)
    prev_end = None
    first = min(r[0] for r in stream[phs[0]])
    for name, ph in zip(names, phs):
        rs = stream[ph]
        end = max(r[3] for r in rs)
        a = agg[name]
        if prev_end is not None:
            a["release"] += (min(r[1] for r in rs) - prev_end) / 1e3
            a["span"] += (end - prev_end) / 1e3
        else:
            a["span"] += (end - first) / 1e3
        a["stage"] += sum((r[2] - r[1]) if r[2] else 0 for r in rs) / len(rs) / 1e3
        a["body"] += sum(r[3] - (r[2] or r[1]) for r in rs) / len(rs) / 1e3
        ends = sorted(r[3] for r in rs)
        a["tail"] += (end - ends[len(ends) // 2]) / 1e3
        a["ringwait"] += sum(r[4] - r[0] for r in rs) / len(rs) / 8 / 1e3
        a["pieces"] += sum(r[5] - r[0] for r in rs) / len(rs)
        cnt[name] += 1
        prev_end = end
    print(f"persistent kernel: {len(phs)} phases ({n_layers} layers); first start to last end "
          f"{(prev_end - first) / 1e3:.1f} us")
    print(f"{'phase':10} {'n':>3} {'release':>8} {'stage':>7} {'body':>7} {'tail':>6} {'ringwait':>9} "
          f"{'pieces':>7} {'span':>7}  us each; span summed")
    tot = 0.0
    for name in in_order(cnt):
        n, a = cnt[name], agg[name]
        tot += a["span"]
        print(f"{name:10} {n:3d} {a['release']/n:8.2f} {a['stage']/n:7.2f} {a['body']/n:7.2f} {a['tail']/n:6.2f} "
              f"{a['ringwait']/n:9.2f} {a['pieces']/n:7.1f} {a['span']/n:7.2f}  {a['span']:8.1f}")
    print(f"{'sum':10} {'':3} {'':8} {'':7} {'':7} {'':6} {'':9} {'':7} {'':7}  {tot:8.1f}")
    print("release: previous phase's last block done to this phase's first block past its wait; stage: x "
          "staged; body: mean block time after staging; tail: last block minus the median; ringwait: "
          "per warp, waiting for weight pieces; pieces: per block")


if __name__ == "__main__":
    main()
