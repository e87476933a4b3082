//! Inherited file descriptors keep the rights they were opened with and so
//! bypass Landlock: mark every descriptor above stderr close-on-exec.
//!
//! `CLOSE_RANGE_CLOEXEC` rather than closing: std's own exec-error pipe
//! (already close-on-exec) must stay open until exec to report a failure.

use crate::step::Step;

/// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`. Child side, allocation-free.
pub(crate) fn apply() -> std::io::Result<()> {
    // SAFETY: close_range(2) only changes flags on this process's descriptor
    // table; it reads and writes no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc != 0 {
        return Err(Step::CloseFds.last_os_error());
    }
    Ok(())
}
