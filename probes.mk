# SPDX-License-Identifier: GPL-2.0
#
# Build-time probes of the kernel tree the module is built against: the one
# place where the supported kernel lines (6.12 LTS, 7.x) differ for us.
# Each probe asks whether the tree has a function, field, trait or macro key
# (never which version it is; one asks the compiler whether it takes asm
# goto) and turns the answer into a Rust cfg, and a C macro where C needs
# it. The Rust side of each difference lives in rust/kapi/compat.rs (the
# trace events' static branch in rust/kapi/trace.rs, the module!
# declaration in rust/rpcrdma.rs); Documentation/admin-guide.rst lists the
# probes.
#
# $(call rpcrdma_has,FILE,ERE): y if FILE (relative to the source tree)
# has a line matching ERE.
rpcrdma_has = $(shell grep -qsE $(2) $(srctree)/$(1) && echo y)
# $(call rpcrdma_has_in,FILE,START,ERE): y if, in FILE, a line matching ERE
# follows a line matching START before the next line that is a lone "}".
rpcrdma_has_in = $(shell awk '/$(2)/ { f = 1 } f && /$(3)/ { r = 1; exit } f && /^}/ { f = 0 } END { exit !r }' \
	$(srctree)/$(1) 2>/dev/null && echo y)

rpcrdma_cfgs :=

# module! takes `authors: [...]` (a list) instead of `author: "..."`.
ifeq ($(call rpcrdma_has,rust/macros/module.rs,'[^a-z_]authors[^a-z_]'),y)
rpcrdma_cfgs += rpcrdma_module_authors
endif

# kernel::str::CStr is core's CStr, with the kernel's methods on the
# CStrExt trait.
ifeq ($(call rpcrdma_has,rust/kernel/str.rs,'pub trait CStrExt'),y)
rpcrdma_cfgs += rpcrdma_cstr_ext
endif

# pr_*! format their arguments through kernel::fmt::Display, not core's.
ifeq ($(call rpcrdma_has,rust/kernel/fmt.rs,'^pub trait Display'),y)
rpcrdma_cfgs += rpcrdma_kernel_fmt_display
endif

# The kernel's Vec grows its length with inc_len (set_len is gone).
ifeq ($(call rpcrdma_has,rust/kernel/alloc/kvec.rs,'fn inc_len'),y)
rpcrdma_cfgs += rpcrdma_kvec_inc_len
endif

# PinInit's pinned initialiser is __init (the pin-init crate), not
# __pinned_init.
ifeq ($(call rpcrdma_has_in,rust/pin-init/src/lib.rs,pub unsafe trait PinInit,unsafe fn __init.self),y)
rpcrdma_cfgs += rpcrdma_pin_init_init
endif

# THIS_MODULE is a constant of the module type's ModuleMetadata, reached
# through kernel::module::this_module, not a static in the crate root.
ifeq ($(call rpcrdma_has,rust/kernel/module.rs,'pub const fn this_module'),y)
rpcrdma_cfgs += rpcrdma_this_module_fn
endif

# The kernel crate branches on a static key with asm goto
# (kernel::jump_label::static_branch_unlikely!): the trace events' test is
# a patched jump where the kernel has jump labels (rust/kapi/trace.rs).
ifeq ($(call rpcrdma_has,rust/kernel/jump_label.rs,'macro_rules! static_branch_unlikely'),y)
rpcrdma_cfgs += rpcrdma_static_branch
endif

# Without that macro (6.12), the compiler building the module takes asm
# goto (stable from Rust 1.87): the trace events' test is the module's own
# patched jump on x86-64 (rust/kapi/trace.rs). A question to the compiler,
# not to the tree: the one probe that compiles something. Its output goes
# to a directory of its own, removed after: rustc writes an output file
# beside its path and renames it into place, so "-o /dev/null" would put
# a regular file where the null device was (as root: every later
# "> /dev/null" then fills it, and whatever reads it gets that back).
ifneq ($(filter rpcrdma_static_branch,$(rpcrdma_cfgs)),rpcrdma_static_branch)
ifeq ($(shell d=$$(mktemp -d) && { \
	echo 'pub unsafe fn f() -> bool { core::arch::asm!("/* {l} */", l = label { return true; }); false }' | \
	$(RUSTC) --edition 2021 --crate-type lib --emit metadata --out-dir "$$d" - >/dev/null 2>&1 && echo y; }; \
	rm -rf "$$d"),y)
rpcrdma_cfgs += rpcrdma_asm_goto
endif
endif

# The server's call and reply pages are two arrays (7.x: rq_pages_nfree
# counts the call pages a transport took); 6.12 has one, rq_respages
# pointing into it. C only (helpers.c: the layout of a call recvfrom
# gives a thread).
ifeq ($(call rpcrdma_has,include/linux/sunrpc/svc.h,'rq_pages_nfree'),y)
ccflags-y += -DRPCRDMA_RS_SVC_SPLIT_PAGES
rpcrdma_cfgs += rpcrdma_svc_split_pages
endif

rustflags-y += $(foreach c,$(rpcrdma_cfgs),--cfg=$(c))

# What the probes found, for `make module V=1` and for the record in the
# module's build log.
$(info rpcrdma_rs: kernel probes: $(if $(rpcrdma_cfgs),$(rpcrdma_cfgs),none))
