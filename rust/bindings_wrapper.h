/* SPDX-License-Identifier: GPL-2.0 */
/* The C APIs rpcrdma_rs uses, for bindgen (see Kbuild). */
#include <linux/sunrpc/xprt.h>
#include <linux/sunrpc/sched.h>
#include <linux/sunrpc/xdr.h>
#include <linux/sunrpc/svc.h>
#include <linux/sunrpc/bc_xprt.h>
#include <linux/sunrpc/addr.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>
#include <rdma/rw.h>
#include <linux/sunrpc/clnt.h>
#include "helpers.h"
#include "tracepoints.h"
#include <linux/errno.h>
#include <linux/seq_file.h>
#include <linux/scatterlist.h>
