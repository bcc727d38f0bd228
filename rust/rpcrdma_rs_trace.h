/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Trace events of rpcrdma_rs (trace system "rpcrdma_rs"): enough to follow
 * one RPC and one connection. Field names follow the in-tree C client's
 * events (include/trace/events/rpcrdma.h) where the meaning is the same,
 * so that scripts written for those need little change; the event names
 * carry this module's prefix, since tracepoint names are global and the C
 * client may be loaded too. Rust reaches them through the wrappers of
 * rust/tracepoints.c, after checking the event's static key itself
 * (rust/kapi/trace.rs).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM rpcrdma_rs

#if !defined(_RPCRDMA_RS_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _RPCRDMA_RS_TRACE_H

#include <linux/tracepoint.h>
#include <linux/sunrpc/xdr.h>
#include "tracepoints.h"

/* How a call's message or its reply travels (the C client's words). */
#define rpcrdma_rs_show_chunktype(x)					\
	__print_symbolic(x, { 0, "inline" }, { 1, "pullup" },		\
			 { 2, "mapped" }, { 3, "read list" },		\
			 { 4, "*read list" }, { 5, "write list" },	\
			 { 6, "reply chunk" })

#define rpcrdma_rs_show_dir(x)						\
	__print_symbolic(x, { 0, "TO_DEVICE" }, { 1, "FROM_DEVICE" })

DECLARE_EVENT_CLASS(rpcrdma_rs_peer_status,
	TP_PROTO(const char *peer, int status),
	TP_ARGS(peer, status),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(int, status)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->status = status;
	),
	TP_printk("peer=%s status=%d", __get_str(peer), __entry->status)
);

/* A connection attempt ended: status 0 (established) or -errno. */
DEFINE_EVENT(rpcrdma_rs_peer_status, rpcrdma_rs_connect,
	TP_PROTO(const char *peer, int status), TP_ARGS(peer, status));
/* The server refused the connection (status: the CM's reject reason). */
DEFINE_EVENT(rpcrdma_rs_peer_status, rpcrdma_rs_reject,
	TP_PROTO(const char *peer, int status), TP_ARGS(peer, status));
/* The connection went down (status: why, -errno). */
DEFINE_EVENT(rpcrdma_rs_peer_status, rpcrdma_rs_disconnect,
	TP_PROTO(const char *peer, int status), TP_ARGS(peer, status));

/* Established, with what was negotiated. */
TRACE_EVENT(rpcrdma_rs_established,
	TP_PROTO(const char *peer, u32 version, u32 inline_send,
		 u32 inline_recv, u32 credits, u32 remote_inv),
	TP_ARGS(peer, version, inline_send, inline_recv, credits, remote_inv),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, version)
		__field(u32, inline_send)
		__field(u32, inline_recv)
		__field(u32, credits)
		__field(u32, remote_inv)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->version = version;
		__entry->inline_send = inline_send;
		__entry->inline_recv = inline_recv;
		__entry->credits = credits;
		__entry->remote_inv = remote_inv;
	),
	TP_printk("peer=%s version=%u inline send/recv=%u/%u credits=%u remote_inv=%u",
		  __get_str(peer), __entry->version, __entry->inline_send,
		  __entry->inline_recv, __entry->credits, __entry->remote_inv)
);

/*
 * A call's transport header was built and its Send posted. After the
 * chunk types, what decided the reply's: the reply buffer's
 * head/pages/tail lengths ("read" when its encoder marked the pages
 * for direct placement), the credential's security flavour, and
 * ddp=0 when that flavour must see every byte (krb5i, krb5p).
 */
TRACE_EVENT(rpcrdma_rs_marshal,
	TP_PROTO(const struct rpcrdma_rs_marshal_info *m),
	TP_ARGS(m),
	TP_STRUCT__entry(
		__field(u32, task_id)
		__field(u32, client_id)
		__field(u32, xid)
		__field(u32, version)
		__field(u32, hdrlen)
		__field(u32, headlen)
		__field(u32, pagelen)
		__field(u32, taillen)
		__field(u32, rtype)
		__field(u32, wtype)
		__field(u32, rcvhead)
		__field(u32, rcvpages)
		__field(u32, rcvtail)
		__field(u32, rcvflags)
		__field(u32, flavor)
		__field(u32, ddp)
	),
	TP_fast_assign(
		__entry->task_id = m->task_id;
		__entry->client_id = m->client_id;
		__entry->xid = m->xid;
		__entry->version = m->version;
		__entry->hdrlen = m->hdrlen;
		__entry->headlen = m->headlen;
		__entry->pagelen = m->pagelen;
		__entry->taillen = m->taillen;
		__entry->rtype = m->rtype;
		__entry->wtype = m->wtype;
		__entry->rcvhead = m->rcvhead;
		__entry->rcvpages = m->rcvpages;
		__entry->rcvtail = m->rcvtail;
		__entry->rcvflags = m->rcvflags;
		__entry->flavor = m->flavor;
		__entry->ddp = m->ddp;
	),
	TP_printk("task:%08x@%08x xid=0x%08x v%u hdr=%u xdr=%u/%u/%u %s/%s rcv=%u/%u/%u%s flavor=%u ddp=%u",
		  __entry->task_id, __entry->client_id, __entry->xid,
		  __entry->version, __entry->hdrlen, __entry->headlen,
		  __entry->pagelen, __entry->taillen,
		  rpcrdma_rs_show_chunktype(__entry->rtype),
		  rpcrdma_rs_show_chunktype(__entry->wtype),
		  __entry->rcvhead, __entry->rcvpages, __entry->rcvtail,
		  __entry->rcvflags & XDRBUF_READ ? " read" : "",
		  __entry->flavor, __entry->ddp)
);

/* A call could not be marshalled (ret: -errno). */
TRACE_EVENT(rpcrdma_rs_marshal_failed,
	TP_PROTO(u32 xid, int ret),
	TP_ARGS(xid, ret),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(int, ret)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->ret = ret;
	),
	TP_printk("xid=0x%08x ret=%d", __entry->xid, __entry->ret)
);

/* A memory region registered for a call's chunk (posted with its Send). */
TRACE_EVENT(rpcrdma_rs_mr_map,
	TP_PROTO(u32 xid, u32 mr_id, int nents, u32 handle, u32 length,
		 u64 offset, u32 dir),
	TP_ARGS(xid, mr_id, nents, handle, length, offset, dir),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, mr_id)
		__field(int, nents)
		__field(u32, handle)
		__field(u32, length)
		__field(u64, offset)
		__field(u32, dir)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->mr_id = mr_id;
		__entry->nents = nents;
		__entry->handle = handle;
		__entry->length = length;
		__entry->offset = offset;
		__entry->dir = dir;
	),
	TP_printk("xid=0x%08x mr.id=%u nents=%d %u@0x%016llx:0x%08x (%s)",
		  __entry->xid, __entry->mr_id, __entry->nents,
		  __entry->length, (unsigned long long)__entry->offset,
		  __entry->handle, rpcrdma_rs_show_dir(__entry->dir))
);

DECLARE_EVENT_CLASS(rpcrdma_rs_mr_class,
	TP_PROTO(u32 mr_id, u32 handle),
	TP_ARGS(mr_id, handle),
	TP_STRUCT__entry(
		__field(u32, mr_id)
		__field(u32, handle)
	),
	TP_fast_assign(
		__entry->mr_id = mr_id;
		__entry->handle = handle;
	),
	TP_printk("mr.id=%u handle=0x%08x", __entry->mr_id, __entry->handle)
);

/* A region invalidated by a LOCAL_INV of ours. */
DEFINE_EVENT(rpcrdma_rs_mr_class, rpcrdma_rs_mr_localinv,
	TP_PROTO(u32 mr_id, u32 handle), TP_ARGS(mr_id, handle));
/* A region the server invalidated (Send With Invalidate). */
DEFINE_EVENT(rpcrdma_rs_mr_class, rpcrdma_rs_mr_reminv,
	TP_PROTO(u32 mr_id, u32 handle), TP_ARGS(mr_id, handle));

DECLARE_EVENT_CLASS(rpcrdma_rs_wc_class,
	TP_PROTO(u32 cid, u32 status, u32 vendor_err, u32 received),
	TP_ARGS(cid, status, vendor_err, received),
	TP_STRUCT__entry(
		__field(u32, cid)
		__field(u32, status)
		__field(u32, vendor_err)
		__field(u32, received)
	),
	TP_fast_assign(
		__entry->cid = cid;
		__entry->status = status;
		__entry->vendor_err = vendor_err;
		__entry->received = received;
	),
	TP_printk("cid=%u status=%u vendor_err=0x%x received=%u",
		  __entry->cid, __entry->status, __entry->vendor_err,
		  __entry->received)
);

/* A signalled Send completed (cid: its buffer). */
DEFINE_EVENT(rpcrdma_rs_wc_class, rpcrdma_rs_wc_send,
	TP_PROTO(u32 cid, u32 status, u32 vendor_err, u32 received),
	TP_ARGS(cid, status, vendor_err, received));
/* A Receive completed (cid: its buffer; received: bytes). */
DEFINE_EVENT(rpcrdma_rs_wc_class, rpcrdma_rs_wc_receive,
	TP_PROTO(u32 cid, u32 status, u32 vendor_err, u32 received),
	TP_ARGS(cid, status, vendor_err, received));

/* A reply matched its call: the credits it grants, how its data came. */
TRACE_EVENT(rpcrdma_rs_reply,
	TP_PROTO(u32 xid, u32 credits, u32 wtype, u32 written),
	TP_ARGS(xid, credits, wtype, written),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, credits)
		__field(u32, wtype)
		__field(u32, written)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->credits = credits;
		__entry->wtype = wtype;
		__entry->written = written;
	),
	TP_printk("xid=0x%08x credits=%u %s written=%u", __entry->xid,
		  __entry->credits, rpcrdma_rs_show_chunktype(__entry->wtype),
		  __entry->written)
);

/* The credit limit changed (a reply's grant, clamped). */
TRACE_EVENT(rpcrdma_rs_credits,
	TP_PROTO(u32 xid, u32 old, u32 credits),
	TP_ARGS(xid, old, credits),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, old)
		__field(u32, credits)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->old = old;
		__entry->credits = credits;
	),
	TP_printk("xid=0x%08x credits %u -> %u", __entry->xid, __entry->old,
		  __entry->credits)
);

/* A received message was dropped or failed its RPC, and why. */
TRACE_EVENT(rpcrdma_rs_bad_reply,
	TP_PROTO(const char *peer, u32 xid, const char *why),
	TP_ARGS(peer, xid, why),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, xid)
		__string(why, why)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->xid = xid;
		__assign_str(why);
	),
	TP_printk("peer=%s xid=0x%08x %s", __get_str(peer), __entry->xid,
		  __get_str(why))
);

/*
 * An RDMA_ERROR arrived (err: 1 ERR_VERS with its range, 2 ERR_CHUNK, in
 * Version Two BAD_HEADER, 3 INVAL_OPTION).
 */
DECLARE_EVENT_CLASS(rpcrdma_rs_err_class,
	TP_PROTO(u32 xid, u32 err, u32 min, u32 max),
	TP_ARGS(xid, err, min, max),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, err)
		__field(u32, min)
		__field(u32, max)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->err = err;
		__entry->min = min;
		__entry->max = max;
	),
	TP_printk("xid=0x%08x %s versions=[%u, %u]", __entry->xid,
		  __print_symbolic(__entry->err, { 1, "ERR_VERS" },
				   { 2, "ERR_CHUNK/BAD_HEADER" },
				   { 3, "INVAL_OPTION" }),
		  __entry->min, __entry->max)
);

DEFINE_EVENT(rpcrdma_rs_err_class, rpcrdma_rs_err,
	TP_PROTO(u32 xid, u32 err, u32 min, u32 max), TP_ARGS(xid, err, min, max));

DECLARE_EVENT_CLASS(rpcrdma_rs_xid_class,
	TP_PROTO(const char *peer, u32 xid),
	TP_ARGS(peer, xid),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, xid)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->xid = xid;
	),
	TP_printk("peer=%s xid=0x%08x", __get_str(peer), __entry->xid)
);

/* A backward (server to client) call arrived. */
DEFINE_EVENT(rpcrdma_rs_xid_class, rpcrdma_rs_cb_call,
	TP_PROTO(const char *peer, u32 xid), TP_ARGS(peer, xid));
/* Its reply was sent. */
DEFINE_EVENT(rpcrdma_rs_xid_class, rpcrdma_rs_cb_reply,
	TP_PROTO(const char *peer, u32 xid), TP_ARGS(peer, xid));

/*
 * Version negotiation: the Version Two probe sent (what 0), accepted (1),
 * refused and the call resent as Version One (2), the version settled (3).
 */
TRACE_EVENT(rpcrdma_rs_version,
	TP_PROTO(const char *peer, u32 xid, u32 what, u32 version),
	TP_ARGS(peer, xid, what, version),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, xid)
		__field(u32, what)
		__field(u32, version)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->xid = xid;
		__entry->what = what;
		__entry->version = version;
	),
	TP_printk("peer=%s xid=0x%08x %s version=%u", __get_str(peer),
		  __entry->xid,
		  __print_symbolic(__entry->what, { 0, "probe" },
				   { 1, "accepted" }, { 2, "fallback" },
				   { 3, "settled" }),
		  __entry->version)
);

/*
 * A transport characteristics message (RDMA2_OPTIONAL) sent (dir 0) or
 * received (dir 1); op 0 malformed, 1 INITXCH, 2 UPDXCH, 3 REQXCH, 4 RESPXCH.
 */
TRACE_EVENT(rpcrdma_rs_xchar,
	TP_PROTO(const char *peer, u32 dir, u32 xid, u32 op),
	TP_ARGS(peer, dir, xid, op),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, dir)
		__field(u32, xid)
		__field(u32, op)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->dir = dir;
		__entry->xid = xid;
		__entry->op = op;
	),
	TP_printk("peer=%s %s xid=0x%08x %s", __get_str(peer),
		  __entry->dir ? "received" : "sent", __entry->xid,
		  __print_symbolic(__entry->op, { 0, "malformed" },
				   { 1, "INITXCH" }, { 2, "UPDXCH" },
				   { 3, "REQXCH" }, { 4, "RESPXCH" }))
);

/* A liveness probe posted (status 1) or answered (0) or failed (-errno). */
DEFINE_EVENT_PRINT(rpcrdma_rs_peer_status, rpcrdma_rs_probe,
	TP_PROTO(const char *peer, int status), TP_ARGS(peer, status),
	TP_printk("peer=%s %s status=%d", __get_str(peer),
		  __entry->status > 0 ? "posted" :
		  __entry->status == 0 ? "answered" : "failed",
		  __entry->status)
);

/* Memory regions made on demand: how many now, how many in all. */
TRACE_EVENT(rpcrdma_rs_mrs_refresh,
	TP_PROTO(const char *peer, u32 made, u32 total),
	TP_ARGS(peer, made, total),
	TP_STRUCT__entry(
		__string(peer, peer)
		__field(u32, made)
		__field(u32, total)
	),
	TP_fast_assign(
		__assign_str(peer);
		__entry->made = made;
		__entry->total = total;
	),
	TP_printk("peer=%s made=%u total=%u", __get_str(peer),
		  __entry->made, __entry->total)
);

/*
 * The server (server=1). A connection accepted (status 0) or refused
 * (-errno), from an nfsd thread.
 */
DEFINE_EVENT(rpcrdma_rs_peer_status, rpcrdma_rs_svc_accept,
	TP_PROTO(const char *peer, int status), TP_ARGS(peer, status));

/*
 * A call a server thread takes (or starts pulling): how its message came
 * (rtype: inline, read list, *read list for a Long Call), the bytes that
 * came inline.
 */
TRACE_EVENT(rpcrdma_rs_svc_call,
	TP_PROTO(u32 xid, u32 version, u32 rtype, u32 len),
	TP_ARGS(xid, version, rtype, len),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, version)
		__field(u32, rtype)
		__field(u32, len)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->version = version;
		__entry->rtype = rtype;
		__entry->len = len;
	),
	TP_printk("xid=0x%08x vers=%u rtype=%s len=%u", __entry->xid,
		  __entry->version, rpcrdma_rs_show_chunktype(__entry->rtype),
		  __entry->len)
);

/*
 * A reply sent: how (wtype: inline, write list, reply chunk), its length,
 * and the handle its Send invalidates (0: a plain Send).
 */
TRACE_EVENT(rpcrdma_rs_svc_reply,
	TP_PROTO(u32 xid, u32 wtype, u32 len, u32 inv),
	TP_ARGS(xid, wtype, len, inv),
	TP_STRUCT__entry(
		__field(u32, xid)
		__field(u32, wtype)
		__field(u32, len)
		__field(u32, inv)
	),
	TP_fast_assign(
		__entry->xid = xid;
		__entry->wtype = wtype;
		__entry->len = len;
		__entry->inv = inv;
	),
	TP_printk("xid=0x%08x wtype=%s len=%u inv=0x%08x", __entry->xid,
		  rpcrdma_rs_show_chunktype(__entry->wtype), __entry->len,
		  __entry->inv)
);

/* An RDMA_ERROR sent (fields as rpcrdma_rs_err's). */
DEFINE_EVENT(rpcrdma_rs_err_class, rpcrdma_rs_svc_err,
	TP_PROTO(u32 xid, u32 err, u32 min, u32 max), TP_ARGS(xid, err, min, max));

/* A callback (backward call) sent to a client. */
DEFINE_EVENT(rpcrdma_rs_xid_class, rpcrdma_rs_svc_cb_call,
	TP_PROTO(const char *peer, u32 xid), TP_ARGS(peer, xid));
/* Its reply completed it. */
DEFINE_EVENT(rpcrdma_rs_xid_class, rpcrdma_rs_svc_cb_reply,
	TP_PROTO(const char *peer, u32 xid), TP_ARGS(peer, xid));

#endif /* _RPCRDMA_RS_TRACE_H */

#undef TRACE_INCLUDE_PATH
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_PATH .
#define TRACE_INCLUDE_FILE rpcrdma_rs_trace
#include <trace/define_trace.h>
