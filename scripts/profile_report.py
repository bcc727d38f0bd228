#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Prints what scripts/profile.sh measured (the PROFILE lines of its run).

Usage: profile_report.py [--lines KO [--inside NAME [--under CALLEE]]]
FILE (the run's output, kept under the cache). With --lines, the
transport's own instructions per RPC are also given by source line and
by the function inlined there, mapped through KO, a build of the
profiled module's code with line tables. With --inside, only the
function(s) whose symbol contains NAME, by the function each instruction
was inlined from, one level below NAME's own code and at its innermost;
with --under, only what was inlined from CALLEE into NAME, one level
below CALLEE's code.
"""

import bisect
import collections
import json
import re
import statistics
import subprocess
import sys

BUCKETS = ("transport", "rxe", "kernel", "user")


def busy(r):
    """Samples not in the idle loop, per RPC, of one run."""
    return sum(r["samples"].get(k, 0) for k in BUCKETS) / r["rpcs"]


def ko_instructions(ko):
    """(sorted instruction addresses of KO's .text, {symbol: address})."""
    syms = {}
    out = subprocess.run(["nm", "--defined-only", ko], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tT":
            syms.setdefault(parts[2], int(parts[0], 16))
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", ko],
                         capture_output=True, text=True, check=True).stdout
    insns = [int(m.group(1), 16) for m in re.finditer(r"^\s*([0-9a-f]+):\t", out, re.M)]
    return sorted(insns), syms


def source_frames(ko, addrs):
    """{address: [(function, file:line), ...] innermost first} by addr2line."""
    inp = "".join(f"{a:x}\n" for a in addrs)
    out = subprocess.run(["addr2line", "-e", ko, "-a", "-f", "-i", "-C"], input=inp,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    frames, cur = {}, None
    i = 0
    while i < len(out):
        if out[i].startswith("0x"):
            cur = int(out[i], 16)
            frames[cur] = []
            i += 1
            continue
        fn = out[i]
        loc = out[i + 1] if i + 1 < len(out) else "?"
        loc = re.sub(r" \(discriminator \d+\)", "", loc)
        loc = re.sub(r"^.*?/(rust/)", r"\1", loc)
        frames[cur].append((re.sub(r"::h[0-9a-f]{16}$", "", fn), loc))
        i += 2
    return frames


def short(fn):
    """A function name without its module paths."""
    return re.sub(r"\b(?:[A-Za-z_][A-Za-z0-9_]*::)+(?=[A-Za-z_<])", "", fn)


def insn_counts(rs, ko, name=""):
    """(runs of each instruction address of KO, instructions in symbols KO
    lacks): the runs' per-block counts of the transport's code, spread over
    the instructions of each block, for the symbols whose name contains
    NAME (all of them by default)."""
    insns, syms = ko_instructions(ko)
    per_insn = collections.Counter()
    missing = 0
    for r in rs:
        for key, (n, runs) in r.get("transport_blocks", {}).items():
            sym, off = key.rsplit("+", 1)
            if name not in sym:
                continue
            if sym not in syms:
                missing += n * runs
                continue
            i = bisect.bisect_left(insns, syms[sym] + int(off, 16))
            for a in insns[i:i + n]:
                per_insn[a] += runs
    return per_insn, missing


def own_frames(fr):
    """The frames of FR (innermost first) in this project's own files (not
    core's or the kernel crate's, which say less about what to change)."""
    return [i for i, (_, loc) in enumerate(fr) if not loc.startswith(("rust/library/", "rust/kernel/", "?"))]


def lines_report(rs, ko, top=45):
    """The transport's own instructions per RPC by source line."""
    rpcs = sum(r["rpcs"] for r in rs)
    if not any(r.get("transport_blocks") for r in rs):
        print("\nno per-block counts in this run (profile_client.py older than --lines)")
        return
    per_insn, missing = insn_counts(rs, ko)
    frames = source_frames(ko, sorted(per_insn))
    by_line, by_fn, chain_of = collections.Counter(), collections.Counter(), {}
    for a, runs in per_insn.items():
        fr = frames.get(a) or [("?", "?")]
        # The line is the innermost one of this project's own files.
        own = own_frames(fr)
        k = own[0] if own else 0
        loc = fr[k][1]
        by_line[loc] += runs
        by_fn[fr[k][0]] += runs
        chain_of.setdefault(loc, " <- ".join(short(f) for f, _ in fr[k:]))
    total = sum(per_insn.values())
    print(f"\nours: instructions per RPC by source line ({total / rpcs:.0f} mapped"
          f"{f', {missing / rpcs:.0f} in symbols the line build lacks' if missing else ''})")
    for loc, n in by_line.most_common(top):
        print(f"  {n / rpcs:7.1f}  {loc:38s} {chain_of[loc][:150]}")
    print("\nours: instructions per RPC by the function the code is from (inlined or not)")
    for fn, n in by_fn.most_common(top):
        print(f"  {n / rpcs:7.1f}  {short(fn)[:140]}")


def inside_report(rs, ko, name, under=None, top=40):
    """The transport's own instructions per RPC in the symbols whose name
    contains NAME: by the function inlined into them at the first level
    (what NAME's own code calls) and at the innermost one of this project's
    files, with the source line. With UNDER, only the instructions inlined
    from a function whose name contains UNDER, by what UNDER's code calls
    (one level below it)."""
    rpcs = sum(r["rpcs"] for r in rs)
    per_insn, _ = insn_counts(rs, ko, name)
    if not per_insn:
        print(f"\nno instruction counted in a symbol containing {name!r}")
        return
    frames = source_frames(ko, sorted(per_insn))
    first, inner = collections.Counter(), collections.Counter()
    for a, runs in per_insn.items():
        fr = frames.get(a) or []
        own = [fr[i] for i in own_frames(fr)]
        # Outermost frame: the symbol's own function (or UNDER); the one
        # inside it is what its code called (and the compiler inlined).
        if under is not None:
            at = [i for i, f in enumerate(own) if under in short(f[0])]
            if not at:
                continue
            own = own[:at[-1] + 1]
        if not own:
            first["(no line of this project)"] += runs
            inner["(no line of this project)"] += runs
            continue
        first[short(own[-2][0]) if len(own) > 1 else f"(its own code) {own[-1][1]}"] += runs
        inner[f"{short(own[0][0])[:70]} @ {own[0][1]}"] += runs
    what = f"'{name}'" if under is None else f"'{under}' in '{name}'"
    total = sum(first.values())
    print(f"\nours: inside {what}, {total / rpcs:.0f} instructions per RPC, by what its own code calls")
    for k, n in first.most_common(top):
        print(f"  {n / rpcs:7.1f}  {k[:120]}")
    print(f"\nours: inside {what}, by the innermost function and line")
    for k, n in inner.most_common(top):
        print(f"  {n / rpcs:7.1f}  {k[:140]}")


def main(path, lines_ko=None, inside=None, under=None):
    runs = collections.defaultdict(list)
    for line in open(path, errors="replace"):
        if line.startswith("PROFILE "):
            s = json.loads(line[8:])
            if s["rpcs"]:
                runs[s["variant"]].append(s)
    if not runs:
        print("no profile was taken")
        return 1
    # Samples per thousand RPCs, over all rounds of a variant.
    per = {}
    for v, rs in runs.items():
        rpcs = sum(r["rpcs"] for r in rs) / 1000
        tot = collections.Counter()
        syms = {"transport": collections.Counter(), "kernel": collections.Counter()}
        entries = collections.Counter()
        for r in rs:
            tot.update(r["samples"])
            for k in syms:
                syms[k].update(r[f"{k}_syms"])
            entries.update(r.get("transport_entries", {}))
        per[v] = dict(
            rpcs=rpcs * 1000, rounds=len(rs),
            b={k: tot.get(k, 0) / rpcs for k in BUCKETS + ("idle",)},
            syms={k: {s: n / rpcs for s, n in c.items()} for k, c in syms.items()},
            entries={s: n / rpcs for s, n in entries.items()},
            cpu=sorted(r["cpu_us_per_rpc"] for r in rs if r["cpu_us_per_rpc"]),
            iops=sorted(r["iops"] for r in rs))
    order = ("ours", "old", "c")
    names = [v for v in order if v in per] + [v for v in per if v not in order]
    others = [v for v in names if v != "c"] if "c" in per else []
    qd = sorted({r.get("iodepth", 64) for rs in runs.values() for r in rs})
    print(f"\nsamples per 1000 RPCs (4 KiB random reads, queue depth {'/'.join(map(str, qd))}), all rounds")
    print(f"{'':12s}" + "".join(f"{v:>10s}" for v in names) + "".join(f"{v + '/c':>10s}" for v in others))
    rows = [(k, lambda p, k=k: p["b"][k]) for k in BUCKETS]
    rows.append(("not idle", lambda p: sum(p["b"][k] for k in BUCKETS)))
    # Call chains: samples with the transport anywhere on the stack.
    rows.append(("in transport", lambda p: sum(p["entries"].values())))
    rows.append(("idle", lambda p: p["b"]["idle"]))
    for label, f in rows:
        vals = {v: f(per[v]) for v in names}
        ratios = "".join(f"{vals[v] / vals['c']:10.3f}" if vals["c"] else f"{'-':>10s}" for v in others)
        print(f"{label:12s}" + "".join(f"{vals[v]:10.2f}" for v in names) + ratios)
    # The host's speed drifts between runs, and every count per RPC with
    # it: the transport's share of the busy samples, and ratios taken
    # within one round (the variants back to back), drift less.
    print()
    for v in names:
        p = per[v]
        share = p["b"]["transport"] / sum(p["b"][k] for k in BUCKETS)
        shares = [r["samples"].get("transport", 0) / r["rpcs"] / busy(r) for r in runs[v]]
        print(f"{v}: the transport is {100 * share:.1f} % of the busy samples"
              f" (runs: {', '.join(f'{100 * x:.1f}' for x in shares)})")
    for v in others:
        c_by_round = {r["round"]: r for r in runs["c"]}
        rs = [busy(r) / busy(c_by_round[r["round"]]) for r in runs[v] if r["round"] in c_by_round]
        if rs:
            print(f"{v}/c busy samples per RPC, per round: {', '.join(f'{x:.3f}' for x in rs)}"
                  f" (median {statistics.median(rs):.3f})")
    for v in names:
        p = per[v]
        print(f"{v}: {p['rounds']} runs, {p['rpcs']:.0f} RPCs, IOPS {', '.join(f'{x:.0f}' for x in p['iops'])},"
              f" CPU us/RPC {', '.join(f'{x:.0f}' for x in p['cpu'])}")
    # Instruction counts (testbed.sh --count-insns): per RPC, medians of
    # the runs, and the transport's own by function over all runs.
    counted = [v for v in names if any(r.get("transport_insns_per_rpc") for r in runs[v])]
    if counted:
        print("\ninstructions per RPC (medians of the runs)")
        print(f"{'':22s}" + "".join(f"{v:>12s}" for v in counted))
        for field, label in (("insns_per_rpc", "client"), ("server_insns_per_rpc", "server"),
                             ("transport_insns_per_rpc", "transport's own code")):
            cells = []
            for v in counted:
                xs = [r[field] for r in runs[v] if r.get(field)]
                cells.append(f"{statistics.median(xs):12.0f}" if xs else f"{'-':>12s}")
            print(f"{label:22s}" + "".join(cells))
        for v in counted:
            rpcs = sum(r["rpcs"] for r in runs[v])
            fns = collections.Counter()
            for r in runs[v]:
                fns.update(r.get("transport_insns", {}))
            print(f"\n{v}: instructions per RPC by transport function")
            for s, n in fns.most_common(20):
                print(f"  {n / rpcs:8.1f}  {s[:110]}")
    # Every kernel function's instructions (testbed.sh
    # --count-kernel-blocks): where the rest of the kernel works more or
    # less per RPC with one transport than with the other.
    kins = {}
    for v in names:
        rpcs = sum(r["rpcs"] for r in runs[v])
        c = collections.Counter()
        for r in runs[v]:
            c.update(r.get("kernel_insns", {}))
        if c:
            total = sum(r.get("kernel_insns_total", 0) for r in runs[v]) / rpcs
            kins[v] = ({s: n / rpcs for s, n in c.items()}, total)
    for v in (o for o in others if o in kins and "c" in kins):
        (a, ta), (b, tb) = kins[v], kins["c"]
        diff = {s: a.get(s, 0) - b.get(s, 0) for s in set(a) | set(b)}
        print(f"\nkernel functions whose instructions per RPC differ most ({v} - c;"
              f" all kernel code {ta:.0f} vs {tb:.0f})")
        for s in sorted(diff, key=lambda s: -abs(diff[s]))[:40]:
            print(f"  {diff[s]:+8.1f}  {s[:90]} ({a.get(s, 0):.1f} vs {b.get(s, 0):.1f})")
    for v in names:
        t = per[v]["syms"]["transport"]
        print(f"\n{v}: transport functions (samples per 1000 RPCs)")
        for s, n in sorted(t.items(), key=lambda x: -x[1])[:15]:
            print(f"  {n:7.3f}  {s[:110]}")
    for v in names:
        t = per[v]["entries"]
        if t:
            print(f"\n{v}: in the transport and what it calls, by the function the kernel entered"
                  " (samples per 1000 RPCs)")
            for s, n in sorted(t.items(), key=lambda x: -x[1])[:10]:
                print(f"  {n:7.3f}  {s[:110]}")
    if others:
        a, b = per[others[0]]["syms"]["kernel"], per["c"]["syms"]["kernel"]
        print(f"\nkernel functions that differ most ({others[0]} - c, samples per 1000 RPCs)")
        for s in sorted(set(a) | set(b), key=lambda s: -abs(a.get(s, 0) - b.get(s, 0)))[:12]:
            print(f"  {a.get(s, 0) - b.get(s, 0):+7.3f}  {s} ({a.get(s, 0):.3f} vs {b.get(s, 0):.3f})")
    if lines_ko and "ours" in runs:
        if inside:
            inside_report(runs["ours"], lines_ko, inside, under)
        else:
            lines_report(runs["ours"], lines_ko)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    ko = inside = under = None
    if args[:1] == ["--lines"]:
        ko, args = args[1], args[2:]
        if args[:1] == ["--inside"]:
            inside, args = args[1], args[2:]
            if args[:1] == ["--under"]:
                under, args = args[1], args[2:]
    sys.exit(main(args[0], ko, inside, under))
