/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The trace events of rust/rpcrdma_rs_trace.h as functions Rust can call:
 * each forwards to trace_<event>() (rust/tracepoints.c). Rust calls them
 * only once it has seen the event enabled (rust/kapi/trace.rs).
 */
#ifndef RPCRDMA_RS_TRACEPOINTS_H
#define RPCRDMA_RS_TRACEPOINTS_H

#include <linux/types.h>

void rpcrdma_rs_trace_established(const char *peer, u32 version,
		u32 inline_send, u32 inline_recv, u32 credits, u32 remote_inv);
/*
 * What the marshal event records of a call: more fields than a trace
 * event takes arguments (BPF's raw tracepoints take at most 12), so they
 * go as one.
 */
struct rpcrdma_rs_marshal_info {
	u32 task_id, client_id, xid, version, hdrlen;
	/* The call's head, page list and tail lengths, how it and its reply travel. */
	u32 headlen, pagelen, taillen, rtype, wtype;
	/* What decided the reply's way. */
	u32 rcvhead, rcvpages, rcvtail, rcvflags, flavor, ddp;
};
void rpcrdma_rs_trace_marshal(const struct rpcrdma_rs_marshal_info *m);
void rpcrdma_rs_trace_marshal_failed(u32 xid, int ret);
void rpcrdma_rs_trace_mr_map(u32 xid, u32 mr_id, int nents, u32 handle,
		u32 length, u64 offset, u32 dir);
void rpcrdma_rs_trace_reply(u32 xid, u32 credits, u32 wtype, u32 written);
void rpcrdma_rs_trace_credits(u32 xid, u32 old, u32 credits);
void rpcrdma_rs_trace_bad_reply(const char *peer, u32 xid, const char *why);
void rpcrdma_rs_trace_err(u32 xid, u32 err, u32 min, u32 max);
void rpcrdma_rs_trace_version(const char *peer, u32 xid, u32 what, u32 version);
void rpcrdma_rs_trace_xchar(const char *peer, u32 dir, u32 xid, u32 op);
void rpcrdma_rs_trace_probe(const char *peer, int status);
void rpcrdma_rs_trace_mrs_refresh(const char *peer, u32 made, u32 total);
void rpcrdma_rs_trace_connect(const char *peer, int status);
void rpcrdma_rs_trace_reject(const char *peer, int status);
void rpcrdma_rs_trace_disconnect(const char *peer, int status);
void rpcrdma_rs_trace_mr_localinv(u32 mr_id, u32 handle);
void rpcrdma_rs_trace_mr_reminv(u32 mr_id, u32 handle);
void rpcrdma_rs_trace_wc_send(u32 cid, u32 status, u32 vendor_err,
		u32 received);
void rpcrdma_rs_trace_wc_receive(u32 cid, u32 status, u32 vendor_err,
		u32 received);
void rpcrdma_rs_trace_cb_call(const char *peer, u32 xid);
void rpcrdma_rs_trace_cb_reply(const char *peer, u32 xid);
void rpcrdma_rs_trace_svc_accept(const char *peer, int status);
void rpcrdma_rs_trace_svc_call(u32 xid, u32 version, u32 rtype, u32 len);
void rpcrdma_rs_trace_svc_reply(u32 xid, u32 wtype, u32 len, u32 inv);
void rpcrdma_rs_trace_svc_err(u32 xid, u32 err, u32 min, u32 max);
void rpcrdma_rs_trace_svc_cb_call(const char *peer, u32 xid);
void rpcrdma_rs_trace_svc_cb_reply(const char *peer, u32 xid);

#endif
