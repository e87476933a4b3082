//! Capabilities: lock securebits, empty the bounding set, optionally switch
//! identity, then clear ambient/effective/inheritable/permitted.
//!
//! As uid 0, dropping capabilities alone is not enough to stop regaining them
//! on exec (root's file sets count as "all"); locked `SECBIT_NOROOT`, an empty
//! bounding set and `no_new_privs` each close that door. Steps 1–2 need
//! `CAP_SETPCAP`, so a server without it skips them (and reports that).

use ::caps::CapSet;

use crate::{policy::Identity, step::Step};

/// securebits: NOROOT, NOROOT_LOCKED, NO_SETUID_FIXUP, NO_SETUID_FIXUP_LOCKED,
/// KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, NO_CAP_AMBIENT_RAISE_LOCKED
/// (include/uapi/linux/securebits.h); KEEP_CAPS itself stays off.
pub(crate) const LOCKED_SECUREBITS: libc::c_ulong = 0xef;

/// `CAP_SETPCAP` (include/uapi/linux/capability.h).
const CAP_SETPCAP: u32 = 8;

/// What the parent learned so the child needs no allocation or file reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CapsPlan {
    pub(crate) last_cap: u32,
    pub(crate) can_set_pcap: bool,
    pub(crate) identity: Option<Identity>,
}

/// Parent side: read `cap_last_cap` and whether we hold `CAP_SETPCAP`.
pub(crate) fn build(identity: Option<Identity>) -> std::io::Result<CapsPlan> {
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?
        .trim()
        .parse()
        .map_err(|_| std::io::Error::other("unreadable /proc/sys/kernel/cap_last_cap"))?;
    let can_set_pcap = effective_caps()? & (1u64 << CAP_SETPCAP) != 0;
    Ok(CapsPlan {
        last_cap,
        can_set_pcap,
        identity,
    })
}

/// The effective capability mask of this process, from `/proc/self/status`.
pub fn effective_caps() -> std::io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(|| std::io::Error::other("no CapEff line in /proc/self/status"))
}

fn prctl(option: libc::c_int, arg: libc::c_ulong) -> libc::c_int {
    // The prctl options used here (securebits, capability bounding set,
    // no_new_privs) take integer arguments only and touch no memory.
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only, as above; no memory is read or written.
    unsafe { libc::prctl(option, arg, zero, zero, zero) }
}

/// Child side. Raw syscalls and allocation-free `caps` calls only.
pub(crate) fn apply(plan: &CapsPlan) -> std::io::Result<()> {
    if plan.can_set_pcap {
        if prctl(libc::PR_SET_SECUREBITS, LOCKED_SECUREBITS) != 0 {
            return Err(Step::Securebits.last_os_error());
        }
        for cap in 0..=plan.last_cap {
            // EINVAL for a capability this kernel does not know is harmless.
            if prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap)) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(Step::BoundingSet.last_os_error());
            }
        }
    }
    if let Some(id) = plan.identity {
        // Raw syscalls: only this thread exists after fork, and libc's
        // set*id wrappers would broadcast to threads that are not there.
        // SAFETY: setgroups(0, NULL) reads no memory; setresgid/setresuid
        // take integers only.
        let failed = unsafe {
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid) != 0
                || libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid) != 0
        };
        if failed {
            return Err(Step::Identity.last_os_error());
        }
    }
    // Effective before permitted: capset(2) requires effective ⊆ permitted.
    for set in [
        CapSet::Ambient,
        CapSet::Effective,
        CapSet::Inheritable,
        CapSet::Permitted,
    ] {
        if ::caps::clear(None, set).is_err() {
            return Err(Step::ClearCaps.last_os_error());
        }
    }
    if prctl(libc::PR_SET_NO_NEW_PRIVS, 1) != 0 {
        return Err(Step::NoNewPrivs.last_os_error());
    }
    Ok(())
}

/// Child side, last: read back what must now hold.
pub(crate) fn verify(plan: &CapsPlan) -> std::io::Result<()> {
    if prctl(libc::PR_GET_NO_NEW_PRIVS, 0) != 1 {
        return Err(Step::Verify.fail(libc::EPERM));
    }
    if plan.can_set_pcap {
        // SAFETY: PR_GET_SECUREBITS takes no arguments and returns an int.
        let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS) };
        if libc::c_ulong::try_from(bits).ok() != Some(LOCKED_SECUREBITS) {
            return Err(Step::Verify.fail(libc::EPERM));
        }
        for cap in 0..=plan.last_cap {
            if prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap)) == 1 {
                return Err(Step::Verify.fail(libc::EPERM));
            }
        }
    }
    Ok(())
}
