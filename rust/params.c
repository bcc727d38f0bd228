// SPDX-License-Identifier: GPL-2.0
/*
 * Module parameters of rpcrdma_rs. The 6.12 Rust module! macro cannot declare
 * parameters, so they live here; rust/params.rs reads and clamps them.
 * Changes take effect for transports created (mounts made) afterwards.
 */
#include <linux/errno.h>
#include <linux/moduleparam.h>
#include <linux/sysfs.h>
#include <linux/inet.h>
#include "helpers.h"

static unsigned int slot_table_entries = 128;
module_param(slot_table_entries, uint, 0644);
MODULE_PARM_DESC(slot_table_entries,
		 "RPC requests in flight per transport (4..16384, default 128)");

static unsigned int max_inline_read = 4096;
module_param(max_inline_read, uint, 0644);
MODULE_PARM_DESC(max_inline_read,
		 "Largest reply received inline, in bytes; the Receive buffer size offered to the server (1024..65536, default 4096)");

static unsigned int max_inline_write = 4096;
module_param(max_inline_write, uint, 0644);
MODULE_PARM_DESC(max_inline_write,
		 "Largest call sent inline, in bytes (1024..65536, default 4096)");

static bool server;
module_param(server, bool, 0444);
MODULE_PARM_DESC(server,
		 "Register the 'rdma' server transport class, so that knfsd serves NFS over rpcrdma_rs (experimental; default off)");

static unsigned int server_credits = 64;
module_param(server_credits, uint, 0644);
MODULE_PARM_DESC(server_credits,
		 "Credits the server grants each connection: the calls a client may have in flight, each with a Receive of its own (8..512, default 64, as svcrdma's max_requests)");

static unsigned int probe_interval = 5;
module_param(probe_interval, uint, 0644);
MODULE_PARM_DESC(probe_interval,
		 "Seconds without a Receive, while RPCs wait for replies, before the connection is probed with a zero-length RDMA Write: a dead peer is found within about twice this plus the device's retry time (0 = never probe, up to 3600; default 5)");

/*
 * RPC-over-RDMA versions to use, highest first: "2,1" probes each new
 * server with Version Two and falls back to Version One; "1" never probes;
 * "2" insists on Version Two. Kept as a bit mask (bit n = version n) so
 * that readers need no lock.
 */
static unsigned int versions_mask = (1U << 2) | (1U << 1);

static int versions_set(const char *val, const struct kernel_param *kp)
{
	unsigned int mask = 0;
	const char *p = val;

	while (*p && *p != '\n') {
		if (*p == '1' || *p == '2')
			mask |= 1U << (*p - '0');
		else if (*p != ',' && *p != ' ')
			return -EINVAL;
		p++;
	}
	if (!mask)
		return -EINVAL;
	WRITE_ONCE(versions_mask, mask);
	return 0;
}

static int versions_get(char *buf, const struct kernel_param *kp)
{
	unsigned int mask = READ_ONCE(versions_mask);

	if (mask == ((1U << 2) | (1U << 1)))
		return sysfs_emit(buf, "2,1\n");
	return sysfs_emit(buf, "%s\n", mask & (1U << 2) ? "2" : "1");
}

static const struct kernel_param_ops versions_ops = {
	.set = versions_set,
	.get = versions_get,
};
module_param_cb(versions, &versions_ops, NULL, 0644);
MODULE_PARM_DESC(versions,
		 "RPC-over-RDMA versions, highest first: 2,1 (default: probe Version Two, fall back to One), 1 or 2");

unsigned int rpcrdma_rs_param_versions(void)
{
	return READ_ONCE(versions_mask);
}

unsigned int rpcrdma_rs_param_slot_table_entries(void)
{
	return READ_ONCE(slot_table_entries);
}

unsigned int rpcrdma_rs_param_max_inline_read(void)
{
	return READ_ONCE(max_inline_read);
}

unsigned int rpcrdma_rs_param_max_inline_write(void)
{
	return READ_ONCE(max_inline_write);
}

unsigned int rpcrdma_rs_param_probe_interval(void)
{
	return READ_ONCE(probe_interval);
}

unsigned int rpcrdma_rs_param_server_credits(void)
{
	return READ_ONCE(server_credits);
}

/*
 * The verbs layer's loopback self-test: writing an IPv4 address of a local
 * RDMA device runs it (listen on the address, connect to it, Send, RDMA
 * Write and Read, Send With Invalidate, a held Receive) and the write
 * fails with its error if it does not pass. Reading shows the last result.
 * A test hook: do not write it while the module is being removed.
 */
static int verbs_selftest_result = 1;

static int verbs_selftest_set(const char *val, const struct kernel_param *kp)
{
	__be32 addr;
	int ret;

	if (!in4_pton(val, -1, (u8 *)&addr, '\n', NULL))
		return -EINVAL;
	ret = rpcrdma_rs_verbs_selftest((__force unsigned int)addr);
	WRITE_ONCE(verbs_selftest_result, ret);
	return ret;
}

static int verbs_selftest_get(char *buf, const struct kernel_param *kp)
{
	int ret = READ_ONCE(verbs_selftest_result);

	if (ret == 1)
		return sysfs_emit(buf, "not run\n");
	if (ret == 0)
		return sysfs_emit(buf, "passed\n");
	return sysfs_emit(buf, "failed (%d)\n", ret);
}

static const struct kernel_param_ops verbs_selftest_ops = {
	.set = verbs_selftest_set,
	.get = verbs_selftest_get,
};
module_param_cb(verbs_selftest, &verbs_selftest_ops, NULL, 0600);
MODULE_PARM_DESC(verbs_selftest,
		 "Write a local RDMA device's IPv4 address to run the verbs layer's loopback self-test (a test hook)");

bool rpcrdma_rs_param_server(void)
{
	return READ_ONCE(server);
}
