//! Killing a whole process group, so a timed-out child cannot leave helpers behind.

/// Send SIGKILL to the process group led by `pgid`.
///
/// Errors are ignored on purpose: the group may already be gone (ESRCH), and
/// the caller reaps the leader itself. A `pgid` of 0 or 1, or one that does
/// not fit a `pid_t`, is never signalled (it would mean "my own group" or
/// "everything").
pub fn kill_process_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // negative pid addresses the process group, which we checked is neither
    // our own group (0) nor every process (-1).
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Send SIGKILL to the single process `pid`.
///
/// Errors are ignored (the process may be gone). A `pid` of 0 or 1, or one
/// that does not fit a `pid_t`, is never signalled.
pub fn kill_process(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // positive pid addresses exactly one process.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}
