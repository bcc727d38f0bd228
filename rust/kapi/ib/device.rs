// SPDX-License-Identifier: GPL-2.0

//! RDMA devices and ib_core clients (`struct ib_client`).
//!
//! A [`ClientRegistration`] asks ib_core to report every RDMA device that
//! appears or goes away to a [`Client`]. Dropping it unregisters; ib_core then
//! reports the removal of every device still present first.

use core::{marker::PhantomData, pin::Pin};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox},
    error::{to_result, Result},
    ffi::{c_int, c_void},
    str::CStr,
    types::Opaque,
};

use crate::sys;

/// An RDMA device, borrowed from ib_core for the duration of a callback.
///
/// # Invariants
///
/// A `&Device` is a live, registered `ib_device` for the reference's
/// lifetime (made only by [`Device::from_raw`] in the client callbacks).
#[repr(transparent)]
pub(crate) struct Device(Opaque<sys::ib_device>);

impl Device {
    /// # Safety
    ///
    /// `ptr` must point to a registered `ib_device` that stays valid for `'a`.
    pub(super) unsafe fn from_raw<'a>(ptr: *mut sys::ib_device) -> &'a Device {
        // SAFETY: `Device` is `repr(transparent)` over `Opaque<ib_device>`,
        // and the caller guarantees validity for `'a`.
        unsafe { &*ptr.cast::<Device>() }
    }

    /// The device's name, e.g. `rxe0`, copied. A device can be renamed
    /// at any time (`rdma dev set NAME name NEW`), which rewrites the
    /// name in place: it is read a byte at a time, as C reads a field
    /// another thread may change, and never kept.
    pub(crate) fn name(&self) -> DeviceName {
        let mut n = DeviceName { buf: [0; DEVICE_NAME_LEN] };
        // SAFETY: the device is valid (type invariant); only the field's
        // address is taken.
        let src = unsafe { core::ptr::addr_of!((*self.0.get()).name) }.cast::<u8>();
        // Room for the NUL the copy always ends with.
        let len = (sys::IB_DEVICE_NAME_MAX as usize).min(DEVICE_NAME_LEN - 1);
        for (i, d) in n.buf.iter_mut().enumerate().take(len) {
            // SAFETY: the name is an array of the device's, at least `len`
            // bytes; each byte is read once, a torn name being the worst a
            // rename can cause.
            let b = unsafe { core::ptr::read_volatile(src.add(i)) };
            if b == 0 {
                break;
            }
            *d = b;
        }
        n
    }

    /// What the device can do.
    // The limits are ints on 6.12 and u32s on 7.x: converting them is a
    // no-op on one line only.
    #[allow(clippy::useless_conversion)]
    pub(crate) fn caps(&self) -> DeviceCaps {
        // SAFETY: the device is valid (type invariant); `attrs` is plain
        // data, set when the device registered.
        let attrs = unsafe { &(*self.0.get()).attrs };
        DeviceCaps {
            max_qp_wr: u32::try_from(attrs.max_qp_wr).unwrap_or(0),
            max_send_sge: u32::try_from(attrs.max_send_sge).unwrap_or(0),
            max_qp_rd_atom: u32::try_from(attrs.max_qp_rd_atom).unwrap_or(0),
            max_qp_init_rd_atom: u32::try_from(attrs.max_qp_init_rd_atom).unwrap_or(0),
            frwr: attrs.device_cap_flags & (sys::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64) != 0,
            max_fast_reg_pages: attrs.max_fast_reg_page_list_len,
        }
    }

    /// True if the device does its DMA in software (soft-RoCE, siw):
    /// mapping a scatterlist gives the CPU addresses, and syncing and
    /// unmapping do nothing (`ib_uses_virt_dma`). Callers keep the answer:
    /// it never changes for a registered device.
    pub(super) fn uses_virt_dma(&self) -> bool {
        // SAFETY: the device is valid (type invariant); `dma_device` is set
        // before it registers.
        cfg!(CONFIG_INFINIBAND_VIRT_DMA) && unsafe { (*self.0.get()).dma_device }.is_null()
    }

    /// The device, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::ib_device {
        self.0.get()
    }
}

/// Bytes of a copied device name, NUL included.
const DEVICE_NAME_LEN: usize = 64;

/// A device's name, copied ([`Device::name`]); prints as the name.
pub(crate) struct DeviceName {
    buf: [u8; DEVICE_NAME_LEN],
}

crate::kapi::compat::printable!(DeviceName);

impl Default for DeviceName {
    /// `?`: no device.
    fn default() -> Self {
        let mut buf = [0; DEVICE_NAME_LEN];
        buf[0] = b'?';
        DeviceName { buf }
    }
}

impl core::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = self.buf.iter().position(|&b| b == 0).unwrap_or(self.buf.len());
        f.write_str(core::str::from_utf8(self.buf.get(..len).unwrap_or(&[])).unwrap_or("?"))
    }
}

/// What a device can do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceCaps {
    /// Largest number of work requests in one queue.
    pub(crate) max_qp_wr: u32,
    /// Largest number of SGEs in a Send.
    pub(crate) max_send_sge: u32,
    /// Largest number of RDMA Reads the device accepts in flight per QP.
    pub(crate) max_qp_rd_atom: u32,
    /// Largest number of RDMA Reads a QP of the device may have in flight
    /// as their initiator.
    pub(crate) max_qp_init_rd_atom: u32,
    /// The device supports fast registration (FRWR).
    pub(crate) frwr: bool,
    /// Most pages one fast registration may cover.
    pub(crate) max_fast_reg_pages: u32,
}

/// Something that wants to hear about RDMA devices.
pub(crate) trait Client {
    /// The client's name in ib_core.
    const NAME: &'static CStr;

    /// A device appeared (or was present when the client registered).
    fn add(device: &Device) -> Result;

    /// A device is going away; it stays valid until this returns.
    fn remove(device: &Device);
}

/// A registered ib_core client; unregistered on drop.
///
/// # Invariants
///
/// `client` was registered with `ib_register_client` by `new` and stays
/// registered, at this pinned address, until `drop` unregisters it.
pub(crate) struct ClientRegistration<T: Client> {
    client: Pin<KBox<Opaque<sys::ib_client>>>,
    _client: PhantomData<T>,
}

// SAFETY: once registered, the `ib_client` is only touched by ib_core under its
// own locks; Rust touches it again only in `drop`.
unsafe impl<T: Client> Send for ClientRegistration<T> {}
// SAFETY: `ClientRegistration` has no methods taking `&self`.
unsafe impl<T: Client> Sync for ClientRegistration<T> {}

impl<T: Client> ClientRegistration<T> {
    /// Registers `T`; `T::add` runs for every device already present.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: `ib_client` is plain C data; all zeroes is its unregistered
        // state (`ib_register_client` initialises the rest).
        let mut raw: sys::ib_client = unsafe { core::mem::zeroed() };
        raw.name = crate::kapi::compat::cstr_ptr(T::NAME);
        raw.add = Some(add_callback::<T>);
        raw.remove = Some(remove_callback::<T>);
        let client = KBox::pin(Opaque::new(raw), GFP_KERNEL)?;
        // SAFETY: `client` is pinned on the heap and outlives the registration
        // (`drop` unregisters before freeing it); its name is `'static`.
        to_result(unsafe { sys::ib_register_client(client.get()) })?;
        Ok(Self { client, _client: PhantomData })
    }
}

impl<T: Client> Drop for ClientRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; this runs once. It returns after every
        // `remove` callback has finished.
        unsafe { sys::ib_unregister_client(self.client.get()) };
    }
}

/// # Safety
///
/// Called by ib_core with a registered device.
unsafe extern "C" fn add_callback<T: Client>(device: *mut sys::ib_device) -> c_int {
    // SAFETY: the device is valid for the duration of the callback.
    let device = unsafe { Device::from_raw(device) };
    match T::add(device) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by ib_core with a device that is being removed.
unsafe extern "C" fn remove_callback<T: Client>(device: *mut sys::ib_device, _data: *mut c_void) {
    // SAFETY: the device stays valid until this callback returns.
    let device = unsafe { Device::from_raw(device) };
    T::remove(device);
}
