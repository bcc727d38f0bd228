// SPDX-License-Identifier: GPL-2.0
/* Out-of-line forwards for static inlines and macros; see helpers.h. */
#include <rdma/ib_verbs.h>
#include "helpers.h"

const char *rpcrdma_rs_ib_device_name(const struct ib_device *device)
{
	return dev_name(&device->dev);
}
