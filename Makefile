# SPDX-License-Identifier: GPL-2.0
#
# rpcrdma-rs: top-level targets. (The kernel's build reads Kbuild, not this.)
#
#   make demo       set up everything and show the transport at work
#   make check      every test (host unit tests + guest selftests)
#   make setup      install host packages and tools
#   make kernel     build (or reuse) the cached Rust-enabled test kernel
#                   (KERNEL=6.12|7.3 picks the line, for every target)
#   make module     build rpcrdma_rs.ko against KDIR (default: cached kernel)
#   make unit       protocol core unit tests (cargo test)
#   make peer       the hostile RPC-over-RDMA peer (tools/rdma-peer)
#   make selftests  guest selftests (TAP) on the two-guest testbed
#   make long-check the long suites: fio verify with up to 512 MiB per job
#                   (~2.3 GiB), a 50,000-entry directory, reconnects that
#                   hit callbacks in flight, 20 link losses each recovered
#                   within 10 s, every selftest over the C
#                   client (the hostile peer included), the data tests
#                   over soft-iWARP (siw) with both servers, fuzzing
#   make check-all  make check with every selftest on every supported kernel
#                   line (both test kernels and Debian's stock 7.3 image)
#   make debug-check  make check on the debug kernel (RDMARS_KERNEL=debug)
#   make soak       an hour (SOAK_SECONDS) of mixed load, then umount and
#                   rmmod: slab back where it started (RDMARS_KERNEL=debug
#                   runs it on the debug kernel)
#   make bench      rpcrdma_rs vs the C client, NFS/TCP and raw RDMA
#                   (table, JSON and chart in bench-results/)
#   make ab OLD=REV [NEW=REV]  the module at two revisions (NEW: the
#                   working tree) and the C client, alternated at QD1/QD64
#                   (STOCK=1: on Debian's stock kernel, -O2, its C client)
#   make count      the working tree's own instructions per RPC (writes,
#                   reads, GETATTR; rpcrdma_rs alone, one boot, 3 minutes)
#   make profile [OLD=REV] [LINES=1]  perf in the client guest: where its
#                   CPU goes per RPC with rpcrdma_rs and with the C client
#                   (LINES=1: the module's instructions by source line;
#                   STOCK=1: on Debian's stock kernel, its C client;
#                   PROFILE_PERF=0: the counts without perf sampling)
#   make fuzz       cargo-fuzz every protocol decoder (FUZZ_SECONDS each)
#   make clippy     clippy over the module (kernel build with CLIPPY=1)
#   make misuse     the misuses the types must refuse: each snippet of
#                   rust/misuse.rs (and "// misuse:" lines elsewhere)
#                   compiled into the module, expecting its error

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

# make KERNEL=6.12|7.3 TARGET: the test kernel's line (default 6.12).
ifdef KERNEL
export RDMARS_LINE := $(KERNEL)
endif
# The LLVM the test kernels are built with (scripts/lib.sh); a module must
# be built with its kernel's compiler: LLVM=1 for a tree built with that.
LLVM_VERSION := $(shell sed -n 's/^LLVM_VERSION=//p' scripts/lib.sh)
LLVM ?= -$(LLVM_VERSION)
export LIBCLANG_PATH ?= /usr/lib/llvm-$(LLVM_VERSION)/lib

# Without KDIR=, the module builds against the cached test kernel.
ifeq ($(origin KDIR),undefined)
KERNEL_DEP := kernel
KDIR = $(shell RDMARS_LINE=$(RDMARS_LINE) bash scripts/build-kernel.sh --path)
endif

.PHONY: all demo check deb check-all debug-check soak long-check bench ab scaling count server-bench profile setup kernel module peer unit selftests fuzz clippy misuse clean

all: module

setup:
	bash scripts/setup-host.sh

kernel: setup
	bash scripts/build-kernel.sh >/dev/null

# What was built against one kernel tree is no use against another: the
# tree's configuration sets the layout of the C structures the generated
# bindings describe (lockdep and KASAN grow them), and Kbuild, which sees
# the same relative paths and command lines in both trees, would keep the
# old objects. A build for another tree than the last one starts afresh.
define forget_other_tree
	@kdir="$(KDIR)"; if [ "$$(cat rust/.built-for 2>/dev/null)" != "$$kdir" ]; then \
		rm -f rust/*.o rpcrdma_rs.o rpcrdma_rs.mod.o rpcrdma_rs.ko rust/bindings_generated.rs; \
		echo "$$kdir" > rust/.built-for; \
	fi
endef

module: $(KERNEL_DEP)
	$(forget_other_tree)
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)" LLVM=$(LLVM) modules

clippy: $(KERNEL_DEP)
	$(forget_other_tree)
	$(MAKE) -C "$(KDIR)" M="$(CURDIR)" LLVM=$(LLVM) CLIPPY=1 modules

unit:
	cd rust/proto && cargo test

misuse: module
	bash scripts/misuse.sh

# The hostile RPC-over-RDMA peer the selftests run in the server guest.
peer:
	cd tools/rdma-peer && cargo build --release --locked

selftests: module
	bash scripts/testbed.sh selftests/run_guest.sh

fuzz:
	bash scripts/fuzz.sh

check:
	bash scripts/check.sh

# The Debian package rpcrdma-rs-dkms, built in the cached trixie chroot.
deb:
	bash scripts/stock-kernel.sh deb $(CURDIR)

demo:
	bash scripts/demo.sh

bench:
	bash scripts/bench.sh

scaling:
	bash scripts/scaling.sh --repeats $(or $(SCALING_REPEATS),1)

ab:
	@[ -n "$(OLD)" ] || { echo "usage: make ab OLD=REV [NEW=REV] [AB_ROUNDS=N] [STOCK=1]"; exit 2; }
	bash scripts/ab.sh $(if $(STOCK),--stock) --rounds $(or $(AB_ROUNDS),8) $(OLD) $(NEW)

count:
	bash scripts/count.sh

server-bench:
	bash scripts/server-bench.sh --rounds $(or $(SERVER_BENCH_ROUNDS),2) $(if $(SERVER_BENCH_VARIANTS),--variants $(SERVER_BENCH_VARIANTS)) $(if $(filter 1,$(SERVER_BENCH_PROFILE)),--profile)

profile:
	bash scripts/profile.sh $(if $(STOCK),--stock) $(if $(filter 0,$(PROFILE_PERF)),--no-perf) --rounds $(or $(PROFILE_ROUNDS),2) --iodepth $(or $(PROFILE_IODEPTH),64) $(if $(PROFILE_WORKLOAD),--workload $(PROFILE_WORKLOAD)) $(if $(OLD),--old $(OLD)) $(if $(LINES),--lines)

check-all:
	RDMARS_OTHER_LINES="6.12 7.3" RDMARS_STOCK_TESTS=all RDMARS_KRB5_FULL=1 bash scripts/check.sh

# The whole suite on the debug kernel (KASAN, lockdep, kmemleak, ...).
debug-check:
	RDMARS_KERNEL=debug bash scripts/check.sh

SOAK_SECONDS ?= 3600
soak: module
	bash scripts/testbed.sh --timeout $$(( $(SOAK_SECONDS) + 1800 )) \
		env RDMARS_SOAK_SECONDS=$(SOAK_SECONDS) RDMARS_TEST_TIMEOUT=$$(( $(SOAK_SECONDS) + 1200 )) \
		selftests/run_guest.sh long/soak

long-check: module peer
	bash scripts/testbed.sh --timeout 7200 \
		env RDMARS_TEST_TIMEOUT=5400 RDMARS_FIO_SIZE=512M RDMARS_BIG_DIR_ENTRIES=50000 RDMARS_RECONNECT_INFLIGHT=1 \
		RDMARS_LINK_FLAPS=20 selftests/run_guest.sh nfs_fio_verify nfs_large_directory nfs41_reconnect_callbacks nfs_link_flap
	bash scripts/testbed.sh --timeout 3600 --client-module c \
		env RDMARS_BASELINE_HOSTILE=1 RDMARS_PEER_TRUNCATIONS="0 3 4 8 12 15 16 24 27" selftests/run_guest.sh
	bash scripts/testbed.sh --timeout 1800 \
		env RDMARS_PEER_TRUNCATIONS="0 3 4 8 12 15 16 24 27" selftests/run_guest.sh hostile_peer
	bash scripts/testbed.sh --timeout 3600 --link siw \
		selftests/run_guest.sh $(SIW_TESTS)
	bash scripts/testbed.sh --timeout 3600 --link siw --server-module ours \
		selftests/run_guest.sh server_inline $(SIW_TESTS)
	bash scripts/testbed.sh --timeout 3600 --link siw --server-module ours --client-module c \
		selftests/run_guest.sh server_inline $(SIW_TESTS)
	FUZZ_SECONDS=150 bash scripts/fuzz.sh

# The data tests long-check runs again over soft-iWARP (testbed.sh --link
# siw): our client with the C server, then with ours, then the C client
# with ours (the three-way matrix).
SIW_TESTS = nfs3_inline_io nfs_chunked_io nfs_long_call nfs_large_directory nfs41_backchannel nfs_fio_verify

clean:
	-[ -z "$(KDIR)" ] || $(MAKE) -C "$(KDIR)" M="$(CURDIR)" LLVM=$(LLVM) clean
	rm -f rust/bindings_generated.rs rust/.bindings_generated.rs.cmd rust/.built-for
	cd rust/proto && cargo clean
