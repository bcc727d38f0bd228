#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Turns the `BENCH <json>` lines of scripts/guest/bench_client.py (stdin)
into a table of medians and ratios (stdout and OUT/table.txt), all samples
with the summary (OUT/samples.json) and a chart of the ratios (OUT/chart.png).

Absolute numbers under emulation mean little; the ratios measured in one
run, with the variants interleaved, are the figures to quote.
"""

import argparse
import datetime
import json
import os
import statistics
import sys

# (label, workload, field, better, ceiling workload/field, target vs C)
METRICS = [
    ("4K rand read QD1 p50 latency (us)", "randread_4k_qd1", "lat_p50_us", "lower", ("ib_send_lat", "lat_p50_us"), ("<=", 0.95)),
    ("4K rand read QD1 p99 latency (us)", "randread_4k_qd1", "lat_p99_us", "lower", ("ib_send_lat", "lat_p99_us"), None),
    ("4K rand read QD64 IOPS", "randread_4k_qd64", "iops", "higher", None, (">=", 1.10)),
    ("1M seq read (MB/s)", "seqread_1m", "mb_s", "higher", ("ib_write_bw", "mb_s"), (">=", 1.0)),
    ("1M seq write (MB/s)", "seqwrite_1m", "mb_s", "higher", ("ib_read_bw", "mb_s"), (">=", 1.0)),
    ("file creates/s", "smallfiles", "create_per_s", "higher", None, None),
    ("file stats/s (cold)", "smallfiles", "stat_per_s", "higher", None, None),
    ("file unlinks/s", "smallfiles", "unlink_per_s", "higher", None, None),
    ("client CPU us/RPC (QD64)", "randread_4k_qd64", "cpu_us_per_rpc", "lower", None, ("<=", 0.95)),
    ("client CPU us/RPC (1M read)", "seqread_1m", "cpu_us_per_rpc", "lower", None, None),
    ("server CPU us/RPC (QD64)", "randread_4k_qd64", "server_cpu_us_per_rpc", "lower", None, None),
    # Instructions executed (scripts/insn_count.c): the same work measured
    # in a unit the host's speed does not change.
    ("client instructions/RPC (QD1)", "randread_4k_qd1", "insns_per_rpc", "lower", None, None),
    ("client instructions/RPC (QD64)", "randread_4k_qd64", "insns_per_rpc", "lower", None, None),
    ("transport instructions/RPC (QD64)", "randread_4k_qd64", "transport_insns_per_rpc", "lower", None, None),
    ("server instructions/RPC (QD64)", "randread_4k_qd64", "server_insns_per_rpc", "lower", None, None),
    # The host's side (scripts/insn_count.c): the CPU time each guest's
    # QEMU process used, and the blocks QEMU translated, per RPC.
    ("client QEMU host CPU us/RPC (QD64)", "randread_4k_qd64", "host_cpu_us_per_rpc", "lower", None, None),
    ("server QEMU host CPU us/RPC (QD64)", "randread_4k_qd64", "server_host_cpu_us_per_rpc", "lower", None, None),
    ("client translations/RPC (QD64)", "randread_4k_qd64", "translations_per_rpc", "lower", None, None),
]
# 1 MiB throughput must also reach this fraction of the raw ceiling.
CEILING_TARGET = 0.9


def values(samples, variant, workload, field):
    return [s[field] for s in samples
            if s.get("variant") == variant and s.get("workload") == workload and s.get(field) is not None]


def med(v):
    return statistics.median(v) if v else None


def spread(v):
    """Half the min-max range, as a fraction of the median."""
    m = med(v)
    return (max(v) - min(v)) / 2 / m if v and m else None


def ratio(a, b):
    return a / b if a is not None and b else None


def paired(samples, workload, field):
    """The ratio ours / C within each repetition (the two ran minutes
    apart, so the host's drift between repetitions cancels): their median,
    min and max, or None without a pair."""
    by_rep = {}
    for s in samples:
        if s.get("workload") == workload and s.get(field) is not None and s.get("variant") in ("ours", "c"):
            by_rep.setdefault(s.get("rep"), {})[s["variant"]] = s[field]
    rs = [ratio(p["ours"], p["c"]) for p in by_rep.values() if "ours" in p and "c" in p]
    rs = [r for r in rs if r is not None]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    samples = []
    for line in sys.stdin:
        if line.startswith("BENCH "):
            samples.append(json.loads(line[6:]))
    os.makedirs(args.out, exist_ok=True)

    rows, summary = [], []
    for label, wl, field, better, ceil, target in METRICS:
        v = {k: values(samples, k, wl, field) for k in ("ours", "c", "tcp")}
        m = {k: med(x) for k, x in v.items()}
        ceiling = med(values(samples, "raw", *ceil)) if ceil else None
        r_c, r_tcp, r_ceil = ratio(m["ours"], m["c"]), ratio(m["ours"], m["tcp"]), ratio(m["ours"], ceiling)
        pr = paired(samples, wl, field)
        verdict = ""
        if target and r_c is not None:
            op, want = target
            def holds(r):
                return r <= want if op == "<=" else r >= want
            # Both readings must agree: the ratio of the medians, and the
            # median of the ratios within each repetition.
            ok = holds(r_c) and (pr is None or holds(pr[0]))
            if ceil and better == "higher" and r_ceil is not None:
                ok = ok and r_ceil >= CEILING_TARGET
                verdict = f"{'met' if ok else 'NOT met'} ({op}{want} x C, >={CEILING_TARGET} x ceiling)"
            else:
                verdict = f"{'met' if ok else 'NOT met'} ({op}{want} x C)"
        rows.append([label,
                     f"{fmt(m['ours'])} ±{fmt(100 * spread(v['ours']) if spread(v['ours']) is not None else None, 0)}%",
                     f"{fmt(m['c'])} ±{fmt(100 * spread(v['c']) if spread(v['c']) is not None else None, 0)}%",
                     fmt(m["tcp"]), fmt(ceiling), fmt(r_c, 2),
                     f"{pr[0]:.2f} ({pr[1]:.2f}..{pr[2]:.2f})" if pr else "-",
                     fmt(r_tcp, 2), fmt(r_ceil, 2), verdict])
        summary.append(dict(metric=label, workload=wl, field=field, better=better,
                            median={k: m[k] for k in m}, samples={k: len(v[k]) for k in v},
                            ceiling=ceiling, ours_over_c=r_c,
                            ours_over_c_paired=dict(zip(("median", "min", "max"), pr)) if pr else None,
                            ours_over_tcp=r_tcp,
                            ours_over_ceiling=r_ceil, target=verdict or None))

    head = ["metric", "rpcrdma_rs", "C rpcrdma", "TCP", "raw ceiling", "ours/C", "ours/C paired", "ours/TCP", "ours/ceil", "target"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    reps = len({s.get("rep") for s in samples})
    text = "\n".join([f"rpcrdma-rs benchmark, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
                      f"{reps} repetitions, medians (± half the min-max range)",
                      "ours/C paired: the median of the ratios within each repetition (their min..max)", ""] + lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "samples.json"), "w") as f:
        json.dump(dict(generated=datetime.datetime.now().isoformat(), samples=samples, summary=summary), f, indent=1)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
        return 0
    labels = [s["metric"] for s in summary]
    # Ratios oriented so that > 1 is always better for rpcrdma_rs.
    def better_ratio(s, key):
        r = s[key]
        if r is None or r == 0:
            return 0
        return r if s["better"] == "higher" else 1 / r
    fig, ax = plt.subplots(figsize=(11, 5.5))
    ys = range(len(labels))
    h = 0.38
    ax.barh([y - h / 2 for y in ys], [better_ratio(s, "ours_over_c") for s in summary], h, label="vs in-tree C rpcrdma")
    ax.barh([y + h / 2 for y in ys], [better_ratio(s, "ours_over_tcp") for s in summary], h, label="vs NFS over TCP")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("rpcrdma_rs advantage (ratio, > 1 is better; latency and CPU inverted)")
    ax.set_title(f"rpcrdma-rs benchmark ({reps} repetitions, medians)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "chart.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
