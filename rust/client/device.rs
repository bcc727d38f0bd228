// SPDX-License-Identifier: GPL-2.0

//! Tracking of RDMA devices.

use kernel::{c_str, prelude::*, str::CStr};

use crate::kapi::ib;

/// The module's ib_core client.
pub(crate) struct Devices;

impl ib::Client for Devices {
    const NAME: &'static CStr = c_str!("rpcrdma_rs");

    fn add(device: &ib::Device) -> Result {
        pr_info!("RDMA device {} available\n", device.name());
        Ok(())
    }

    fn remove(device: &ib::Device) {
        pr_info!("RDMA device {} removed\n", device.name());
    }
}
