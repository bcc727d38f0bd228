#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The report of make scaling (scripts/scaling.sh): reads the client's
``BENCH`` lines on stdin, prints the table of medians over the repetitions
(IOPS, the whole client guest's and the transport's own instructions per
RPC, at each queue depth of each configuration, ours against C) and writes
OUT/scaling.json and the curves, OUT/scaling.png."""

import argparse
import collections
import json
import os
import statistics
import sys

FIELDS = (("iops", "IOPS"), ("insns_per_rpc", "client insns/RPC"),
          ("transport_insns_per_rpc", "transport insns/RPC"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    samples = [json.loads(line[6:]) for line in sys.stdin if line.startswith("BENCH ")]
    samples = [s for s in samples if s.get("workload") == "scaling"]
    points = collections.defaultdict(lambda: collections.defaultdict(list))
    for s in samples:
        for field, _ in FIELDS:
            if s.get(field) is not None:
                points[(s["config"], s["iodepth"], s["variant"])][field].append(s[field])
    configs = list(dict.fromkeys(s["config"] for s in samples))
    depths = sorted({s["iodepth"] for s in samples})
    med = {k: {f: statistics.median(v) for f, v in d.items()} for k, d in points.items()}
    print(f"\nmedians over the repetitions (ours / C)")
    print(f"{'':14s}{'QD':>4s}" + "".join(f"{label:>30s}" for _, label in FIELDS))
    for cfg in configs:
        for qd in depths:
            o, c = med.get((cfg, qd, "ours"), {}), med.get((cfg, qd, "c"), {})
            cells = []
            for field, _ in FIELDS:
                a, b = o.get(field), c.get(field)
                ratio = f" ({a / b:.2f})" if a and b else ""
                cells.append(f"{(f'{a:.0f}' if a else '-'):>10s} / {(f'{b:.0f}' if b else '-'):<8s}{ratio:7s}")
            print(f"{cfg:14s}{qd:4d}" + "".join(f"{x:>30s}" for x in cells))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "scaling.json"), "w") as f:
        json.dump(dict(samples=samples, medians=[dict(config=k[0], iodepth=k[1], variant=k[2], **v)
                                                 for k, v in sorted(med.items())]), f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
        return 0
    fig, axes = plt.subplots(1, len(FIELDS), figsize=(15, 4.5))
    styles = {"ours": "-", "c": "--"}
    colours = dict(zip(configs, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for ax, (field, label) in zip(axes, FIELDS):
        top = 0
        for cfg in configs:
            for v in ("ours", "c"):
                xs = [qd for qd in depths if field in med.get((cfg, qd, v), {})]
                ys = [med[(cfg, qd, v)][field] for qd in xs]
                if xs:
                    top = max(top, *ys)
                    ax.plot(xs, ys, styles[v], marker="o", color=colours[cfg],
                            label=f"{'rpcrdma_rs' if v == 'ours' else 'C rpcrdma'}, {cfg}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths)
        ax.set_xticklabels([str(d) for d in depths])
        ax.set_xlabel("queue depth (4 KiB random reads)")
        ax.set_title(label)
        # From zero, with room above the highest point: a line at the
        # top of the data must not sit on the frame.
        ax.set_ylim(0, top * 1.08 or 1)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("rpcrdma_rs against the C client, soft-RoCE under TCG (instructions are exact; IOPS are context)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "scaling.png"), dpi=100)
    print(f"chart: {os.path.join(args.out, 'scaling.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
