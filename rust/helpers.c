// SPDX-License-Identifier: GPL-2.0
/* Out-of-line forwards for static inlines and macros; see helpers.h. */
#include <linux/module.h>
#include <net/net_namespace.h>
#include <linux/workqueue.h>
#include <linux/sunrpc/xprt.h>
#include <linux/sunrpc/clnt.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <linux/scatterlist.h>
#include <linux/highmem.h>
#include <linux/debugfs.h>
#include <linux/lwq.h>
#include <linux/sunrpc/svc.h>
#include <linux/sunrpc/bc_xprt.h>
#include <linux/sunrpc/auth.h>
#include <linux/sunrpc/addr.h>
#include "helpers.h"

struct rdma_cm_id *rpcrdma_rs_create_id(struct net *net,
		int (*handler)(struct rdma_cm_id *, struct rdma_cm_event *),
		void *context)
{
	return rdma_create_id(net, handler, context, RDMA_PS_TCP, IB_QPT_RC);
}

/* The running task, as an identity only (compared, never dereferenced). */
void *rpcrdma_rs_current_task(void)
{
	return current;
}

struct net *rpcrdma_rs_init_net(void)
{
	return &init_net;
}

/*
 * A connection request's new id inherits the listener's handler and
 * context; whoever accepts it points them at the new connection. Called
 * from the listener's CONNECT_REQUEST handler, which holds the new id's
 * handler mutex, so no event of the new id reads them meanwhile.
 */
void rpcrdma_rs_cm_id_set_handler(struct rdma_cm_id *id,
		int (*handler)(struct rdma_cm_id *, struct rdma_cm_event *),
		void *context)
{
	id->event_handler = handler;
	id->context = context;
}

struct ib_pd *rpcrdma_rs_alloc_pd(struct ib_device *device)
{
	return ib_alloc_pd(device, 0);
}

void rpcrdma_rs_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

struct ib_cq *rpcrdma_rs_alloc_cq(struct ib_device *device, void *context,
		int nr_cqe)
{
	return ib_alloc_cq_any(device, context, nr_cqe, IB_POLL_WORKQUEUE);
}

int rpcrdma_rs_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
		const struct ib_recv_wr **bad_wr)
{
	return ib_post_recv(qp, wr, bad_wr);
}

/*
 * Moves @qp to the error state at once (as ib_drain_qp does first): every
 * posted work request is flushed, and the peer reaches nothing through it.
 */
void rpcrdma_rs_qp_to_error(struct ib_qp *qp)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };

	ib_modify_qp(qp, &attr, IB_QP_STATE);
}

/*
 * A page reference for a mapping that names @page: refused (false) for a
 * slab page, whose count is the slab's, not the page's owner's, and for a
 * page whose count is zero (7.x allocates large kmalloc buffers frozen:
 * kfree() frees them whatever their count, and put_page() ignores them).
 * The caller borrows @page from an owner who holds it: a count that is
 * not zero stays so until the reference is taken, which a plain increment
 * then does (folio_try_get()'s loop would cost four instructions a page).
 */
bool rpcrdma_rs_try_get_page(struct page *page)
{
	struct folio *folio = page_folio(page);

	if (folio_test_slab(folio) || !folio_ref_count(folio))
		return false;
	folio_get(folio);
	return true;
}

void rpcrdma_rs_put_page(struct page *page)
{
	put_page(page);
}

/*
 * rpcrdma_rs_try_get_page() for each of the @n pages of @pages, pointing
 * the scatterlist entry of the same index at it with sg_set_page(), end
 * mark cleared: @len bytes in all, the first page's from @offset (below
 * PAGE_SIZE), every other page's from 0; @offset + @len bytes span the @n
 * pages. Stops at a null page or one refused a reference; returns the
 * entries set, each holding a page reference.
 */
unsigned int rpcrdma_rs_sg_get_pages(struct scatterlist *sg, struct page *const *pages,
		unsigned int n, unsigned int offset, unsigned int len)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		struct page *page = pages[i];
		unsigned int l = min_t(unsigned int, PAGE_SIZE - offset, len);

		if (!page || !rpcrdma_rs_try_get_page(page))
			break;
		sg_set_page(&sg[i], page, l, offset);
		sg_unmark_end(&sg[i]);
		len -= l;
		offset = 0;
	}
	return i;
}

/* rpcrdma_rs_put_page() of the page of each of @n scatterlist entries. */
void rpcrdma_rs_sg_put_pages(struct scatterlist *sg, unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		put_page(sg_page(&sg[i]));
}

int rpcrdma_rs_page_count(struct page *page)
{
	return page_count(page);
}

void *rpcrdma_rs_page_address(struct page *page)
{
	return page_address(page);
}

u64 rpcrdma_rs_dma_map_to_device(struct ib_device *device, void *addr, size_t len)
{
	return ib_dma_map_single(device, addr, len, DMA_TO_DEVICE);
}

u64 rpcrdma_rs_dma_map_from_device(struct ib_device *device, void *addr, size_t len)
{
	return ib_dma_map_single(device, addr, len, DMA_FROM_DEVICE);
}

u64 rpcrdma_rs_dma_map_page(struct ib_device *device, struct page *page,
		unsigned long offset, size_t len)
{
	return ib_dma_map_page(device, page, offset, len, DMA_TO_DEVICE);
}

void rpcrdma_rs_dma_unmap_page(struct ib_device *device, u64 addr, size_t len)
{
	ib_dma_unmap_page(device, addr, len, DMA_TO_DEVICE);
}

int rpcrdma_rs_dma_mapping_error(struct ib_device *device, u64 addr)
{
	return ib_dma_mapping_error(device, addr);
}

void rpcrdma_rs_dma_unmap_to_device(struct ib_device *device, u64 addr, size_t len)
{
	ib_dma_unmap_single(device, addr, len, DMA_TO_DEVICE);
}

void rpcrdma_rs_dma_unmap_from_device(struct ib_device *device, u64 addr, size_t len)
{
	ib_dma_unmap_single(device, addr, len, DMA_FROM_DEVICE);
}

void rpcrdma_rs_dma_sync_for_cpu(struct ib_device *device, u64 addr, size_t len)
{
	ib_dma_sync_single_for_cpu(device, addr, len, DMA_FROM_DEVICE);
}

void rpcrdma_rs_dma_sync_for_device(struct ib_device *device, u64 addr, size_t len)
{
	ib_dma_sync_single_for_device(device, addr, len, DMA_TO_DEVICE);
}

u32 rpcrdma_rs_local_dma_lkey(const struct ib_pd *pd)
{
	return pd->local_dma_lkey;
}

void rpcrdma_rs_xprt_set_connected(struct rpc_xprt *xprt)
{
	xprt_set_connected(xprt);
}

/*
 * The display address can be replaced at any time (sysfs dstaddr), the old
 * string freed after an RCU grace period: copy it out under RCU.
 */
void rpcrdma_rs_xprt_addr_copy(struct rpc_xprt *xprt, char *buf, size_t len)
{
	const char *s;

	rcu_read_lock();
	s = rcu_dereference(xprt->address_strings[RPC_DISPLAY_ADDR]);
	strscpy(buf, s ? s : "?", len);
	rcu_read_unlock();
}

/* Tasks waiting for a reply; read without the queue's lock (a hint). */
unsigned int rpcrdma_rs_xprt_pending_len(struct rpc_xprt *xprt)
{
	return READ_ONCE(xprt->pending.qlen);
}

void rpcrdma_rs_xprt_clear_connecting(struct rpc_xprt *xprt)
{
	xprt_clear_connecting(xprt);
}

void rpcrdma_rs_xprt_set_bound(struct rpc_xprt *xprt)
{
	xprt_set_bound(xprt);
}

bool rpcrdma_rs_try_module_get(struct module *module)
{
	return try_module_get(module);
}

struct rpc_rqst *rpcrdma_rs_lookup_and_pin_rqst(struct rpc_xprt *xprt, __be32 xid)
{
	struct rpc_rqst *rqst;

	spin_lock(&xprt->queue_lock);
	rqst = xprt_lookup_rqst(xprt, xid);
	if (rqst)
		xprt_pin_rqst(rqst);
	spin_unlock(&xprt->queue_lock);
	return rqst;
}

void rpcrdma_rs_complete_and_unpin_rqst(struct rpc_rqst *rqst, int copied)
{
	struct rpc_xprt *xprt = rqst->rq_xprt;

	spin_lock(&xprt->queue_lock);
	xprt_complete_rqst(rqst->rq_task, copied);
	xprt_unpin_rqst(rqst);
	spin_unlock(&xprt->queue_lock);
}

void rpcrdma_rs_unpin_rqst(struct rpc_rqst *rqst)
{
	struct rpc_xprt *xprt = rqst->rq_xprt;

	spin_lock(&xprt->queue_lock);
	xprt_unpin_rqst(rqst);
	spin_unlock(&xprt->queue_lock);
}

void rpcrdma_rs_set_cwnd(struct rpc_xprt *xprt, unsigned long cwnd)
{
	spin_lock(&xprt->transport_lock);
	xprt->cwnd = cwnd;
	spin_unlock(&xprt->transport_lock);
}

void rpcrdma_rs_clear_rq_cong(struct rpc_xprt *xprt, struct rpc_rqst *rqst)
{
	spin_lock(&xprt->transport_lock);
	rqst->rq_cong = 0;
	spin_unlock(&xprt->transport_lock);
}

void rpcrdma_rs_set_connect_timeout(struct rpc_xprt *xprt,
		unsigned long connect, unsigned long reconnect)
{
	spin_lock(&xprt->transport_lock);
	xprt->connect_timeout = connect;
	if (reconnect < xprt->max_reconnect_timeout)
		xprt->max_reconnect_timeout = reconnect;
	spin_unlock(&xprt->transport_lock);
}

void rpcrdma_rs_reset_cong(struct rpc_xprt *xprt, unsigned long cwnd)
{
	spin_lock(&xprt->transport_lock);
	xprt->cong = 0;
	xprt->cwnd = cwnd;
	spin_unlock(&xprt->transport_lock);
}

void rpcrdma_rs_init_delayed_work(struct delayed_work *dwork,
		void (*fn)(struct work_struct *))
{
	INIT_DELAYED_WORK(dwork, fn);
}

bool rpcrdma_rs_queue_long_delayed(struct delayed_work *dwork, unsigned long delay)
{
	return queue_delayed_work(system_long_wq, dwork, delay);
}

struct delayed_work *rpcrdma_rs_to_delayed_work(struct work_struct *work)
{
	return to_delayed_work(work);
}

int rpcrdma_rs_dereg_mr(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
}

struct page *rpcrdma_rs_virt_to_page(const void *addr)
{
	return virt_to_page(addr);
}

/*
 * A receive buffer flagged XDRBUF_SPARSE_PAGES (NFSv3 GETACL) leaves its
 * page array for the transport to fill: allocate every page its page list
 * touches that is still missing. The upper layer frees them. Called only
 * for such a buffer (Rqst::fill_sparse_pages looks at the flag).
 */
static_assert(XDRBUF_SPARSE_PAGES == 0x04); /* kapi::rpc's copy */

int rpcrdma_rs_alloc_sparse_pages(struct xdr_buf *buf)
{
	unsigned int i, n;

	if (!buf->page_len)
		return 0;
	n = DIV_ROUND_UP(buf->page_base + buf->page_len, PAGE_SIZE);
	for (i = 0; i < n; i++) {
		if (!buf->pages[i])
			buf->pages[i] = alloc_page(GFP_NOWAIT | __GFP_NOWARN);
		if (!buf->pages[i])
			return -ENOMEM;
	}
	return 0;
}

int rpcrdma_rs_dma_map_sg(struct ib_device *device, struct scatterlist *sg,
		int nents, bool to_device)
{
	return ib_dma_map_sg(device, sg, nents,
			     to_device ? DMA_TO_DEVICE : DMA_FROM_DEVICE);
}

void rpcrdma_rs_dma_unmap_sg(struct ib_device *device, struct scatterlist *sg,
		int nents, bool to_device)
{
	ib_dma_unmap_sg(device, sg, nents,
			to_device ? DMA_TO_DEVICE : DMA_FROM_DEVICE);
}

struct dentry *rpcrdma_rs_debugfs_dir(void)
{
	return debugfs_create_dir("rpcrdma_rs", NULL);
}

void rpcrdma_rs_debugfs_u64(struct dentry *dir, const char *name, u64 *value,
		bool writable)
{
	debugfs_create_u64(name, writable ? 0600 : 0444, dir, value);
}

void rpcrdma_rs_debugfs_exit(struct dentry *dir)
{
	debugfs_remove_recursive(dir);
}

/*
 * Makes @rqst carry a backward call whose RPC message (from the XID on) was
 * copied to @call, with @reply as the buffer the callback service encodes
 * its reply into. RPC_BC_PA_IN_USE tells xprt_release to hand the request
 * to bc_free_rqst rather than free_slot; a NULL rq_buffer tells our
 * send_request that it carries a backward reply.
 */
void rpcrdma_rs_bc_prepare(struct rpc_rqst *rqst, struct rpc_xprt *xprt,
		void *call, size_t len, void *reply, size_t reply_len)
{
	memset(rqst, 0, sizeof(*rqst));
	rqst->rq_xprt = xprt;
	__set_bit(RPC_BC_PA_IN_USE, &rqst->rq_bc_pa_state);
	rqst->rq_xid = *(__be32 *)call;
	rqst->rq_private_buf.len = len;
	rqst->rq_rcv_buf.head[0].iov_base = call;
	rqst->rq_rcv_buf.head[0].iov_len = len;
	rqst->rq_rcv_buf.len = len;
	rqst->rq_rcv_buf.buflen = len;
	xdr_buf_init(&rqst->rq_snd_buf, reply, reply_len);
}

/*
 * Queues a prepared backward call for the callback service, holding a
 * transport reference until bc_free_rqst. False if no service is attached.
 *
 * The NFS client's callback teardown clears xprt->bc_serv under
 * bc_pa_lock before it drains sv_cb_list and destroys the service (7.x);
 * reading the pointer and queueing under the same lock means a call is
 * either queued before the drain or sees no service, never queued onto a
 * service being freed. On kernels whose teardown does not take the lock
 * it costs one uncontended lock. Called from the Receive completion work
 * (process context), as the kernel's own enqueue is.
 */
bool rpcrdma_rs_bc_enqueue(struct rpc_rqst *rqst)
{
	struct rpc_xprt *xprt = rqst->rq_xprt;
	struct svc_serv *serv;

	spin_lock(&xprt->bc_pa_lock);
	serv = xprt->bc_serv;
	if (serv) {
		xprt_get(xprt);
		lwq_enqueue(&rqst->rq_bc_list, &serv->sv_cb_list);
		svc_pool_wake_idle_thread(&serv->sv_pools[0]);
	}
	spin_unlock(&xprt->bc_pa_lock);
	return serv;
}

/*
 * A call and reply buffer of @size bytes for @task's request, too large
 * for its slot's own page: pages from the page allocator, one compound
 * allocation (a mapping of them takes page references, which a kmalloc'ed
 * buffer could not give). SUNRPC's rpc_malloc is not exported on every
 * supported kernel line (7.x). NULL makes the RPC layer retry later.
 */
struct page *rpcrdma_rs_alloc_buf(struct rpc_task *task, size_t size)
{
	return alloc_pages(rpc_task_gfp_mask() | __GFP_COMP | __GFP_NOWARN,
			   get_order(size));
}

/* Drops the allocation's own reference: mappings may hold others. */
void rpcrdma_rs_free_buf(struct page *page)
{
	put_page(page);
}

/*
 * The ids trace events print for @rqst's task ("task:%08x@%08x", as SUNRPC's
 * and the C client's events do): 0 and -1 when it has none.
 */
void rpcrdma_rs_rqst_task_ids(const struct rpc_rqst *rqst, u32 *task_id,
			      u32 *client_id)
{
	const struct rpc_task *task = rqst->rq_task;

	*task_id = 0;
	*client_id = ~0U;
	if (!task)
		return;
#if IS_ENABLED(CONFIG_SUNRPC_DEBUG) || IS_ENABLED(CONFIG_TRACEPOINTS)
	*task_id = task->tk_pid;
#endif
	if (task->tk_client)
		*client_id = task->tk_client->cl_clid;
}

/*
 * The server side. The xpt_flags bits kapi::svc::XptFlag names, the same
 * on every supported kernel line.
 */
static_assert(XPT_CONN == 1 && XPT_CLOSE == 2 && XPT_DATA == 3 && XPT_DEAD == 5);

static size_t rpcrdma_rs_sockaddr_len(const struct sockaddr *sa)
{
	switch (sa->sa_family) {
	case AF_INET:
		return sizeof(struct sockaddr_in);
	case AF_INET6:
		return sizeof(struct sockaddr_in6);
	}
	return 0;
}

/*
 * svc_xprt_init() of @xprt, a transport of class @xcl, with its local
 * address and, for a connection, its peer's (stored with port 0, as
 * svcrdma does, so that the duplicate reply cache survives reconnects); a
 * transport without a peer is a listener. Every transport takes part in
 * congestion control (NFSv4 needs it). The transport keeps a reference of
 * @net of its own beside the core's (svc_xprt_enqueue()'s trace event
 * reads the namespace, which may race with the core's last put): see
 * rpcrdma_rs_svc_xprt_uninit(). The caller checked that both addresses are
 * IPv4 or IPv6.
 */
void rpcrdma_rs_svc_xprt_init(struct net *net, struct svc_xprt_class *xcl,
		struct svc_xprt *xprt, struct svc_serv *serv,
		const struct sockaddr *local, const struct sockaddr *remote)
{
	size_t llen = rpcrdma_rs_sockaddr_len(local);
	size_t rlen = remote ? rpcrdma_rs_sockaddr_len(remote) : 0;

	svc_xprt_init(net, xcl, xprt, serv);
	get_net(net);
	set_bit(XPT_CONG_CTRL, &xprt->xpt_flags);
	if (llen)
		svc_xprt_set_local(xprt, (struct sockaddr *)local, llen);
	if (rlen) {
		svc_xprt_set_remote(xprt, (struct sockaddr *)remote, rlen);
		rpc_set_port((struct sockaddr *)&xprt->xpt_remote, 0);
	} else if (!remote) {
		set_bit(XPT_LISTENER, &xprt->xpt_flags);
		strcpy(xprt->xpt_remotebuf, "listener");
	}
}

/*
 * Gives back the transport's own namespace reference and, if @core (the
 * core never took the transport, so its svc_xprt_free() did not run), the
 * one svc_xprt_init() took for the core.
 */
void rpcrdma_rs_svc_xprt_uninit(struct svc_xprt *xprt, bool core)
{
	struct net *net = xprt->xpt_net;

	if (core)
		put_net_track(net, &xprt->ns_tracker);
	put_net(net);
}

void rpcrdma_rs_svc_xprt_set_flag(struct svc_xprt *xprt, unsigned int bit)
{
	set_bit(bit, &xprt->xpt_flags);
}

void rpcrdma_rs_svc_xprt_clear_flag(struct svc_xprt *xprt, unsigned int bit)
{
	clear_bit(bit, &xprt->xpt_flags);
}

bool rpcrdma_rs_svc_xprt_test_flag(struct svc_xprt *xprt, unsigned int bit)
{
	return test_bit(bit, &xprt->xpt_flags);
}

/* @xprt's peer address as text (set when it was made), in @len bytes. */
void rpcrdma_rs_svc_xprt_peer_copy(struct svc_xprt *xprt, char *buf, size_t len)
{
	strscpy(buf, xprt->xpt_remotebuf, len);
}

/* Whether @svc has a backchannel transport already. */
bool rpcrdma_rs_svc_xprt_has_bc(struct svc_xprt *svc)
{
	return READ_ONCE(svc->xpt_bc_xprt);
}

/*
 * Makes @xprt, a backchannel transport just set up, @svc's: bound and
 * connected for as long as @svc's connection lasts, found by the next
 * callback client made for @svc (rpc_create() reuses it), and held by
 * @svc with a reference that svc_xprt_free() drops.
 */
void rpcrdma_rs_link_bc_xprt(struct svc_xprt *svc, struct rpc_xprt *xprt)
{
	xprt_set_bound(xprt);
	xprt_set_connected(xprt);
	xprt_get(xprt);
	xprt->bc_xprt = svc;
	WRITE_ONCE(svc->xpt_bc_xprt, xprt);
}

/*
 * @rqstp as xpo_recvfrom() starts: on a kernel whose reply pages share
 * the call's array (6.12), an empty reply page range, for a call that
 * brings nothing; no context of the last request.
 */
void rpcrdma_rs_svc_recv_begin(struct svc_rqst *rqstp)
{
#ifndef RPCRDMA_RS_SVC_SPLIT_PAGES
	rqstp->rq_respages = rqstp->rq_pages;
	rqstp->rq_next_page = rqstp->rq_respages;
#endif
	rqstp->rq_xprt_ctxt = NULL;
}

/*
 * Readies @rqstp for a call of @len bytes, laid out as the socket
 * transports do: its first page's worth in the head (rq_pages[0]), the
 * rest from offset 0 of the following pages, nothing in the tail.
 * -EMSGSIZE if the call does not fit the pages svc_alloc_arg() gave
 * rq_arg. The caller then writes all @len bytes with
 * rpcrdma_rs_svc_recv_put() and ends with rpcrdma_rs_svc_recv_done().
 */
int rpcrdma_rs_svc_recv_room(struct svc_rqst *rqstp, u32 len)
{
	struct xdr_buf *arg = &rqstp->rq_arg;
	u32 head = min_t(u32, len, PAGE_SIZE);

	if (!len || arg->head[0].iov_len < head || len - head > arg->page_len ||
	    arg->page_base)
		return -EMSGSIZE;
	return 0;
}

/*
 * Writes @len bytes of @buf (zeros if @buf is NULL) at offset @at of the
 * call rpcrdma_rs_svc_recv_room() readied: @at + @len is within its
 * length (the caller's word).
 */
void rpcrdma_rs_svc_recv_put(struct svc_rqst *rqstp, u32 at, const u8 *buf, u32 len)
{
	struct xdr_buf *arg = &rqstp->rq_arg;

	while (len) {
		u32 off = at < PAGE_SIZE ? at : (at - PAGE_SIZE) % PAGE_SIZE;
		u32 n = min_t(u32, len, PAGE_SIZE - off);
		u8 *dst = at < PAGE_SIZE ? (u8 *)arg->head[0].iov_base + off :
			(u8 *)page_address(arg->pages[(at - PAGE_SIZE) / PAGE_SIZE]) + off;

		if (buf) {
			memcpy(dst, buf, n);
			buf += n;
		} else {
			memset(dst, 0, n);
		}
		at += n;
		len -= n;
	}
}

/*
 * As rpcrdma_rs_svc_recv_put(), from @len bytes at @offset of @page
 * (inside it: the caller's word).
 */
void rpcrdma_rs_svc_recv_put_page(struct svc_rqst *rqstp, u32 at, struct page *page,
				  u32 offset, u32 len)
{
	u8 *src = kmap_local_page(page);

	rpcrdma_rs_svc_recv_put(rqstp, at, src + offset, len);
	kunmap_local(src);
}

/*
 * What ends every call given to @rqstp whose arguments take the head page
 * and @npages pages after it: the reply's pages after the call's on a
 * kernel whose arrays are shared (6.12: a separate array on 7.x is left
 * alone); the transport's addresses, IPPROTO_MAX as svcrdma, RQ_SECURE
 * set and RQ_LOCAL cleared (the thread's last request may have been
 * another transport's).
 */
static void rpcrdma_rs_svc_recv_end(struct svc_rqst *rqstp, u32 npages)
{
	rqstp->rq_arg.buflen = (1 + npages) * PAGE_SIZE;
#ifndef RPCRDMA_RS_SVC_SPLIT_PAGES
	rqstp->rq_respages = &rqstp->rq_pages[1 + npages];
	rqstp->rq_next_page = rqstp->rq_respages + 1;
#endif
	rqstp->rq_prot = IPPROTO_MAX;
	svc_xprt_copy_addrs(rqstp, rqstp->rq_xprt);
	set_bit(RQ_SECURE, &rqstp->rq_flags);
	clear_bit(RQ_LOCAL, &rqstp->rq_flags);
}

/*
 * Ends the call of @len bytes rpcrdma_rs_svc_recv_room() readied and
 * rpcrdma_rs_svc_recv_put() wrote: rq_arg's lengths, then as
 * rpcrdma_rs_svc_recv_end().
 */
void rpcrdma_rs_svc_recv_done(struct svc_rqst *rqstp, u32 len)
{
	struct xdr_buf *arg = &rqstp->rq_arg;
	u32 head = min_t(u32, len, PAGE_SIZE);

	arg->head[0].iov_len = head;
	arg->page_len = len - head;
	arg->tail[0].iov_base = NULL;
	arg->tail[0].iov_len = 0;
	arg->len = len;
	rpcrdma_rs_svc_recv_end(rqstp, DIV_ROUND_UP(len - head, PAGE_SIZE));
}

/*
 * Gives @rqstp a call whose one data item arrived in @npages pages of
 * ours, @page_len bytes of them from offset 0 of the first (its XDR
 * roundup included), laid out as svcrdma lays such a call: @inline_len
 * bytes of @inline (the RPC message sent inline) copied to the head
 * page, the head the first @pos of them, the tail the rest; the data
 * item's pages replacing the thread's own after the head page, whose
 * references are dropped. The references of @pages pass to @rqstp
 * (the core keeps or drops them as its own). -EMSGSIZE, with nothing
 * changed and the references still the caller's, if the call does not
 * fit the thread's pages. The caller's word: @pages are @npages pages
 * it owns a reference of each.
 */
int rpcrdma_rs_svc_recv_item(struct svc_rqst *rqstp, const u8 *inline_msg, u32 inline_len,
			     u32 pos, struct page *const *pages, u32 npages, u32 page_len)
{
	struct xdr_buf *arg = &rqstp->rq_arg;
	u32 i;

	if (!inline_len || inline_len > PAGE_SIZE || pos > inline_len ||
	    arg->head[0].iov_len < PAGE_SIZE || arg->page_base ||
	    arg->pages != rqstp->rq_pages + 1 ||
	    (u64)npages * PAGE_SIZE > arg->page_len || !npages ||
	    page_len > npages * PAGE_SIZE || page_len <= (npages - 1) * PAGE_SIZE ||
	    inline_len + page_len > INT_MAX)
		return -EMSGSIZE;
	memcpy(arg->head[0].iov_base, inline_msg, inline_len);
	for (i = 0; i < npages; i++) {
		if (arg->pages[i])
			put_page(arg->pages[i]);
		arg->pages[i] = pages[i];
	}
	arg->tail[0].iov_base = (u8 *)arg->head[0].iov_base + pos;
	arg->tail[0].iov_len = inline_len - pos;
	arg->head[0].iov_len = pos;
	arg->page_len = page_len;
	arg->len = inline_len + page_len;
	rpcrdma_rs_svc_recv_end(rqstp, npages);
	return 0;
}

/*
 * Whether @page is one of the reply's pages, [rq_respages, rq_next_page):
 * those the core lets go after xpo_sendto() returns (putting its
 * references and leaving the slots for svc_alloc_arg() to refill), so
 * that nothing writes them again while a reference of ours keeps them.
 * @slot, if not NULL, is where the page is said to sit.
 */
static bool rpcrdma_rs_svc_is_reply_page(struct svc_rqst *rqstp, struct page *const *slot,
					 struct page *page)
{
	if (slot)
		return slot >= rqstp->rq_respages && slot < rqstp->rq_next_page &&
		       *slot == page;
	return rqstp->rq_next_page > rqstp->rq_respages && rqstp->rq_respages[0] == page;
}

/*
 * Where byte @at of @rqstp's encoded reply (rq_res) lies: its page in
 * *@pagep, its offset there in *@offsetp; returns how many bytes of the
 * reply follow it in that page, contiguously. -EINVAL if @at is past the
 * reply, or if that page is not one of the reply's own pages (the head
 * and tail must sit in the first of them, the page list among them):
 * such bytes are to be copied, not mapped.
 */
int rpcrdma_rs_svc_reply_piece(struct svc_rqst *rqstp, u32 at, struct page **pagep,
			       u32 *offsetp)
{
	const struct xdr_buf *res = &rqstp->rq_res;
	const struct kvec *vec = NULL;
	struct page *const *slot = NULL;
	struct page *page;
	u32 off, n;

	if (at < res->head[0].iov_len) {
		vec = &res->head[0];
	} else if (at - res->head[0].iov_len < res->page_len) {
		u32 pos = res->page_base + (at - res->head[0].iov_len);

		slot = &res->pages[pos >> PAGE_SHIFT];
		page = *slot;
		off = offset_in_page(pos);
		n = min_t(u32, res->page_len - (at - res->head[0].iov_len), PAGE_SIZE - off);
	} else if (at - res->head[0].iov_len - res->page_len < res->tail[0].iov_len) {
		at -= res->head[0].iov_len + res->page_len;
		vec = &res->tail[0];
	} else {
		return -EINVAL;
	}
	if (vec) {
		const u8 *p = (const u8 *)vec->iov_base + at;

		if (!virt_addr_valid(p))
			return -EINVAL;
		page = virt_to_page(p);
		off = offset_in_page(p);
		n = min_t(u32, vec->iov_len - at, PAGE_SIZE - off);
	}
	if (!page || !rpcrdma_rs_svc_is_reply_page(rqstp, slot, page))
		return -EINVAL;
	*pagep = page;
	*offsetp = off;
	return n;
}
