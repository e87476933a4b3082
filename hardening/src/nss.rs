//! Host-name lookups through glibc's built-in NSS modules only.
//!
//! A statically linked glibc resolves `files` and `dns` itself, but loads any
//! other module `/etc/nsswitch.conf` names for `hosts` (mdns, `resolve`, …)
//! with `dlopen`, and that module brings the host's shared libc in beside the
//! static one: code the build never saw, in the process that holds the audit
//! trail, which fails if the host's glibc is not the build's. Pinning the
//! `hosts` database to `files dns` keeps lookups inside the binary on every
//! host (docs/design.md, "One static server").

use std::{ffi::c_char, io, sync::OnceLock};

#[cfg(target_env = "gnu")]
unsafe extern "C" {
    // glibc's own override of nsswitch.conf for one database (<nss.h>).
    fn __nss_configure_lookup(dbname: *const c_char, service_line: *const c_char) -> i32;
}

/// Makes this process resolve host names with `files` then `dns` whatever
/// the host's nsswitch.conf says. Idempotent; the first call must come before
/// any lookup (glibc does not lock the table against one running): the
/// server makes it first thing in `main`, before any thread starts, and its
/// resolver's constructor makes it again (then a no-op) so no lookup can
/// precede it.
pub fn hosts_from_builtin_modules() -> io::Result<()> {
    static PINNED: OnceLock<Result<(), i32>> = OnceLock::new();
    match PINNED.get_or_init(pin) {
        Ok(()) => Ok(()),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

#[cfg(target_env = "gnu")]
fn pin() -> Result<(), i32> {
    // SAFETY: both arguments are NUL-terminated literals that outlive the
    // call; glibc copies what it keeps. It runs once (the `OnceLock` above),
    // from `main` before any thread exists, so no lookup runs concurrently.
    let rc = unsafe { __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL))
    }
}

/// Other C libraries load no modules: nothing to pin.
#[cfg(not(target_env = "gnu"))]
fn pin() -> Result<(), i32> {
    Ok(())
}
