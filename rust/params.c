// SPDX-License-Identifier: GPL-2.0
/*
 * Module parameters of rpcrdma_rs. The 6.12 Rust module! macro cannot declare
 * parameters, so they live here; rust/params.rs reads and clamps them.
 * Changes take effect for transports created (mounts made) afterwards.
 */
#include <linux/moduleparam.h>
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
