#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Prints what scripts/profile.sh measured (the PROFILE lines of its run).

Usage: profile_report.py [--calls KODIR] [--lines KO [--inside NAME
[--under CALLEE]]] FILE (the run's output, kept under the cache); or
profile_report.py --server WORKLOAD --lines KO [--inside NAME [--under
CALLEE]] FILE, FILE a `make server-bench SERVER_BENCH_PROFILE=1` run's
output: our server's own instructions per RPC in WORKLOAD (its c@ours
runs, `server_blocks`) by source line, as --lines gives the client's. With
--calls, the transports' calls out of their own code by callee, from the
modules and kernel image the run used, copied to KODIR (ours.ko, c.ko,
old.ko, vmlinux): the own code with the calls a transport could as well
do inline (XDR helpers, memory routines, locks, Rust support code) added,
for both transports alike, and their own code by kind of instruction
(stack traffic, branches, calls...). With instruction counts, the
transports' own code is also given by path (sending, registering,
receiving...), C's beside the SUNRPC XDR calls that code its transport
header. With --lines, the transport's own instructions per RPC are also
given by source line and by the function inlined there, mapped through
KO, a build of the profiled module's code with line tables. With
--inside, only the function(s) whose symbol contains NAME, by the
function each instruction was inlined from, one level below NAME's own
code and at its innermost; with --under, only what was inlined from
CALLEE into NAME, one level below CALLEE's code.
"""

import bisect
import collections
import json
import os
import re
import statistics
import subprocess
import sys

BUCKETS = ("transport", "rxe", "kernel", "user")


def busy(r):
    """Samples not in the idle loop, per RPC, of one run."""
    return sum(r["samples"].get(k, 0) for k in BUCKETS) / r["rpcs"]


_KO_INSNS = {}


def ko_instructions(ko):
    """(sorted instruction addresses of KO's .text, {symbol: address})."""
    if ko not in _KO_INSNS:
        _KO_INSNS[ko] = _ko_instructions(ko)
    return _KO_INSNS[ko]


def _ko_instructions(ko):
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
    # Code without line tables (the C helpers): addr2line names the nearest
    # symbol of any kind; the function holding the address is the one.
    starts = sorted((a, n) for n, a in ko_instructions(ko)[1].items())
    for a, fr in frames.items():
        if fr and fr[0][1].startswith("??"):
            k = bisect.bisect_right(starts, (a, "\uffff")) - 1
            if k >= 0:
                fr[0] = (starts[k][1], fr[0][1])
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
        if loc.startswith("??"):
            # No line: each function on a line of its own.
            loc = f"?? {short(fr[k][0])}"
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


# Callees whose work is the transport's own, done out of line: the
# generic routines a transport may as well do inline (XDR stream helpers,
# memory and string routines, lock primitives). Calls into SUNRPC's request
# machinery, the RDMA core, DMA mapping, the scheduler or the clock are
# interfaces, not counted. The Rust kernel crate and core (mangled
# symbols) and the C helpers Rust calls for inline C functions are counted
# with the transport, and so is what they call of this list.
LIBRARY = re.compile(r"^(xdr_|mem(cpy|set|move|cmp)$|__mem|str|_raw_|__raw_|_copy_)")


def rust_support(sym):
    return sym.startswith("_R") or sym.startswith("rust_helper_")


def counted_callee(sym):
    return rust_support(sym) or bool(LIBRARY.match(sym))


_DISASM = {}


def disassemble(path, syms=None):
    """{function: [(offset, callee or None)]}: each instruction of the
    functions in `path` (an object or the kernel image; only `syms` if
    given), and for a call or jump, the named function it goes to outside
    `path` (a module's undefined symbols), or in the kernel image any."""
    key = (path, tuple(syms or ()))
    if key in _DISASM:
        return _DISASM[key]
    args = ["objdump", "-dr", "--no-show-raw-insn", "-w", path]
    args += [f"--disassemble={x}" for x in syms or ()]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    undefined = None
    if path.endswith(".ko"):
        nm = subprocess.run(["nm", "-u", path], capture_output=True, text=True, check=True).stdout
        undefined = {f.split()[-1] for f in nm.splitlines() if f.strip()}
    funcs, cur, base = {}, None, 0
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
        if m:
            base, cur = int(m.group(1), 16), funcs.setdefault(m.group(2), [])
            continue
        m = re.match(r"^\s*([0-9a-f]+):\s+(\S+)", line)
        if cur is None or not m:
            continue
        callee = None
        if m.group(2).startswith(("call", "jmp")):
            if undefined is not None:
                r = re.search(r"R_X86_64_(?:PLT32|PC32)\s+(\S+)$", line)
                t = re.sub(r"[-+]0x[0-9a-f]+$", "", r.group(1)) if r else None
                callee = t if t in undefined else None
            else:
                r = re.search(r"\s[0-9a-f]+ <([^>+]+)>$", line)
                callee = r.group(1) if r else None
        cur.append((int(m.group(1), 16) - base, callee))
    _DISASM[key] = funcs
    return funcs


def calls_from(funcs, blocks):
    """Calls per callee made by the code of `funcs` whose blocks ran as
    `blocks` ({"symbol+0xOFFSET": [instructions, runs]}): each block's
    runs for each call it holds. Also the runs of blocks that could not be
    placed (code patched at run time, or another build)."""
    c, lost = collections.Counter(), 0
    for key, (n, runs) in blocks.items():
        f, off = key.rsplit("+", 1)
        ins = funcs.get(f)
        offs = [o for o, _ in ins] if ins else []
        k = bisect.bisect_left(offs, int(off, 16))
        if k >= len(offs) or offs[k] != int(off, 16):
            lost += runs
            continue
        for _, callee in ins[k:k + n]:
            if callee:
                c[callee] += runs
    return c, lost


def calls_report(runs, kodir):
    """The transport's calls out of its own code, per RPC, by callee, with
    what each call costs (the callee's instructions over its entries, all
    callers alike), and the transport's own instructions with those of
    the counted callees (LIBRARY, Rust support) added: what each transport
    costs when the other does the same work inline."""
    kos = {"ours": "ours.ko", "old": "old.ko", "c": "c.ko"}
    totals = {}
    for v, rs in runs.items():
        ko = f"{kodir}/{kos.get(v, v + '.ko')}"
        if not all(r.get("kernel_calls") for r in rs) or not os.path.exists(ko):
            continue
        rpcs = sum(r["rpcs"] for r in rs)
        calls, lost, cost, rblocks = collections.Counter(), 0, collections.defaultdict(lambda: [0, 0]), {}
        for r in rs:
            c, n = calls_from(disassemble(ko), r["transport_blocks"])
            calls.update(c)
            lost += n
            for k, (i, e) in r["kernel_calls"].items():
                cost[k.split(" [")[0]][0] += i
                cost[k.split(" [")[0]][1] += e
            for k, (n_, runs_) in r.get("rust_blocks", {}).items():
                b = rblocks.setdefault(k, [n_, 0])
                b[1] += runs_
        vml = f"{kodir}/vmlinux"

        def per_call(sym):
            i, e = cost.get(sym, (0, 0))
            return i / e if e else 0.0

        def counted_cost(sym, depth=0):
            """Instructions per call of `sym` counted with the transport:
            its own, and for Rust support what it calls of the counted.
            x86's memcpy and memset jump to memcpy_orig and memset_orig
            on a CPU without fast short REP MOVSB (QEMU's TCG CPU): every
            entry goes on there, and costs that routine's average call."""
            own = per_call(sym)
            tail, entries = f"{sym}_orig", cost.get(sym, (0, 0))[1]
            # As many entries, but for calls under way when the counters
            # were read at the start or the end.
            if tail in cost and entries and abs(cost[tail][1] - entries) <= entries // 1000 + 8:
                own += per_call(tail)
            if not rust_support(sym) or depth > 3 or not os.path.exists(vml):
                return own
            mine = {k: b for k, b in rblocks.items() if k.rsplit("+", 1)[0] == sym}
            inner, _ = calls_from(disassemble(vml, [sym]), mine)
            entries = cost.get(sym, (0, 0))[1]
            for t, n in inner.items():
                if counted_callee(t) and entries:
                    own += n / entries * counted_cost(t, depth + 1)
            return own

        own = statistics.median(r["transport_insns_per_rpc"] for r in rs)
        print(f"\n{v}: calls out of the transport per RPC (* counted with it; insns/call: the callee's"
              " average over all its callers)")
        added = 0.0
        for t, n in calls.most_common():
            if n / rpcs < 0.01:
                continue
            yes = counted_callee(t)
            each = counted_cost(t) if yes else per_call(t)
            if yes:
                added += n / rpcs * each
            print(f"  {'*' if yes else ' '} {n / rpcs:6.2f} calls x {each:6.1f} = {n / rpcs * each:7.1f}  {t[:90]}")
        if lost:
            print(f"  ({lost / rpcs:.2f} block runs per RPC not found in {ko})")
        totals[v] = (own, added)
        print(f"{v}: own code {own:.0f} + counted callees {added:.0f} = {own + added:.0f} instructions per RPC")
        # A copy's cost depends on its length, which the average over all
        # callers (most of them copying pages) does not know: the memory
        # routines' whole-kernel totals per RPC bound it from the other side.
        mem = {t: cost[t][0] / rpcs for t in ("memcpy_orig", "memset_orig") if t in cost}
        if mem:
            print(f"{v}: memory routines, all callers, per RPC: "
                  + ", ".join(f"{t} {n:.0f}" for t, n in mem.items()))
    if "c" in totals:
        for v in (x for x in totals if x != "c"):
            a, b = sum(totals[v]), sum(totals["c"])
            print(f"{v}/c own code with counted callees: {a:.0f} / {b:.0f} = {a / b:.2f}"
                  f" (own code alone {totals[v][0] / totals['c'][0]:.2f})")


# The transports' own code by the part of an RPC's life it serves, for
# comparing like with like. rpcrdma_rs by substrings of its symbols (the
# first that matches), the C client by function name. C codes its
# transport header with SUNRPC's XDR helpers, which its own count leaves
# out: SUNRPC's own use of them (the RPC message) is the same with either
# transport, so the difference between the two runs' totals is C's header
# work, shown beside its send (encoding) and receive (decoding) paths.
PATHS = ("send", "register", "receive", "invalidate", "send completion", "slots")
OURS_PATHS = (
    ("send_call", "send"), ("send_request", "send"), ("post_send", "send"), ("sync_for_device", "send"),
    ("send_one", "send"), ("register_one", "register"), ("dma_map_sg", "register"),
    ("5reply", "receive"), ("8received", "receive"), ("recv_done", "receive"), ("lookup_and_pin", "receive"),
    ("complete_and_unpin", "receive"), ("sync_for_cpu", "receive"), ("take_request", "receive"),
    ("9work_done", "receive"),
    ("invalidate", "invalidate"), ("FrMr5unmap", "invalidate"), ("dma_unmap_sg", "invalidate"),
    ("send_done", "send completion"),
    ("alloc_slot", "slots"), ("free_slot", "slots"), ("buf_alloc", "slots"), ("buf_free", "slots"),
)
C_PATHS = {
    "send": ("rpcrdma_marshal_req", "rpcrdma_prepare_send_sges", "frwr_send", "xprt_rdma_send_request",
             "rpcrdma_prepare_head_iov", "rpcrdma_sendctx_get_locked", "trace_xprtrdma_marshal",
             "__rpcrdma_regbuf_dma_map"),
    "register": ("frwr_map", "rpcrdma_mr_prepare", "rpcrdma_convert_iovs", "encode_rdma_segment", "rpcrdma_mr_get"),
    "receive": ("rpcrdma_wc_receive", "rpcrdma_reply_handler", "rpcrdma_complete_rqst", "decode_write_list",
                "decode_write_chunk", "decode_reply_chunk", "decode_read_list", "rpcrdma_rep_resize",
                "rpcrdma_post_recvs", "trace_xprtrdma_post_recv", "rpcrdma_inline_fixup"),
    "invalidate": ("frwr_reminv", "frwr_mr_unmap", "frwr_unmap_async", "frwr_unmap_sync"),
    "send completion": ("rpcrdma_wc_send", "rpcrdma_sendctx_unmap", "rpcrdma_sendctx_dma_unmap"),
    "slots": ("xprt_rdma_alloc_slot", "rpcrdma_buffer_get", "xprt_rdma_allocate", "xprt_rdma_free",
              "xprt_rdma_free_slot", "rpcrdma_req_put", "rpcrdma_buffer_put", "rpcrdma_reply_put"),
}
C_XDR = {"send": ("xdr_reserve_space", "xdr_init_encode"), "receive": ("xdr_inline_decode", "xdr_init_decode")}


KINDS = ("stack loads/stores", "other loads/stores", "register moves, lea", "compares, tests, sets",
         "branches", "pushes/pops", "calls/returns", "atomics", "arithmetic, other")


def insn_kind(text):
    """The kind (KINDS) of the x86 instruction objdump printed as TEXT:
    stack traffic is what spills and values kept in memory cost."""
    op = text.split()[0] if text.split() else ""
    if op == "lock":
        return "atomics"
    if op in ("push", "pop"):
        return "pushes/pops"
    if op.startswith(("call", "ret")) or (op == "jmp" and "return_thunk" in text):
        return "calls/returns"
    if op.startswith("j"):
        return "branches"
    if op.startswith(("cmp", "test", "set", "cmov", "bt")):
        return "compares, tests, sets"
    if op.startswith(("mov", "lea", "xchg")):
        if "(%rsp)" in text:
            return "stack loads/stores"
        if "(" in text and not op.startswith("lea"):
            return "other loads/stores"
        return "register moves, lea"
    return "arithmetic, other"


def kinds_report(runs, kodir):
    """Each transport's own instructions per RPC by kind (KINDS), from
    the runs' per-block counts and the code of the modules they ran."""
    got = {}
    for v in ("ours", "old", "c"):
        ko = os.path.join(kodir, f"{v}.ko")
        if v not in runs or not os.path.exists(ko) or not any(r.get("transport_blocks") for r in runs[v]):
            continue
        per_insn, _ = insn_counts(runs[v], ko)
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", ko],
                             capture_output=True, text=True, check=True).stdout
        text = {int(m.group(1), 16): m.group(2) for m in re.finditer(r"^\s*([0-9a-f]+):\t(.*)$", out, re.M)}
        rpcs = sum(r["rpcs"] for r in runs[v])
        kinds = collections.Counter()
        for a, count in per_insn.items():
            kinds[insn_kind(text[a])] += count / rpcs
        got[v] = kinds
    if not got:
        return
    names = list(got)
    print("\nown instructions per RPC by kind (stack: the frame's spills and locals)")
    print(f"  {'':24s}" + "".join(f"{v:>8s}" for v in names))
    for k in KINDS + ("all",):
        vals = [sum(got[v].values()) if k == "all" else got[v].get(k, 0) for v in names]
        print(f"  {k:24s}" + "".join(f"{x:8.0f}" for x in vals))


def paths_report(runs):
    """The transports' own instructions per RPC by path (PATHS), C's with
    and without its header's XDR calls."""
    if "c" not in runs:
        return
    def per_path(rs, path_of):
        rpcs = sum(r["rpcs"] for r in rs)
        out = collections.Counter()
        for r in rs:
            for s, n in r.get("transport_insns", {}).items():
                out[path_of(s)] += n / rpcs
        return out
    def ours_path(s):
        return next((p for sub, p in OURS_PATHS if sub in s), "other")
    def c_path(s):
        return next((p for p, names in C_PATHS.items() if s in names), "other")
    def kernel(rs, fn):
        return sum(r.get("kernel_insns", {}).get(fn, 0) for r in rs) / sum(r["rpcs"] for r in rs)
    c = per_path(runs["c"], c_path)
    for v in (x for x in runs if x != "c" and any(r.get("transport_insns") for r in runs[x])):
        o = per_path(runs[v], ours_path)
        xdr = {p: sum(kernel(runs["c"], f) - kernel(runs[v], f) for f in fns) for p, fns in C_XDR.items()}
        print(f"\n{v} against c: own instructions per RPC by path (c's XDR: the SUNRPC helper calls"
              " coding c's transport header)")
        print(f"  {'':16s}{v:>8s}{'c':>8s}{'c XDR':>8s}{'c+XDR':>8s}{v + '-(c+XDR)':>16s}")
        tot = [0.0] * 3
        for p in PATHS + ("other",):
            a, b, x = o.get(p, 0), c.get(p, 0), xdr.get(p, 0)
            if a or b:
                tot = [tot[0] + a, tot[1] + b, tot[2] + x]
                print(f"  {p:16s}{a:8.0f}{b:8.0f}{x:8.0f}{b + x:8.0f}{a - b - x:+16.0f}")
        print(f"  {'all':16s}{tot[0]:8.0f}{tot[1]:8.0f}{tot[2]:8.0f}{tot[1] + tot[2]:8.0f}"
              f"{tot[0] - tot[1] - tot[2]:+16.0f}  ({tot[0] / (tot[1] + tot[2]):.2f} x c+XDR)")


def main(path, lines_ko=None, inside=None, under=None, kodir=None):
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
    # Without perf (PROFILE_PERF=0) there are only the counts.
    sampled = any(sum(r["samples"].values()) for rs in runs.values() for r in rs)
    if not sampled:
        print("\nno samples taken (PROFILE_PERF=0): the counts only")
    else:
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
    # less per RPC with one transport than with the other. Per function,
    # the median of the runs: a guest's first run pays for warming up
    # (page cache, page faults) and the background's work comes when it
    # comes, in one run or another; a mean would charge either to the
    # variant it fell on. From every function entered (kernel_calls), not
    # only the most counted.
    kins = {}
    for v in names:
        per_run = []
        for r in runs[v]:
            calls = r.get("kernel_calls")
            c = {s: n[0] for s, n in calls.items()} if calls else r.get("kernel_insns", {})
            per_run.append({s: n / r["rpcs"] for s, n in c.items()})
        if any(per_run):
            fns = set().union(*per_run)
            med = {s: statistics.median(d.get(s, 0) for d in per_run) for s in fns}
            total = statistics.median(r.get("kernel_insns_total", 0) / r["rpcs"] for r in runs[v])
            kins[v] = (med, total)
    for v in (o for o in others if o in kins and "c" in kins):
        (a, ta), (b, tb) = kins[v], kins["c"]
        diff = {s: a.get(s, 0) - b.get(s, 0) for s in set(a) | set(b)}
        print(f"\nkernel functions whose instructions per RPC differ most ({v} - c, medians of the runs;"
              f" all kernel code {ta:.0f} vs {tb:.0f})")
        for s in sorted(diff, key=lambda s: -abs(diff[s]))[:40]:
            print(f"  {diff[s]:+8.1f}  {s[:90]} ({a.get(s, 0):.1f} vs {b.get(s, 0):.1f})")
        mods = collections.Counter()
        for s, d in diff.items():
            mods[s.split(" [")[1].rstrip("]") if " [" in s else "kernel image"] += d
        print(f"  by module ({v} - c): " + ", ".join(f"{m} {d:+.0f}" for m, d in mods.most_common() if abs(d) >= 1))
    for v in names if sampled else ():
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
    if others and sampled:
        a, b = per[others[0]]["syms"]["kernel"], per["c"]["syms"]["kernel"]
        print(f"\nkernel functions that differ most ({others[0]} - c, samples per 1000 RPCs)")
        for s in sorted(set(a) | set(b), key=lambda s: -abs(a.get(s, 0) - b.get(s, 0)))[:12]:
            print(f"  {a.get(s, 0) - b.get(s, 0):+7.3f}  {s} ({a.get(s, 0):.3f} vs {b.get(s, 0):.3f})")
    paths_report(runs)
    if kodir:
        calls_report(runs, kodir)
        kinds_report(runs, kodir)
    if lines_ko and "ours" in runs:
        if inside:
            inside_report(runs["ours"], lines_ko, inside, under)
        else:
            lines_report(runs["ours"], lines_ko)
    return 0


def server_runs(path, workload, variant="c@ours"):
    """The runs of VARIANT in WORKLOAD of a server-bench output, with our
    server's blocks where the client's reports look for them."""
    rs = []
    with open(path) as f:
        for line in f:
            if not line.startswith("BENCH "):
                continue
            r = json.loads(line[len("BENCH "):])
            if r.get("variant") == variant and r.get("workload") == workload and r.get("server_blocks"):
                rs.append({"rpcs": r["rpcs"], "transport_blocks": r["server_blocks"]})
    return rs


def server_main(path, workload, ko, inside=None, under=None):
    rs = server_runs(path, workload)
    if not rs:
        print(f"no c@ours run of {workload!r} with server_blocks in {path} (SERVER_BENCH_PROFILE=1)")
        return 1
    if inside:
        inside_report(rs, ko, inside, under)
    else:
        lines_report(rs, ko)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    ko = inside = under = kodir = server = None
    if args[:1] == ["--server"]:
        server, args = args[1], args[2:]
    if args[:1] == ["--calls"]:
        kodir, args = args[1], args[2:]
    if args[:1] == ["--lines"]:
        ko, args = args[1], args[2:]
        if args[:1] == ["--inside"]:
            inside, args = args[1], args[2:]
            if args[:1] == ["--under"]:
                under, args = args[1], args[2:]
    if server:
        if not ko:
            sys.exit("--server needs --lines KO (a RDMARS_DEBUGINFO=1 build of the run's module)")
        sys.exit(server_main(args[0], server, ko, inside, under))
    sys.exit(main(args[0], ko, inside, under, kodir))
