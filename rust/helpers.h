/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Out-of-line wrappers for the static inline functions and macros of SUNRPC
 * and ib_core that Rust cannot call directly. Each is a one-line forward to
 * the kernel's own definition; no logic lives here.
 */
#ifndef RPCRDMA_RS_HELPERS_H
#define RPCRDMA_RS_HELPERS_H

struct ib_device;

const char *rpcrdma_rs_ib_device_name(const struct ib_device *device);

#endif /* RPCRDMA_RS_HELPERS_H */
