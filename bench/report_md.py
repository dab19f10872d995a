"""report_md.py: renders a fidelity and speed report (report.json, schema thin-report/1) as
Markdown.

Shared by report.py (which writes report.md after measuring) and plot.py (which regenerates
report.md from report.json anywhere). Standard library only.
"""


def fmt_num(x, digits=1):
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return "{:,}".format(x)
    if x != 0 and abs(x) < 10 ** -digits:
        return "%.2g" % x
    return "{:,.{}f}".format(x, digits)


def fmt_cos(x):
    if x is None:
        return "—"
    return "%.6f" % x


def fmt_bytes(n):
    if n is None:
        return "—"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%d B" % n


def fmt_pct(x):
    return "—" if x is None else "%.1f%%" % (100.0 * x)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return out


def result_cell(row):
    if row.get("error"):
        return "ERROR"
    if row.get("target") is None:
        return "—"
    return "PASS" if row.get("pass") else "FAIL"


def fidelity_section(m):
    rows = []
    for f in m.get("fidelity", []):
        tgt = f.get("target")
        rows.append([f["profile"], f["reference"], fmt_num(f.get("positions")),
                     fmt_cos(f.get("cos_min")), fmt_cos(f.get("cos_mean")),
                     fmt_pct(f.get("top1_agreement")), fmt_num(f.get("max_abs_diff"), 4),
                     "≥ %g" % tgt if tgt is not None else "—", result_cell(f)])
    if not rows:
        return ["No fidelity measurement."]
    return table(["profile", "reference", "positions", "min centered cos", "mean centered cos",
                  "top-1 agree", "max abs diff", "target (min cos)", "result"], rows)


def speed_section(m):
    rows = []
    for s in m.get("speed", []):
        ttft = s.get("ttft_s")
        rows.append([s["runtime"], s["profile"], s.get("device") or "—",
                     fmt_bytes(s.get("file_bytes")), fmt_num(s.get("load_s"), 2),
                     fmt_num(s.get("prefill_tokens_per_s")), fmt_num(s.get("decode_tokens_per_s")),
                     fmt_num(None if ttft is None else 1000.0 * ttft, 1),
                     fmt_num(s.get("start_to_first_s"), 2),
                     fmt_num(s.get("bandwidth_limit_tokens_per_s"))])
        if s.get("error"):
            rows[-1][5:7] = ["ERROR", "ERROR"]
    if not rows:
        return ["No speed measurement."]
    return table(["runtime", "profile", "device", "size on disk", "load s", "prefill tok/s",
                  "decode tok/s", "TTFT ms", "start to first token s", "bandwidth limit tok/s"], rows)


def profiles_section(m):
    rows = []
    for p in m.get("profiles", []):
        rows.append([p["name"], fmt_bytes(p.get("file_bytes")), fmt_bytes(p.get("weight_bytes")),
                     fmt_num(p.get("make_s"), 2),
                     "`%s`" % p["make_cmd"] if p.get("make_cmd") else ""])
    return table(["profile", "file", "weights read per token", "made in s", "made by"], rows)


def model_section(m):
    out = ["## %s" % m["name"], ""]
    src = m.get("source")
    if src:
        out.append("Source: `%s` (%s on disk). Scored sequence: %s." % (
            src, fmt_bytes(m.get("source_bytes")), m.get("ids_what", "—")))
        out.append("")
    out += ["### Fidelity (teacher-forced logits, centered cosine per position)", ""]
    out += fidelity_section(m) + [""]
    out += ["### Speed (batch 1, greedy)", ""]
    sp = m.get("speed_settings")
    if sp:
        out.append("Prefill: one %d-token prompt. Decode: %d tokens after a %d-token prompt. "
                   "Best of %d." % (sp["prefill_len"], sp["decode_tokens"], sp["prompt_len"],
                                    sp["repeat"]))
        out.append("")
    out += speed_section(m) + [""]
    out += ["### Files", ""] + profiles_section(m) + [""]
    for n in m.get("notes", []):
        out.append("- " + n)
    if m.get("notes"):
        out.append("")
    for p in m.get("plots", []):
        out.append("![%s](%s)" % (p, p))
    if m.get("plots"):
        out.append("")
    return out


def summary_lines(rep):
    n_pass = n_fail = n_err = 0
    for m in rep.get("models", []):
        for f in m.get("fidelity", []):
            if f.get("error"):
                n_err += 1
            elif f.get("target") is not None:
                if f.get("pass"):
                    n_pass += 1
                else:
                    n_fail += 1
    return ["Targets: %d passed, %d failed%s." % (
        n_pass, n_fail, ", %d not measured (error)" % n_err if n_err else "")]


def render(rep):
    """Returns the Markdown text of a report dictionary."""
    host = rep.get("host", {})
    out = ["# ThinTensor fidelity and speed report", ""]
    out.append("Measured %s on %s (%s%s); tools: %s, commit %s." % (
        rep.get("created", "—"), host.get("hostname", "—"), host.get("device", "—"),
        ", " + host["gpu"] if host.get("gpu") else "", rep.get("thin_version", "—"),
        rep.get("git_commit", "—")))
    if rep.get("score_kv_dtype"):
        out.append("KV cache of thin-run: %s when scoring, %s when timing." % (
            rep["score_kv_dtype"], rep.get("speed_kv_dtype", "—")))
    bw = rep.get("bandwidth_bytes_per_s")
    if bw:
        out.append("Bandwidth used for the limits: %.2f TB/s (%s); limit = bandwidth / weight "
                   "bytes read per token." % (bw / 1e12, rep.get("bandwidth_source", "—")))
    out.append("")
    out += summary_lines(rep) + [""]
    out.append("Fidelity: min/mean over positions of the cosine of the logits after subtracting "
               "each row's mean, over the whole vocabulary; top-1 agree = share of positions whose "
               "argmax matches the reference's.")
    out.append("")
    for m in rep.get("models", []):
        out += model_section(m)
    skipped = rep.get("skipped", [])
    if skipped:
        out += ["## Skipped", ""]
        for s in skipped:
            out.append("- %s: %s" % (s["model"], s["why"]))
        out.append("")
    if rep.get("command"):
        out += ["## Reproduce", "", "```", rep["command"], "```", ""]
    return "\n".join(out)
