#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The benchmark's client side, run in the client guest by scripts/bench.sh.

Measures, against the same server guest and the same tmpfs export:

* ``ours``: NFS over rpcrdma_rs,
* ``c``:    NFS over the in-tree C rpcrdma, loaded in this guest instead,
* ``tcp``:  NFS over TCP on the same virtual link,

and the raw RDMA ceiling between the guests with perftest (ib_write_bw,
ib_read_bw, ib_send_lat over rxe). The variants are interleaved: each
repetition runs all of them, in an order rotated from the previous one.

scripts/ab.sh uses it too, with the variants ``old`` and ``new`` (two
builds of rpcrdma_rs, loaded from $AB_DIR/old.ko and new.ko) and ``c``,
only the 4 KiB workloads (BENCH_WORKLOADS=4k) and no perftest.

scripts/server-bench.sh pairs clients with servers: a variant
``CLIENT@SERVER`` has the server guest serve with ``ours`` (rpcrdma_rs,
``server=1``) or ``c`` (the in-tree svcrdma) and this guest mount with
``c``, ``ours`` (defaults: Version Two with our server), ``ours8k``
(``max_inline_read=8192``: 4 KiB READ replies inline on Version Two) or
``ours1`` (``versions=1``).

Every measurement is printed as one line ``BENCH <json>``; the host turns
them into the table, the JSON file and the chart (scripts/bench_report.py).
"""

import bisect
import collections
import glob
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time

SERVER = os.environ.get("RDMARS_SERVER4", "198.18.0.1")
SHARE = "/run/share"
MNT = "/mnt/bench"
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
RUNTIME = int(os.environ.get("BENCH_RUNTIME", "10"))
FILE_MB = int(os.environ.get("BENCH_FILE_MB", "64"))
SMALL_FILES = int(os.environ.get("BENCH_SMALL_FILES", "200"))
VARIANTS = os.environ.get("BENCH_VARIANTS", "ours,c,tcp").split(",")
# "all"; "4k": only the 4 KiB workloads, no perftest; "ab": the 4 KiB
# workloads and the larger shapes (see `shapes`), no perftest; "server":
# the 4 KiB workloads and 1 MiB reads, no perftest.
WORKLOADS = os.environ.get("BENCH_WORKLOADS", "all")
# Entries of the directory the "ab" READDIR workload lists.
DIR_ENTRIES = int(os.environ.get("BENCH_DIR_ENTRIES", "2000"))
AB_DIR = os.environ.get("AB_DIR", "")
COMMON = "vers=3,nolock,rsize=1048576,wsize=1048576,retry=0"
RDMA_OPTS = "proto=rdma,port=20049," + COMMON
MOUNT_OPTS = {
    "ours": RDMA_OPTS,
    "c": RDMA_OPTS,
    "tcp": "proto=tcp," + COMMON,
    "old": RDMA_OPTS,
    "new": RDMA_OPTS,
}
USER_HZ = os.sysconf("SC_CLK_TCK")


def log(msg):
    print("# " + msg, flush=True)


def emit(**sample):
    print("BENCH " + json.dumps(sample, sort_keys=True), flush=True)


def sh(cmd, check=True, timeout=600):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd!r} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r


def server_cmd(cmd, timeout=300):
    """Runs a command of scripts/guest/init.sh's loop in the server guest."""
    cid = f"{os.getpid()}.{random.randrange(1 << 30)}"
    tmp = f"{SHARE}/cmd.{cid}.tmp"
    with open(tmp, "w") as f:
        f.write(cmd + "\n")
    os.rename(tmp, f"{SHARE}/cmd.{cid}")
    res = f"{SHARE}/res.{cid}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(res):
            with open(res) as f:
                out = f.read()
            os.unlink(res)
            return out
        time.sleep(0.2)
    raise RuntimeError(f"server command {cmd!r} timed out")


# What serves NFS over RDMA in the server guest now (see serve_with).
SERVING = [os.environ.get("RDMARS_SERVER_MODULE", "c")]
# The client side of a CLIENT@SERVER variant: rpcrdma_rs's parameters.
OURS_PARAMS = {"ours": "", "ours8k": " max_inline_read=8192", "ours1": " versions=1"}


def serve_with(server):
    """Has the server guest serve NFS over RDMA with `server` ("ours" or
    "c"), if it does not already."""
    if SERVING[0] == server:
        return
    out = server_cmd(f"serve-with {server}")
    if "rc=0" not in out:
        raise RuntimeError(f"server serve-with {server}: {out}")
    SERVING[0] = server


def use_module(variant, slots=None):
    """Leaves exactly the client transport of `variant` loaded, with
    `slots` request slots per connection if given (else the default); for
    a CLIENT@SERVER variant, the server guest serving with SERVER."""
    sh("umount -f " + MNT, check=False)
    for m in ("rpcrdma_rs", "rpcrdma"):
        sh("rmmod " + m, check=False)
    if "@" in variant:
        client, server = variant.split("@")
        serve_with(server)
        if client == "c":
            use_module("c", slots)
        else:
            sh("modprobe rpcrdma_rs" + OURS_PARAMS[client])
            count_module("rpcrdma_rs")
        return
    if variant == "ours":
        sh("modprobe rpcrdma_rs" + (f" slot_table_entries={slots}" if slots else ""))
    elif variant == "c":
        sh("modprobe --ignore-install rpcrdma")
        # The C client's slot count is a sunrpc sysctl, read at mount.
        with open("/proc/sys/sunrpc/rdma_slot_table_entries", "w") as f:
            f.write(f"{slots or 128}\n")
    elif variant in ("old", "new"):
        # A build of rpcrdma_rs outside the guest's module tree: insmod
        # does not load what it depends on.
        sh("modprobe -a ib_core rdma_cm sunrpc", check=False)
        sh(f"insmod {AB_DIR}/{variant}.ko")
    count_module(transport_module(variant))


def transport_module(variant):
    """The module that carries `variant`'s RPCs (None for NFS over TCP,
    whose transport is built into sunrpc)."""
    variant = variant.split("@")[0]
    if variant == "c":
        return "rpcrdma"
    if variant in ("ours", "old", "new") or variant in OURS_PARAMS:
        return "rpcrdma_rs"
    return None


def mount(variant, extra=""):
    os.makedirs(MNT, exist_ok=True)
    opts = (RDMA_OPTS if "@" in variant else MOUNT_OPTS[variant]) + ("," + extra if extra else "")
    sh(f"timeout 120 mount -t nfs -o {opts} {SERVER}:/srv/export {MNT}")
    line = xprt_line()
    want = "tcp" if variant == "tcp" else "rdma"
    if not line or line[1] != want:
        raise RuntimeError(f"{variant}: the mount is not over {want}: {line}")


def umount():
    sh("umount " + MNT)


def xprt_lines():
    """The fields of each of the mount's `xprt:` lines in
    /proc/self/mountstats (one per connection: nconnect makes several)."""
    out = []
    with open("/proc/self/mountstats") as f:
        inside = False
        for line in f:
            if line.startswith("device "):
                inside = f" mounted on {MNT} " in line
            elif inside and line.strip().startswith("xprt:"):
                out.append(line.split())
    return out


def xprt_line():
    """The fields of the mount's first `xprt:` line."""
    lines = xprt_lines()
    return lines[0] if lines else None


def rpcs():
    """RPCs sent on the mount's transports (field `sends`)."""
    return sum(int(line[7]) for line in xprt_lines())


def rxe_counters():
    """This guest's soft-RoCE counters (retries, duplicates, NAKs...)."""
    out = {}
    for dev in glob.glob("/sys/class/infiniband/*/ports/1/hw_counters"):
        for name in os.listdir(dev):
            with open(f"{dev}/{name}") as f:
                out[name] = out.get(name, 0) + int(f.read().split()[0])
    return out


def counters_moved(before, after):
    """The counters that moved between two rxe_counters() readings."""
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    return " ".join(f"{k}=+{v}" for k, v in sorted(moved.items())) or "none"


def busy_of(cpu_line):
    """CPU time spent not idle in the ``cpu`` line of a /proc/stat, in
    USER_HZ ticks."""
    v = [int(x) for x in cpu_line.split()[1:]]
    return sum(v) - v[3] - v[4]  # minus idle and iowait


def busy_jiffies():
    """This guest's CPU time not idle, all CPUs."""
    with open("/proc/stat") as f:
        return busy_of(f.readline())


def server_task_switches():
    """The server guest's tasks' context switches so far: {pid: (name,
    count)} (scripts/guest/init.sh task-switches)."""
    out = {}
    for line in server_cmd("task-switches", timeout=60).split("\n"):
        f = line.split()
        if len(f) == 3 and f[0].isdigit() and f[2].isdigit():
            out[f[0]] = (f[1], int(f[2]))
    return out


def task_kind(name):
    """A task's name without its instance: "nfsd", "ksoftirqd", a kernel
    worker by the workqueue it last ran ("kworker ib-comp-wq")."""
    if name.startswith("kworker/"):
        wq = name.split("-", 1)[1] if "-" in name else ""
        return f"kworker {wq}".strip()
    return re.sub(r"/\d+$", "", name)


def switches_by_kind(before, after):
    """Context switches between two server_task_switches(), by task_kind
    (a task that came meanwhile counts whole)."""
    out = collections.Counter()
    for pid, (name, n) in after.items():
        d = n - before.get(pid, (name, 0))[1]
        if d > 0:
            out[task_kind(name)] += d
    return out


def server_cpu_stat():
    """The server guest's CPU time not idle, and its context switches so
    far (scripts/guest/init.sh cpu-stat)."""
    lines = server_cmd("cpu-stat", timeout=60).split("\n")
    switches = next((int(l.split()[1]) for l in lines if l.startswith("ctxt ")), None)
    return busy_of(lines[0]), switches


def insns(role):
    """(instructions, translated blocks, both again within the counted
    module, blocks QEMU has translated, and the CPU time in microseconds
    the guest's QEMU process has used on the host) of the `role` guest so
    far, when the testbed counts them (scripts/testbed.sh --count-insns);
    None otherwise."""
    try:
        with open(f"{SHARE}/insns.{role}") as f:
            n, b, mn, mb, tr, cpu = f.read().split()
            return int(n), int(b), int(mn), int(mb), int(tr), int(cpu)
    except (OSError, ValueError):
        return None


def block_runs(role="client"):
    """The counter's per-block figures (see scripts/insn_count.c): the
    counted range's blocks, and every kernel block if the testbed counts
    them (--count-kernel-blocks), as {address: [instructions, runs]}, runs
    summed over the translations of one address. Empty if not counted.
    Asks the counter for a fresh reading and waits for it."""
    return read_block_runs(block_snapshot(role))


def block_snapshot(role="client"):
    """block_runs' reading, taken but not read: the name of the file the
    counter wrote it to (None if not counted). Quick, for a window's edge
    while the workload runs on; read_block_runs reads it."""
    path = f"{SHARE}/insns.{role}.blocks"
    if insns(role) is None:
        return None
    with open(path + ".req", "w"):
        pass
    deadline = time.time() + 30
    while os.path.exists(path + ".req"):
        if time.time() > deadline:
            raise RuntimeError("the instruction counter did not write its block counts")
        time.sleep(0.005)
    kept = f"{path}.{os.getpid()}.{random.randrange(1 << 30)}"
    os.rename(path, kept)
    return kept


def read_block_runs(kept):
    """The figures of a block_snapshot, parsed (the file is removed)."""
    if kept is None:
        return {}
    with open(kept) as f:
        text = f.read()
    os.unlink(kept)
    return parse_block_runs(text)


def parse_block_runs(text):
    out = {}
    for line in text.splitlines():
        pc, n, runs = line.split()
        b = out.setdefault(int(pc, 16), [int(n), 0])
        b[1] += int(runs)
    return out


def kernel_symbols(path="/proc/kallsyms"):
    """(address, symbol, module) of the kernel's code, modules included
    (module "" for the kernel image), sorted, from /proc/kallsyms (or a
    copy of another guest's at `path`)."""
    syms = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tT":
                mod = parts[3].strip("[]") if len(parts) == 4 else ""
                syms.append((int(parts[0], 16), parts[2], mod))
    return sorted(syms)


def module_symbols(name, syms=None):
    """(address, symbol) of module `name`'s code, sorted: of this guest, or
    from another guest's kernel_symbols() `syms`."""
    return [(a, s) for a, s, m in (kernel_symbols() if syms is None else syms) if m == name]


# The server guest's symbols while it serves with SERVING[0]: a module
# loaded again moves.
SERVER_SYMS = {}


def server_symbols():
    """The server guest's kernel_symbols(), as it serves now."""
    key = SERVING[0]
    if key not in SERVER_SYMS:
        out = server_cmd("kallsyms")
        if "rc=0" not in out:
            raise RuntimeError(f"server kallsyms: {out}")
        SERVER_SYMS.clear()
        SERVER_SYMS[key] = kernel_symbols(f"{SHARE}/kallsyms.server")
    return SERVER_SYMS[key]


def instructions_by_function(before, after, syms=None):
    """Instructions executed per kernel function between two block_runs()
    readings, keyed by (module, symbol) (module "" for the kernel image),
    of this guest or of the guest whose kernel_symbols() `syms` are."""
    syms = syms if syms is not None else kernel_symbols()
    addrs = [a for a, _, _ in syms]
    out = collections.Counter()
    for pc, (n, runs) in after.items():
        d = runs - before.get(pc, [n, 0])[1]
        i = bisect.bisect_right(addrs, pc) - 1
        if d > 0 and i >= 0:
            _, sym, mod = syms[i]
            out[(mod, sym)] += d * n
    return out


def entries_by_function(before, after):
    """How often each kernel function was entered between two block_runs()
    readings (the runs of the block at its first instruction), keyed as
    instructions_by_function() keys them: with the instructions, what one
    call of it costs on average."""
    out = collections.Counter()
    for a, sym, mod in kernel_symbols():
        b = after.get(a)
        if b:
            d = b[1] - before.get(a, [0, 0])[1]
            if d > 0:
                out[(mod, sym)] += d
    return out


def blocks_by_offset(before, after, name, keep=None, syms=None):
    """Instructions executed per block of module `name`'s own code between
    two block_runs() readings, keyed "symbol+0xOFFSET" (the block's start
    from its function's): what scripts/profile_report.py --lines maps to
    source lines with a build of the same code that carries line tables.
    With `keep`, only the functions whose symbol it accepts (name "" is the
    kernel image). Of this guest, or of the guest whose kernel_symbols()
    `syms` are."""
    syms = module_symbols(name, syms)
    addrs = [a for a, _ in syms]
    out = {}
    for pc, (n, runs) in after.items():
        d = runs - before.get(pc, [n, 0])[1]
        i = bisect.bisect_right(addrs, pc) - 1
        if d > 0 and i >= 0 and (keep is None or keep(syms[i][1])):
            a, sym = syms[i]
            out[f"{sym}+{pc - a:#x}"] = [n, d]
    return out


def module_text(name):
    """[start, end) of module `name`'s code, from /proc/kallsyms (its text
    symbols, the last one's page included)."""
    syms = module_symbols(name)
    if not syms or syms[0][0] == 0:
        raise RuntimeError(f"no code addresses for module {name} in /proc/kallsyms")
    return syms[0][0], (syms[-1][0] | 0xFFF) + 1


def count_module(name):
    """Has the instruction counter count module `name`'s own code apart
    (None: nothing): the instructions a transport executes itself, not
    those of the kernel functions it calls. Call after loading it, before
    it runs."""
    if insns("client") is None:
        return
    start, end = module_text(name) if name else (0, 0)
    tmp = f"{SHARE}/insns.client.range.tmp"
    with open(tmp, "w") as f:
        f.write(f"{start:x} {end:x}\n")
    os.rename(tmp, f"{SHARE}/insns.client.range")
    # The counter reads the range every 10 ms; the module's hot code is
    # translated when it first runs, after this.
    time.sleep(0.2)


def delta(before, after):
    if before is None or after is None:
        return None
    return tuple(a - b for a, b in zip(after, before))


# scripts/server-bench.sh --profile: the server guest's instructions by
# kernel function too (testbed.sh --count-kernel-blocks).
SERVER_PROFILE = os.environ.get("BENCH_SERVER_PROFILE") == "1"
# The server functions reported per workload, the most instructions first.
SERVER_TOP = 400


class Meter:
    """Client CPU, RPCs and (with server=True) server CPU across one
    workload; and both guests' instructions if the testbed counts them
    (with blocks=True also the counter's per-block figures at both ends,
    in blocks0 and blocks1: see block_runs)."""

    def __init__(self, server=False, blocks=False):
        self.server = server
        self.server_cpu = None
        # The server's context switches (every CPU) across the workload:
        # how often its threads slept and were woken, which the
        # scheduler's share of its instructions follows.
        self.server_switches = None
        self.server_tasks = None
        self.blocks = blocks
        self.blocks0 = self.blocks1 = {}
        self._kept0 = None

    def __enter__(self):
        if self.server:
            self._tasks0 = server_task_switches()
            self.server_cpu, self.server_switches = server_cpu_stat()
        self.insns = {role: insns(role) for role in ("client", "server")}
        self.cpu, self.rpcs, self.t = busy_jiffies(), rpcs(), time.time()
        if self.blocks:
            # After the RPCs are read, as at the end: the counter takes
            # the reading within its 10 ms at both ends, but writing it
            # out takes longer, and the other counters are not to wait
            # for that.
            self._kept0 = block_snapshot()
        if SERVER_PROFILE:
            self._skept0 = block_snapshot("server")
        return self

    def __exit__(self, *exc):
        self.cpu = busy_jiffies() - self.cpu
        self.rpcs = rpcs() - self.rpcs
        self.secs = time.time() - self.t
        self.insns = {role: delta(n, insns(role)) for role, n in self.insns.items()}
        if self.blocks:
            # Taken as soon as the counts above, read after.
            self.blocks1 = read_block_runs(block_snapshot()) if exc[0] is None else {}
            self.blocks0 = read_block_runs(self._kept0)
        if SERVER_PROFILE:
            kept1 = block_snapshot("server") if exc[0] is None else None
            self.server_functions = {}
            self.server_blocks = {}
            if kept1 is not None and self.rpcs:
                b0, b1 = read_block_runs(self._skept0), read_block_runs(kept1)
                by = instructions_by_function(b0, b1, server_symbols())
                self.server_functions = {f"{m}:{f}": n / self.rpcs for (m, f), n in by.most_common(SERVER_TOP)}
                # Where in its own code our server spends, for
                # scripts/profile_report.py --lines (its runs, not per RPC).
                self.server_blocks = blocks_by_offset(b0, b1, "rpcrdma_rs", syms=server_symbols())
            else:
                read_block_runs(self._skept0)
        if self.server and exc[0] is None:
            cpu, switches = server_cpu_stat()
            self.server_tasks = switches_by_kind(self._tasks0, server_task_switches())
            self.server_cpu = cpu - self.server_cpu
            if switches is not None and self.server_switches is not None:
                self.server_switches = switches - self.server_switches
            else:
                self.server_switches = None

    def cpu_us_per_rpc(self):
        return self.cpu * 1e6 / USER_HZ / self.rpcs if self.rpcs else None

    def server_cpu_us_per_rpc(self):
        """The server's CPU per RPC: the same for every client that follows
        the protocol, unless a client makes it do more (or less) work."""
        if self.server_cpu is None or not self.rpcs:
            return None
        return self.server_cpu * 1e6 / USER_HZ / self.rpcs

    def counted(self):
        """Instructions and translated blocks per RPC of both guests: their
        work per RPC in units the host's speed does not change (none if the
        testbed does not count them); with SERVER_PROFILE the server's by
        kernel function ("module:function", module empty for the kernel
        image)."""
        out = {}
        if SERVER_PROFILE:
            out["server_functions"] = self.server_functions
            out["server_blocks"] = self.server_blocks
        for role, prefix in (("client", ""), ("server", "server_")):
            n = self.insns.get(role)
            if n is not None and self.rpcs:
                out[prefix + "insns_per_rpc"] = n[0] / self.rpcs
                out[prefix + "blocks_per_rpc"] = n[1] / self.rpcs
                # The host's side: QEMU's translations and its process's
                # CPU time (every thread), per RPC.
                out[prefix + "translations_per_rpc"] = n[4] / self.rpcs
                out[prefix + "host_cpu_us_per_rpc"] = n[5] / self.rpcs
        if self.server_switches is not None and self.rpcs:
            out["server_switches_per_rpc"] = self.server_switches / self.rpcs
        if self.server_tasks and self.rpcs:
            # By task (the tasks' own counts: the total's share of each).
            out["server_switches_by_task"] = {k: n / self.rpcs for k, n in self.server_tasks.most_common(12)}
        n = self.insns.get("client")
        if n is not None and self.rpcs and n[2]:
            # The transport module's own code (count_module).
            out["transport_insns_per_rpc"] = n[2] / self.rpcs
            out["transport_blocks_per_rpc"] = n[3] / self.rpcs
        return out


# fio with a Meter: the counted window opens WINDOW_LEAD seconds after
# the job's I/O is seen under way (past fio's ramp_time of 1 s); fio is
# stopped (SIGINT: it reports what it did) once the window has closed.
WINDOW_LEAD = 1.5
# RPCs that say the job's I/O has begun: more than fio's start-up sends
# (the file's lookup, access and attributes).
IO_UNDER_WAY = 64


def fio(name, rw, bs, iodepth, filename, meter=None):
    """Runs one fio job and returns fio's figures for it.

    With `meter` (a Meter), the meter counts RUNTIME seconds in the middle
    of the job's I/O, not the fio process: its start-up and exit (exec
    from the root file system, page faults, opening and checking the
    file, the JSON report) are a fixed cost that, counted, would be
    divided by however many RPCs the run made, so that a run the host
    slowed down would count more per RPC for work no transport did."""
    # With a meter, fio runs until stopped (the cap is only a backstop);
    # either way the wait for it is bounded as for a RUNTIME job.
    runtime = RUNTIME if meter is None else RUNTIME + 120
    cmd = (
        f"fio --name={name} --filename={MNT}/{filename} --rw={rw} --bs={bs} "
        f"--iodepth={iodepth} --ioengine=libaio --direct=1 --size={FILE_MB}M "
        f"--time_based --runtime={runtime} --ramp_time=1 --output-format=json "
        f"--percentile_list=50:99"
    )
    timeout = RUNTIME * 10 + 120
    if meter is None:
        out = sh(cmd, timeout=timeout).stdout
    else:
        p = subprocess.Popen(cmd.split(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            n0, t0 = rpcs(), time.time()
            while rpcs() - n0 < IO_UNDER_WAY:
                if p.poll() is not None or time.time() > t0 + timeout:
                    raise RuntimeError(f"fio {name} did no I/O: {p.communicate()[1].strip()[-400:]}")
                time.sleep(0.05)
            time.sleep(WINDOW_LEAD)
            # The meter reads several counters at each end of the window
            # while fio keeps the CPU busy: scheduled as real-time, this
            # process reads them back to back, not wherever the scheduler
            # lets it in between (which left whole tenths of a second of
            # RPCs in one counter's window and not in another's).
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
            try:
                with meter:
                    time.sleep(RUNTIME)
            finally:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            if p.poll() is not None:
                raise RuntimeError(f"fio {name} stopped before the counted window closed")
            # fio reports the job so far and exits (status 128, which
            # says only that it was interrupted).
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if "{" not in out:
            raise RuntimeError(f"fio {name} failed ({p.returncode}): {err.strip()[-400:]}")
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job["write" if "write" in rw else "read"]


def getattr_loop(seconds):
    """stat() on the data file for `seconds`: on a noac mount, one GETATTR
    each. Returns how many were made."""
    path = f"{MNT}/bench.dat"
    os.stat(path)
    n, t = 0, time.time()
    while time.time() - t < seconds:
        for _ in range(100):
            os.stat(path)
        n += 100
    return n


def workloads(variant, rep):
    base = dict(variant=variant, rep=rep)
    # 4 KiB random reads at queue depth 1: latency.
    m = Meter()
    r = fio("qd1", "randread", "4k", 1, "bench.dat", meter=m)
    pct = r["clat_ns"].get("percentile", {})
    emit(**base, workload="randread_4k_qd1", iops=r["iops"],
         lat_p50_us=pct.get("50.000000", 0) / 1000, lat_p99_us=pct.get("99.000000", 0) / 1000,
         cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs, **m.counted())
    # 4 KiB random reads at queue depth 64: IOPS.
    rxe0 = rxe_counters()
    m = Meter(server=True)
    r = fio("qd64", "randread", "4k", 64, "bench.dat", meter=m)
    emit(**base, workload="randread_4k_qd64", iops=r["iops"], cpu_us_per_rpc=m.cpu_us_per_rpc(),
         server_cpu_us_per_rpc=m.server_cpu_us_per_rpc(), rpcs=m.rpcs, **m.counted())
    # The transport's counters so far (connects, backlog, Send buffer and
    # LOCAL_INV waits...) and what soft-RoCE counted during the job
    # (retransmissions, duplicates, NAKs): what to look at first when QD64
    # falls short.
    log(f"{variant} after qd64: {' '.join(xprt_line() or ['no xprt line'])}")
    log(f"{variant} rxe during qd64: {counters_moved(rxe0, rxe_counters())}")
    # 4 KiB O_DIRECT random writes at queue depth 64: each carries its
    # data in a Read chunk (4 KiB and the RPC header exceed the 4 KiB
    # inline threshold). The data file is rewritten in place: no layout.
    m = Meter(server=True)
    r = fio("w64", "randwrite", "4k", 64, "bench.dat", meter=m)
    emit(**base, workload="randwrite_4k_qd64", iops=r["iops"], cpu_us_per_rpc=m.cpu_us_per_rpc(),
         server_cpu_us_per_rpc=m.server_cpu_us_per_rpc(), rpcs=m.rpcs, **m.counted())
    # Small inline calls: one GETATTR per stat() on a mount that caches
    # no attributes (noac), for as long as a fio job runs.
    umount()
    mount(variant, "noac")
    with Meter() as m:
        n = getattr_loop(RUNTIME)
    emit(**base, workload="getattr", ops_per_s=n / m.secs, cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs,
         **m.counted())
    umount()
    mount(variant)
    if WORKLOADS == "4k":
        return
    if WORKLOADS == "ab":
        shapes(variant, base)
        return
    if WORKLOADS == "server":
        # 1 MiB sequential reads: Write chunks of many pages.
        m = Meter(server=True)
        r = fio("seqread", "read", "1m", 4, "bench.dat", meter=m)
        emit(**base, workload="seqread_1m", mb_s=r["bw_bytes"] / 1e6, cpu_us_per_rpc=m.cpu_us_per_rpc(),
             server_cpu_us_per_rpc=m.server_cpu_us_per_rpc(), rpcs=m.rpcs, **m.counted())
        return
    # 1 MiB sequential reads and writes: throughput.
    # (The 1 MiB jobs are metered over the whole fio process: a new
    # file's layout would fall in a window within the job.)
    with Meter() as m:
        r = fio("seqread", "read", "1m", 4, "bench.dat")
    emit(**base, workload="seqread_1m", mb_s=r["bw_bytes"] / 1e6, cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs,
         **m.counted())
    with Meter() as m:
        r = fio("seqwrite", "write", "1m", 4, f"bench.w.{variant}")
    emit(**base, workload="seqwrite_1m", mb_s=r["bw_bytes"] / 1e6, cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs,
         **m.counted())
    os.unlink(f"{MNT}/bench.w.{variant}")
    # Small files: create, then (cold cache, after a remount) stat, unlink.
    d = f"{MNT}/small.{variant}"
    os.makedirs(d, exist_ok=True)
    rates = {}
    with Meter() as m:
        t = time.time()
        for i in range(SMALL_FILES):
            os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        rates["create_per_s"] = SMALL_FILES / (time.time() - t)
        umount()
        mount(variant)
        t = time.time()
        for i in range(SMALL_FILES):
            os.stat(f"{d}/f{i}")
        rates["stat_per_s"] = SMALL_FILES / (time.time() - t)
        t = time.time()
        for i in range(SMALL_FILES):
            os.unlink(f"{d}/f{i}")
        rates["unlink_per_s"] = SMALL_FILES / (time.time() - t)
    os.rmdir(d)
    emit(**base, workload="smallfiles", **rates)


def shapes(variant, base):
    """make ab's shapes beyond 4 KiB, each counted per RPC over RUNTIME
    seconds in the middle of the work: 1 MiB sequential O_DIRECT reads and
    writes at queue depth 4 (Write and Read chunks of many pages), the
    listing of a large directory (READDIRPLUS replies in Reply chunks) and
    Long Calls (an NFSv4.0 SETATTR of a 4.5 KB ACL, sent as RDMA_NOMSG)."""
    m = Meter()
    r = fio("seqread", "read", "1m", 4, "bench.dat", meter=m)
    emit(**base, workload="seqread_1m", mb_s=r["bw_bytes"] / 1e6, cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs,
         **m.counted())
    # The data file rewritten in place: no layout in the window.
    m = Meter()
    r = fio("seqwrite", "write", "1m", 4, "bench.dat", meter=m)
    emit(**base, workload="seqwrite_1m", mb_s=r["bw_bytes"] / 1e6, cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs,
         **m.counted())
    # Each listing afresh: touching the directory changes its attributes,
    # which drops the client's cached listing (a SETATTR, then the
    # READDIRPLUS calls and their GETATTRs).
    d = f"{MNT}/bench.dir"
    n = len(os.listdir(d))
    if n != DIR_ENTRIES:
        raise RuntimeError(f"{d} lists {n} entries, not {DIR_ENTRIES}")
    with Meter() as m:
        t, listings = time.time(), 0
        while time.time() - t < RUNTIME:
            os.utime(d)
            listings += len(os.listdir(d)) == DIR_ENTRIES
    emit(**base, workload="readdir", listings_per_s=listings / m.secs, cpu_us_per_rpc=m.cpu_us_per_rpc(),
         rpcs=m.rpcs, **m.counted())
    umount()
    os.makedirs(MNT, exist_ok=True)
    sh(f"timeout 120 mount -t nfs -o proto=rdma,port=20049,vers=4.0,retry=0 {SERVER}:/ {MNT}")
    try:
        target = f"{MNT}/bench.acl"
        open(target, "w").close()
        with Meter() as m:
            t, calls = time.time(), 0
            while time.time() - t < RUNTIME:
                try:
                    os.setxattr(target, "system.nfs4_acl", LONG_ACL)
                except OSError:
                    pass  # refused as untranslatable: an NFS answer all the same
                calls += 1
        emit(**base, workload="longcall", ops_per_s=calls / m.secs, cpu_us_per_rpc=m.cpu_us_per_rpc(),
             rpcs=m.rpcs, **m.counted())
        os.unlink(target)
    finally:
        umount()
        mount(variant)


def nfs4_ace(type_, flag, mask, who):
    w = who.encode()
    return struct.pack(">IIII", type_, flag, mask, len(w)) + w + b"\0" * (-len(w) % 4)


# An NFSv4 ACL of 183 entries, about 4.5 KB: over the inline threshold,
# and not DDP payload, so its SETATTR goes as a Long Call
# (selftests/tests/nfs_long_call.sh).
LONG_ACL = (struct.pack(">I", 183) + b"".join(nfs4_ace(0, 0, 0x1, "%d" % (10000 + i)) for i in range(180))
            + nfs4_ace(0, 0, 0x1, "OWNER@") + nfs4_ace(0, 0x40, 0x1, "GROUP@") + nfs4_ace(0, 0, 0x1, "EVERYONE@"))


# Tool: (arguments on both sides, what it measures). Latency runs count
# iterations: in duration mode ib_send_lat prints no percentiles. The
# bandwidth tools connect through rdma_cm (-R) like NFS does; ib_send_lat
# exchanges its QP numbers over TCP instead (over rxe its rdma_cm mode is
# rejected or hangs).
PERFTEST = {
    "ib_write_bw": ("-R -s 1048576 -D 5", "mb_s"),
    "ib_read_bw": ("-R -s 1048576 -D 5", "mb_s"),
    "ib_send_lat": ("-s 4096 -n 500", "lat_us"),
}


def perftest(tool, rep):
    args, unit = PERFTEST[tool]
    # The server side listens once and serves one run.
    out = server_cmd(f"perf-serve {tool} -d rxe0 -F {args}")
    if "rc=0" not in out:
        raise RuntimeError(f"perf-serve {tool}: {out}")
    time.sleep(0.5)
    r = sh(f"timeout 90 {tool} -d rxe0 -F {args} {SERVER}", check=False)
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit()]
    if r.returncode != 0 or not rows:
        log(f"{tool} failed: {r.stdout[-300:]} {r.stderr[-300:]}")
        log("its server said: " + server_cmd("perf-log")[-600:])
        return
    row = rows[-1]
    if unit == "mb_s":
        # #bytes #iterations BW-peak BW-average MsgRate (MB/s is 2^20 B/s)
        emit(variant="raw", rep=rep, workload=tool, mb_s=float(row[3]) * 1.048576)
    else:
        # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
        # (t_typical is the median). perftest halves the ping-pong time;
        # an RPC is a round trip, so the ceiling is twice that.
        emit(variant="raw", rep=rep, workload=tool, lat_p50_us=2 * float(row[4]), lat_p99_us=2 * float(row[7]))


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def no_thp():
    """Turns transparent huge pages off in this guest, if its kernel has
    them, before anything is measured. Debian's stock kernel has them
    ("always") and zeroes every page it allocates (init_on_alloc):
    khugepaged collapses the memory of fio and of this script into huge
    pages when it gets round to it, zeroing and copying 2 MiB each time,
    which in one run of one variant added 1500 to 6200 instructions per
    RPC that the transport had no part in. The testbed's own kernels are
    built without them."""
    if os.path.exists(THP):
        with open(THP, "w") as f:
            f.write("never\n")


def make_data():
    """Has the server guest write the data file the reads read."""
    out = server_cmd(f"mkdata bench.dat {FILE_MB}")
    if "rc=0" not in out:
        raise RuntimeError(f"server mkdata: {out}")
    if WORKLOADS == "ab":
        out = server_cmd(f"mkentries bench.dir {DIR_ENTRIES}")
        if "rc=0" not in out:
            raise RuntimeError(f"server mkentries: {out}")


def server_memory_per_connection():
    """The server's kernel memory per connection, serving with ours and
    with the in-tree svcrdma: three mounts of the C client each (one RDMA
    connection), the medians of what each took (unreclaimable slab plus
    vmalloc, and free memory) on the server."""
    for server in ("ours", "c"):
        serve_with(server)
        use_module("c")
        kernel, free = [], []
        for _ in range(3):
            k0, f0 = map(int, server_cmd("mem-reading").split("\n")[0].split())
            mount("c")
            os.stat(MNT)
            k1, f1 = map(int, server_cmd("mem-reading").split("\n")[0].split())
            umount()
            kernel.append(k1 - k0)
            free.append(f0 - f1)
        emit(variant=f"server-{server}", rep=0, workload="mem_per_connection",
             kernel_kb=sorted(kernel)[1], free_kb=sorted(free)[1])


def rotation(variants, rep):
    """The variants in repetition `rep`'s order: rotated by one every time,
    so that drift on the host is spread over all of them."""
    k = rep % len(variants)
    return variants[k:] + variants[:k]


# make scaling: (name, slots, extra mount options) and queue depths.
SCALING_CONFIGS = (("128 slots", 128, ""), ("512 slots", 512, ""), ("nconnect=4", 128, "nconnect=4"))
SCALING_DEPTHS = (1, 8, 64, 128)


def scaling(variant, rep):
    """4 KiB random reads at each queue depth, for each configuration."""
    failures = 0
    for name, slots, extra in SCALING_CONFIGS:
        try:
            use_module(variant, slots)
            mount(variant, extra)
            conns = len(xprt_lines())
            for qd in SCALING_DEPTHS:
                m = Meter()
                r = fio(f"qd{qd}", "randread", "4k", qd, "bench.dat", meter=m)
                emit(variant=variant, rep=rep, workload="scaling", config=name, iodepth=qd, connections=conns,
                     iops=r["iops"], cpu_us_per_rpc=m.cpu_us_per_rpc(), rpcs=m.rpcs, **m.counted())
            umount()
        except Exception as e:  # one failed point must not hide the others
            failures += 1
            log(f"{variant} {name} failed: {e}")
            sh("umount -f " + MNT, check=False)
    return failures


def main():
    log(f"variants {VARIANTS}, {REPEATS} repetitions, {RUNTIME} s per fio job, {FILE_MB} MiB file")
    no_thp()
    make_data()
    if WORKLOADS == "scaling":
        failures = 0
        for rep in range(REPEATS):
            for variant in rotation(VARIANTS, rep):
                log(f"repetition {rep + 1}: {variant}")
                failures += scaling(variant, rep)
        use_module("none")
        return 1 if failures else 0
    failures = 0
    for rep in range(REPEATS):
        for variant in rotation(VARIANTS, rep):
            log(f"repetition {rep + 1}: {variant}")
            try:
                use_module(variant)
                mount(variant)
                workloads(variant, rep)
                umount()
            except Exception as e:  # one failed variant must not hide the others
                failures += 1
                log(f"{variant} failed: {e}")
                sh("umount -f " + MNT, check=False)
        for tool in PERFTEST if WORKLOADS == "all" else ():
            try:
                perftest(tool, rep)
            except Exception as e:
                failures += 1
                log(f"{tool} failed: {e}")
    if WORKLOADS == "server":
        try:
            server_memory_per_connection()
        except Exception as e:
            failures += 1
            log(f"memory per connection failed: {e}")
    use_module("none")
    return 1 if failures else 0


if __name__ == "__main__":
    # --count-module NAME|none: only set the instruction counter's range
    # (selftests/tests/insn_counter.sh checks the counter through it).
    if sys.argv[1:2] == ["--count-module"] and len(sys.argv) == 3:
        count_module(None if sys.argv[2] == "none" else sys.argv[2])
        sys.exit(0)
    sys.exit(main())
