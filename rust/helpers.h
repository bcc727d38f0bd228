/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Out-of-line forwards for the static inline functions and macros of SUNRPC,
 * ib_core and the workqueue API that Rust cannot call directly. Each is a
 * one-line forward to the kernel's own definition, or that forward in a loop
 * over an array (a page list is referenced in one call, not a call a page);
 * no other logic lives here.
 */
#ifndef RPCRDMA_RS_HELPERS_H
#define RPCRDMA_RS_HELPERS_H

#include <linux/types.h>

struct ib_device;
struct page;
struct ib_pd;
struct ib_cq;
struct ib_qp;
struct ib_send_wr;
struct ib_recv_wr;
struct rdma_cm_id;
struct rdma_cm_event;
struct rpc_xprt;
struct rpc_task;
struct module;
struct net;
struct delayed_work;
struct work_struct;
struct xdr_buf;
struct rpc_rqst;

/* rdma_cm and verbs */
struct rdma_cm_id *rpcrdma_rs_create_id(struct net *net,
		int (*handler)(struct rdma_cm_id *, struct rdma_cm_event *),
		void *context);
struct ib_pd *rpcrdma_rs_alloc_pd(struct ib_device *device);
void rpcrdma_rs_dealloc_pd(struct ib_pd *pd);
struct ib_cq *rpcrdma_rs_alloc_cq(struct ib_device *device, void *context,
		int nr_cqe);
int rpcrdma_rs_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr,
		const struct ib_recv_wr **bad_wr);
void rpcrdma_rs_qp_to_error(struct ib_qp *qp);
bool rpcrdma_rs_try_get_page(struct page *page);
void rpcrdma_rs_put_page(struct page *page);
struct scatterlist;
unsigned int rpcrdma_rs_sg_get_pages(struct scatterlist *sg, struct page *const *pages,
		unsigned int n, unsigned int offset, unsigned int len);
void rpcrdma_rs_sg_put_pages(struct scatterlist *sg, unsigned int n);
int rpcrdma_rs_page_count(struct page *page);
void *rpcrdma_rs_page_address(struct page *page);
u64 rpcrdma_rs_dma_map_to_device(struct ib_device *device, void *addr, size_t len);
u64 rpcrdma_rs_dma_map_from_device(struct ib_device *device, void *addr, size_t len);
u64 rpcrdma_rs_dma_map_page(struct ib_device *device, struct page *page,
		unsigned long offset, size_t len);
void rpcrdma_rs_dma_unmap_page(struct ib_device *device, u64 addr, size_t len);
int rpcrdma_rs_dma_mapping_error(struct ib_device *device, u64 addr);
void rpcrdma_rs_dma_unmap_to_device(struct ib_device *device, u64 addr, size_t len);
void rpcrdma_rs_dma_unmap_from_device(struct ib_device *device, u64 addr, size_t len);
void rpcrdma_rs_dma_sync_for_cpu(struct ib_device *device, u64 addr, size_t len);
void rpcrdma_rs_dma_sync_for_device(struct ib_device *device, u64 addr, size_t len);
u32 rpcrdma_rs_local_dma_lkey(const struct ib_pd *pd);

/* SUNRPC transport state bits */
void rpcrdma_rs_xprt_set_connected(struct rpc_xprt *xprt);
void rpcrdma_rs_xprt_addr_copy(struct rpc_xprt *xprt, char *buf, size_t len);
unsigned int rpcrdma_rs_xprt_pending_len(struct rpc_xprt *xprt);
void rpcrdma_rs_xprt_clear_connecting(struct rpc_xprt *xprt);
void rpcrdma_rs_xprt_set_bound(struct rpc_xprt *xprt);

bool rpcrdma_rs_try_module_get(struct module *module);

/* SUNRPC calls that must run under one of the transport's spinlocks */
struct rpc_rqst;
struct rpc_rqst *rpcrdma_rs_lookup_and_pin_rqst(struct rpc_xprt *xprt, __be32 xid);
void rpcrdma_rs_complete_and_unpin_rqst(struct rpc_rqst *rqst, int copied);
void rpcrdma_rs_unpin_rqst(struct rpc_rqst *rqst);
void rpcrdma_rs_set_cwnd(struct rpc_xprt *xprt, unsigned long cwnd);
void rpcrdma_rs_clear_rq_cong(struct rpc_xprt *xprt, struct rpc_rqst *rqst);
void rpcrdma_rs_set_connect_timeout(struct rpc_xprt *xprt,
		unsigned long connect, unsigned long reconnect);
void rpcrdma_rs_reset_cong(struct rpc_xprt *xprt, unsigned long cwnd);

/* delayed work on system_long_wq */
void rpcrdma_rs_init_delayed_work(struct delayed_work *dwork,
		void (*fn)(struct work_struct *));
bool rpcrdma_rs_queue_long_delayed(struct delayed_work *dwork, unsigned long delay);
struct delayed_work *rpcrdma_rs_to_delayed_work(struct work_struct *work);

/* FRWR memory registration */
struct ib_mr;
struct scatterlist;
struct rpc_rqst;
int rpcrdma_rs_dereg_mr(struct ib_mr *mr);
struct page *rpcrdma_rs_virt_to_page(const void *addr);
int rpcrdma_rs_alloc_sparse_pages(struct xdr_buf *buf);
int rpcrdma_rs_dma_map_sg(struct ib_device *device, struct scatterlist *sg,
		int nents, bool to_device);
void rpcrdma_rs_dma_unmap_sg(struct ib_device *device, struct scatterlist *sg,
		int nents, bool to_device);

/* NFSv4.1 backchannel (RFC 8167): the generic helpers are not exported */
void rpcrdma_rs_bc_prepare(struct rpc_rqst *rqst, struct rpc_xprt *xprt,
		void *call, size_t len, void *reply, size_t reply_len);
bool rpcrdma_rs_bc_enqueue(struct rpc_rqst *rqst);

/* call and reply buffers too large for a slot (rpc_malloc is not exported
 * on every kernel line) */
struct page *rpcrdma_rs_alloc_buf(struct rpc_task *task, size_t size);
void rpcrdma_rs_free_buf(struct page *page);

/* debugfs counters (rpcrdma_rs/ in debugfs), values owned by Rust */
struct dentry;
struct dentry *rpcrdma_rs_debugfs_dir(void);
void rpcrdma_rs_debugfs_u64(struct dentry *dir, const char *name, u64 *value,
		bool writable);
void rpcrdma_rs_debugfs_exit(struct dentry *dir);

/* the passive side and the verbs self-test */
struct net *rpcrdma_rs_init_net(void);
void *rpcrdma_rs_current_task(void);
void rpcrdma_rs_cm_id_set_handler(struct rdma_cm_id *id,
		int (*handler)(struct rdma_cm_id *, struct rdma_cm_event *),
		void *context);
/* defined in Rust (rpcrdma.rs): runs the verbs loopback self-test on the
 * IPv4 address (network byte order); 0 if it passed */
int rpcrdma_rs_verbs_selftest(unsigned int addr);

/* module parameters (params.c) */
unsigned int rpcrdma_rs_param_versions(void);
unsigned int rpcrdma_rs_param_slot_table_entries(void);
unsigned int rpcrdma_rs_param_max_inline_read(void);
unsigned int rpcrdma_rs_param_max_inline_write(void);
unsigned int rpcrdma_rs_param_probe_interval(void);
unsigned int rpcrdma_rs_param_server_credits(void);
bool rpcrdma_rs_param_server(void);

void rpcrdma_rs_rqst_task_ids(const struct rpc_rqst *rqst, u32 *task_id,
			      u32 *client_id);

/* the server side (kapi::svc) */
struct svc_xprt;
struct svc_xprt_class;
struct svc_serv;
struct svc_rqst;
struct sockaddr;
void rpcrdma_rs_svc_xprt_init(struct net *net, struct svc_xprt_class *xcl,
		struct svc_xprt *xprt, struct svc_serv *serv,
		const struct sockaddr *local, const struct sockaddr *remote);
void rpcrdma_rs_svc_xprt_uninit(struct svc_xprt *xprt, bool core);
void rpcrdma_rs_svc_xprt_set_flag(struct svc_xprt *xprt, unsigned int bit);
void rpcrdma_rs_svc_xprt_clear_flag(struct svc_xprt *xprt, unsigned int bit);
bool rpcrdma_rs_svc_xprt_test_flag(struct svc_xprt *xprt, unsigned int bit);
bool rpcrdma_rs_svc_xprt_has_bc(struct svc_xprt *svc);
void rpcrdma_rs_svc_xprt_peer_copy(struct svc_xprt *xprt, char *buf, size_t len);
void rpcrdma_rs_link_bc_xprt(struct svc_xprt *svc, struct rpc_xprt *xprt);
void rpcrdma_rs_svc_recv_begin(struct svc_rqst *rqstp);
int rpcrdma_rs_svc_recv_room(struct svc_rqst *rqstp, u32 len);
void rpcrdma_rs_svc_recv_put(struct svc_rqst *rqstp, u32 at, const u8 *buf, u32 len);
void rpcrdma_rs_svc_recv_put_page(struct svc_rqst *rqstp, u32 at, struct page *page,
				  u32 offset, u32 len);
void rpcrdma_rs_svc_recv_done(struct svc_rqst *rqstp, u32 len);
int rpcrdma_rs_svc_recv_item(struct svc_rqst *rqstp, const u8 *inline_msg, u32 inline_len,
			     u32 pos, struct page *const *pages, u32 npages, u32 page_len);
int rpcrdma_rs_svc_reply_piece(struct svc_rqst *rqstp, u32 at, struct page **pagep,
			       u32 *offsetp);

#endif /* RPCRDMA_RS_HELPERS_H */
