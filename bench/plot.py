#!/usr/bin/env python3
"""plot.py: PNG plots and the Markdown report from a report.json written by bench/report.py.

  python3 bench/plot.py report.json [-o DIR] [--markdown-only]

Writes, per model, KEY-speed.png (decode and prefill tokens/s of each runtime and profile, with
the bandwidth limit of each bar when known) and KEY-cosine.png (1 - centered cosine per position,
one line per profile, against the model's primary reference), then report.md with the tables and
the plots. matplotlib is needed for the plots only; --markdown-only needs the standard library.
Exit status: 0 success, 1 unreadable report or failed plot, 2 usage error.
"""
import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import report_md  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(prog="plot.py", description="plots and report.md from report.json")
    p.add_argument("report", help="report.json")
    p.add_argument("-o", "--out", help="output folder (default: the report's folder)")
    p.add_argument("--markdown-only", action="store_true", help="write report.md, no plots")
    return p.parse_args(argv)


def bar_label(s):
    return "%s\n%s" % (s["runtime"], s["profile"])


def speed_plot(plt, m, path):
    rows = [s for s in m.get("speed", []) if not s.get("error")]
    if not rows:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(max(7, 1.6 * len(rows) * 2), 4.2))
    x = list(range(len(rows)))
    devices = ", ".join(sorted({s.get("device") or "?" for s in rows}))
    colors = ["#4c72b0" if s["runtime"] == "thin-run" else "#dd8452" for s in rows]
    for ax, key, title in ((axes[0], "decode_tokens_per_s", "decode"),
                           (axes[1], "prefill_tokens_per_s", "prefill")):
        vals = [s.get(key) or 0.0 for s in rows]
        ax.bar(x, vals, color=colors)
        for i, v in enumerate(vals):
            ax.annotate("{:,.0f}".format(v) if v >= 100 else "%.3g" % v, (i, v), ha="center",
                        va="bottom", fontsize=8)
        if key == "decode_tokens_per_s":
            limit_marks(ax, rows)
        pos = [v for v in vals if v > 0]
        if key == "decode_tokens_per_s":  # the limit marks must fit the scale too
            pos += [s["bandwidth_limit_tokens_per_s"] for s in rows if s.get("bandwidth_limit_tokens_per_s")]
        if pos and max(pos) / min(pos) > 50:
            ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([bar_label(s) for s in rows], fontsize=8)
        ax.set_ylabel("tokens/s")
        ax.set_title("%s: %s tokens/s (batch 1, %s)" % (m["name"], title, devices), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def limit_marks(ax, rows):
    labelled = False
    for i, s in enumerate(rows):
        lim = s.get("bandwidth_limit_tokens_per_s")
        if not lim:
            continue
        ax.hlines(lim, i - 0.4, i + 0.4, colors="#c44e52", linestyles="dashed",
                  label=None if labelled else "bandwidth limit")
        labelled = True
    if labelled:
        ax.legend(fontsize=8)


def primary_reference(m):
    for f in m.get("fidelity", []):
        if f.get("target") is not None:
            return f["reference"]
    fid = m.get("fidelity", [])
    return fid[0]["reference"] if fid else None


def cosine_plot(plt, m, path):
    ref = primary_reference(m)
    rows = [f for f in m.get("fidelity", []) if f["reference"] == ref
            and isinstance(f.get("cos_per_position"), list) and not f.get("error")]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(10, 4.2))
    floor = 1e-9
    for f in rows:
        ys = [max(1.0 - c, floor) for c in f["cos_per_position"]]
        line, = ax.plot(range(len(ys)), ys, label=f["profile"], linewidth=1.2)
        if f.get("target") is not None:
            ax.axhline(1.0 - f["target"], color=line.get_color(), linestyle="dashed",
                       linewidth=0.9, label="%s target (cos ≥ %g)" % (f["profile"], f["target"]))
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("1 − centered cosine (lower is closer)")
    ax.set_title("%s: logits vs %s, per position" % (m["name"], ref), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def make_plots(rep, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for m in rep.get("models", []):
        m["plots"] = []
        for kind, fn in (("speed", speed_plot), ("cosine", cosine_plot)):
            name = "%s-%s.png" % (m.get("key", m["name"]), kind)
            if fn(plt, m, os.path.join(out, name)):
                m["plots"].append(name)
                print(os.path.join(out, name))


def main(argv):
    args = parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        print("plot.py: %s: %s" % (args.report, e), file=sys.stderr)
        return 1
    out = args.out or os.path.dirname(os.path.abspath(args.report))
    os.makedirs(out, exist_ok=True)
    rep = copy.deepcopy(rep)
    if not args.markdown_only:
        try:
            make_plots(rep, out)
        except ImportError:
            print("plot.py: matplotlib is not importable: run with --markdown-only, or on a "
                  "machine with matplotlib", file=sys.stderr)
            return 1
    path = os.path.join(out, "report.md")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(report_md.render(rep) + "\n")
    os.replace(path + ".tmp", path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
