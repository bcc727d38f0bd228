#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The client side of scripts/profile.sh, run in the client guest.

Where the client's CPU goes per RPC, for rpcrdma_rs and the in-tree C
client in turn: 4 KiB random reads at queue depth 64 (the benchmark's IOPS
workload; PROFILE_IODEPTH=1 for the latency one; PROFILE_WORKLOAD=randwrite
for O_DIRECT writes, =getattr for GETATTRs on a noac mount), through bench_client.py's
module loading, mount and fio, sampled with ``perf record -a -g`` for the
whole job. Each run prints one
line ``PROFILE <json>``: the RPC count, and the samples by where they
landed (the transport module, rdma_rxe, the rest of the kernel, user space,
the idle loop) and by function within the transport and within the kernel.
From the call chains, also the samples taken anywhere inside the
transport's code and what it called (rxe's post_send, memory registration,
the copies...), by the transport function the kernel entered it through.
When the testbed counts instructions (it does for make profile), also the
instructions executed per RPC by both guests and in the transport's own
code, the latter by function: exact where the samples are statistics;
and the instructions of every kernel function, for what the transport
makes the rest of the kernel do.

Under TCG the guest's sampling timer runs at the tick (some 250 samples a
second, whatever -F asks), and a sample lands on the translation block
after the one that took the time; long runs and whole functions are what
such a profile resolves.
"""

import collections
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("BENCH_RUNTIME", "30")
import bench_client as bc  # noqa: E402  (reads its settings at import)

ROUNDS = int(os.environ.get("PROFILE_ROUNDS", "2"))
VARIANTS = os.environ.get("PROFILE_VARIANTS", "ours,c").split(",")
IODEPTH = int(os.environ.get("PROFILE_IODEPTH", "64"))
# randread (4 KiB random reads at IODEPTH), randwrite (4 KiB O_DIRECT
# random writes at IODEPTH: Read chunks) or getattr (stat() on a noac
# mount: small inline calls, no chunk).
WORKLOAD = os.environ.get("PROFILE_WORKLOAD", "randread")
PERF_DATA = "/tmp/profile.perf"
# PROFILE_PERF=0: no sampling, only the counts. perf's own work (the
# call-chain unwinding at each sample, writing perf.data) comes per
# second, not per RPC: with it, a variant that ran fewer RPCs a second
# counts more kernel instructions per RPC that neither transport caused.
PERF = os.environ.get("PROFILE_PERF", "1") != "0"
# What a 1-vCPU guest runs when it has nothing to do: the halt.
IDLE = {"pv_native_safe_halt", "native_safe_halt", "default_idle", "acpi_safe_halt"}
TOP = 150
KERNEL_TOP = 600


def rust_support(sym):
    """True for the kernel image's Rust support code: the kernel crate and
    core (mangled Rust symbols) and the C helpers Rust calls for inline C
    functions."""
    return sym.startswith("_R") or sym.startswith("rust_helper_")


def where(dso, variant):
    """The bucket a sample's DSO goes in."""
    if dso == f"[{bc.transport_module(variant)}]":
        return "transport"
    if dso == "[rdma_rxe]":
        return "rxe"
    if dso.startswith("[") and dso != "[unknown]" and dso != "[vdso]":
        return "kernel"
    return "user"


def samples(script_out):
    """The samples of ``perf script -F ip,sym,dso`` output with call chains:
    for each, its frames (dso, symbol) from the leaf outwards."""
    frames = []
    for line in script_out.splitlines():
        f = line.split()
        if not f:
            if frames:
                yield frames
            frames = []
            continue
        if len(f) < 2:
            continue
        dso = f[-1].strip("()")
        sym = f[1] if len(f) >= 3 else "[unknown]"
        frames.append((dso, sym))
    if frames:
        yield frames


def profile(variant, rnd):
    bc.use_module(variant)
    bc.mount(variant, "noac" if WORKLOAD == "getattr" else "")
    perf = None
    if PERF:
        perf = subprocess.Popen(
            ["perf", "record", "-a", "-g", "-F", "4999", "-q", "-o", PERF_DATA],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # perf reads /proc/kallsyms and every process's maps as it starts:
        # tens of millions of instructions to keep out of the counts.
        time.sleep(5)
    try:
        # The transport's instructions by function over the job alone (not
        # the mount's connection setup or the unmount's teardown), and for
        # fio within its I/O (not its start-up and exit; see bc.fio).
        m = bc.Meter(blocks=True)
        if WORKLOAD == "getattr":
            with m:
                r = {"iops": bc.getattr_loop(bc.RUNTIME) / bc.RUNTIME}
        else:
            r = bc.fio(f"qd{IODEPTH}", WORKLOAD, "4k", IODEPTH, "bench.dat", meter=m)
        blocks0, blocks1 = m.blocks0, m.blocks1
        counted = bc.instructions_by_function(blocks0, blocks1)
        entered = bc.entries_by_function(blocks0, blocks1)
    finally:
        if perf:
            perf.send_signal(2)
            perf.wait(timeout=120)
    bc.umount()
    # The transport's own functions, and every kernel function (a module's
    # named "symbol [module]").
    module = bc.transport_module(variant)
    # Per block of the transport's own code, for a profile by source line.
    blocks = bc.blocks_by_offset(blocks0, blocks1, module) if blocks1 else {}
    # ... and of the Rust kernel crate and its C helpers, built into the
    # kernel image: what the transport calls there is counted with it
    # (scripts/profile_report.py, "calls out of the transport").
    rust_blocks = bc.blocks_by_offset(blocks0, blocks1, "", keep=rust_support) if blocks1 else {}
    insns = collections.Counter({s: n for (mod, s), n in counted.items() if mod == module})

    def key(mod, s):
        return f"{s} [{mod}]" if mod else s

    kernel_insns = collections.Counter({key(mod, s): n for (mod, s), n in counted.items()})
    kernel_entries = {key(mod, s): n for (mod, s), n in entered.items()}
    out = ""
    if perf:
        out = bc.sh(f"perf script -i {PERF_DATA} -F ip,sym,dso", timeout=600).stdout
        os.unlink(PERF_DATA)
    buckets = collections.Counter()
    syms = {"transport": collections.Counter(), "kernel": collections.Counter()}
    entries = collections.Counter()
    for frames in samples(out):
        dso, sym = frames[0]
        b = where(dso, variant)
        if b == "kernel" and sym in IDLE:
            b = "idle"
        buckets[b] += 1
        if b in syms:
            syms[b][sym] += 1
        # The outermost transport frame: where the kernel called in.
        inside = [s for d, s in frames if where(d, variant) == "transport"]
        if inside:
            entries[inside[-1]] += 1
    print("PROFILE " + json.dumps(dict(
        variant=variant, round=rnd, iodepth=IODEPTH, workload=WORKLOAD, rpcs=m.rpcs, iops=r["iops"],
        cpu_us_per_rpc=m.cpu_us_per_rpc(), samples=dict(buckets),
        transport_syms=dict(syms["transport"].most_common(TOP)),
        transport_entries=dict(entries.most_common(TOP)),
        kernel_syms=dict(syms["kernel"].most_common(TOP)),
        # Instructions executed in the transport module's own code, by
        # function (testbed.sh --count-insns; empty without it).
        transport_insns=dict(insns.most_common(TOP)),
        # ... and by block: {"symbol+0xOFFSET": [instructions, runs]}.
        transport_blocks=blocks,
        # And in every kernel function (testbed.sh --count-kernel-blocks).
        kernel_insns=dict(kernel_insns.most_common(KERNEL_TOP)),
        # Every kernel function's instructions and entries, for the cost of
        # one call of those the transport calls ({"symbol [module]":
        # [instructions, entries]}), and the blocks of the kernel image's
        # Rust support code, for what it calls in turn.
        kernel_calls={k: [kernel_insns.get(k, 0), n] for k, n in kernel_entries.items()},
        rust_blocks=rust_blocks,
        kernel_insns_total=sum(kernel_insns.values()), **m.counted()), sort_keys=True), flush=True)


def main():
    bc.log(f"profile: {VARIANTS}, {ROUNDS} rounds of {bc.RUNTIME} s at queue depth {IODEPTH}")
    # The guest's timer caps the rate anyway; do not let perf throttle it
    # further while the guest is busy.
    for knob, val in (("perf_cpu_time_max_percent", "0"), ("perf_event_paranoid", "-1")):
        with open(f"/proc/sys/kernel/{knob}", "w") as f:
            f.write(val)
    bc.no_thp()
    bc.make_data()
    failures = 0
    for rnd in range(ROUNDS):
        for variant in bc.rotation(VARIANTS, rnd):
            bc.log(f"round {rnd + 1}: {variant}")
            try:
                profile(variant, rnd)
            except Exception as e:  # one failed run must not hide the others
                failures += 1
                bc.log(f"{variant} failed: {e}")
                bc.sh("umount -f " + bc.MNT, check=False)
    bc.use_module("none")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
