// SPDX-License-Identifier: GPL-2.0
/*
 * The trace events of rpcrdma_rs: created here (the one file that defines
 * CREATE_TRACE_POINTS), and one out-of-line forward per event for Rust.
 */
#define CREATE_TRACE_POINTS
#include "rpcrdma_rs_trace.h"
#include "tracepoints.h"

notrace void rpcrdma_rs_trace_established(const char *peer, u32 version,
		u32 inline_send, u32 inline_recv, u32 credits, u32 remote_inv)
{
	trace_rpcrdma_rs_established(peer, version, inline_send, inline_recv,
			credits, remote_inv);
}

notrace void rpcrdma_rs_trace_marshal(const struct rpcrdma_rs_marshal_info *m)
{
	trace_rpcrdma_rs_marshal(m);
}

notrace void rpcrdma_rs_trace_marshal_failed(u32 xid, int ret)
{
	trace_rpcrdma_rs_marshal_failed(xid, ret);
}

notrace void rpcrdma_rs_trace_mr_map(u32 xid, u32 mr_id, int nents, u32 handle,
		u32 length, u64 offset, u32 dir)
{
	trace_rpcrdma_rs_mr_map(xid, mr_id, nents, handle, length, offset, dir);
}

notrace void rpcrdma_rs_trace_reply(u32 xid, u32 credits, u32 wtype, u32 written)
{
	trace_rpcrdma_rs_reply(xid, credits, wtype, written);
}

notrace void rpcrdma_rs_trace_credits(u32 xid, u32 old, u32 credits)
{
	trace_rpcrdma_rs_credits(xid, old, credits);
}

notrace void rpcrdma_rs_trace_bad_reply(const char *peer, u32 xid, const char *why)
{
	trace_rpcrdma_rs_bad_reply(peer, xid, why);
}

notrace void rpcrdma_rs_trace_err(u32 xid, u32 err, u32 min, u32 max)
{
	trace_rpcrdma_rs_err(xid, err, min, max);
}

notrace void rpcrdma_rs_trace_version(const char *peer, u32 xid, u32 what, u32 version)
{
	trace_rpcrdma_rs_version(peer, xid, what, version);
}

notrace void rpcrdma_rs_trace_xchar(const char *peer, u32 dir, u32 xid, u32 op)
{
	trace_rpcrdma_rs_xchar(peer, dir, xid, op);
}

notrace void rpcrdma_rs_trace_probe(const char *peer, int status)
{
	trace_rpcrdma_rs_probe(peer, status);
}

notrace void rpcrdma_rs_trace_mrs_refresh(const char *peer, u32 made, u32 total)
{
	trace_rpcrdma_rs_mrs_refresh(peer, made, total);
}

notrace void rpcrdma_rs_trace_connect(const char *peer, int status)
{
	trace_rpcrdma_rs_connect(peer, status);
}

notrace void rpcrdma_rs_trace_reject(const char *peer, int status)
{
	trace_rpcrdma_rs_reject(peer, status);
}

notrace void rpcrdma_rs_trace_disconnect(const char *peer, int status)
{
	trace_rpcrdma_rs_disconnect(peer, status);
}

notrace void rpcrdma_rs_trace_mr_localinv(u32 mr_id, u32 handle)
{
	trace_rpcrdma_rs_mr_localinv(mr_id, handle);
}

notrace void rpcrdma_rs_trace_mr_reminv(u32 mr_id, u32 handle)
{
	trace_rpcrdma_rs_mr_reminv(mr_id, handle);
}

notrace void rpcrdma_rs_trace_wc_send(u32 cid, u32 status, u32 vendor_err,
		u32 received)
{
	trace_rpcrdma_rs_wc_send(cid, status, vendor_err, received);
}

notrace void rpcrdma_rs_trace_wc_receive(u32 cid, u32 status, u32 vendor_err,
		u32 received)
{
	trace_rpcrdma_rs_wc_receive(cid, status, vendor_err, received);
}

notrace void rpcrdma_rs_trace_cb_call(const char *peer, u32 xid)
{
	trace_rpcrdma_rs_cb_call(peer, xid);
}

notrace void rpcrdma_rs_trace_cb_reply(const char *peer, u32 xid)
{
	trace_rpcrdma_rs_cb_reply(peer, xid);
}

notrace void rpcrdma_rs_trace_svc_accept(const char *peer, int status)
{
	trace_rpcrdma_rs_svc_accept(peer, status);
}

notrace void rpcrdma_rs_trace_svc_call(u32 xid, u32 version, u32 rtype, u32 len)
{
	trace_rpcrdma_rs_svc_call(xid, version, rtype, len);
}

notrace void rpcrdma_rs_trace_svc_reply(u32 xid, u32 wtype, u32 len, u32 inv)
{
	trace_rpcrdma_rs_svc_reply(xid, wtype, len, inv);
}

notrace void rpcrdma_rs_trace_svc_err(u32 xid, u32 err, u32 min, u32 max)
{
	trace_rpcrdma_rs_svc_err(xid, err, min, max);
}

notrace void rpcrdma_rs_trace_svc_cb_call(const char *peer, u32 xid)
{
	trace_rpcrdma_rs_svc_cb_call(peer, xid);
}

notrace void rpcrdma_rs_trace_svc_cb_reply(const char *peer, u32 xid)
{
	trace_rpcrdma_rs_svc_cb_reply(peer, xid);
}
