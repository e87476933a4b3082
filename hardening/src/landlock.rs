//! Landlock: filesystem rights beneath listed paths, TCP connect/bind by
//! port, and scopes (abstract unix sockets, signals).
//!
//! The ruleset is built in the parent (it opens every path and allocates);
//! the child only duplicates its fd and calls `restrict_self`, and anything
//! short of `FullyEnforced` fails the spawn.

use std::path::Path;

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use crate::{PrepareError, policy::Policy, step::Step};

/// The lowest ABI with everything this crate asks for (net rules: 4;
/// scopes: 6).
pub(crate) const REQUIRED_ABI: i32 = 6;

/// The Landlock ABI of the running kernel, 0 when it has none.
pub fn kernel_abi() -> i32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // reads no memory and returns the ABI version or -1.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// Parent side: build the ruleset for `policy` against `abi`.
///
/// With `HardRequirement`, a right the kernel cannot enforce is an error here
/// rather than a silent omission.
pub(crate) fn build(
    policy: &Policy,
    abi: i32,
    level: CompatLevel,
) -> Result<RulesetCreated, PrepareError> {
    let abi = ABI::from(abi);
    let err = |source: ::landlock::RulesetError| PrepareError::Landlock(source.to_string());
    for path in policy
        .read_exec_paths
        .iter()
        .chain(&policy.read_paths)
        .chain(&policy.read_write_paths)
    {
        // path_beneath_rules skips paths it cannot open; a missing path must
        // be a configuration error, not a silently smaller sandbox.
        check_exists(path)?;
    }
    let read_only = AccessFs::from_read(abi) & !AccessFs::Execute;
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    // Older ABIs have no network rights (< 4) or scopes (< 6); asking for an
    // empty set is an error, so those layers are simply absent there (the
    // report marks the result partial).
    let has_net = !AccessNet::from_all(abi).is_empty();
    if has_net {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(err)?;
    }
    if policy.scoped && !Scope::from_all(abi).is_empty() {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(err)?;
    }
    let mut created = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(
            &policy.read_exec_paths,
            AccessFs::from_read(abi),
        ))
        .map_err(err)?
        .add_rules(path_beneath_rules(&policy.read_paths, read_only))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            &policy.read_write_paths,
            AccessFs::from_all(abi) & !AccessFs::Execute,
        ))
        .map_err(err)?;
    if !has_net {
        return Ok(created);
    }
    for port in &policy.connect_tcp_ports {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(err)?;
    }
    for port in &policy.bind_tcp_ports {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::BindTcp))
            .map_err(err)?;
    }
    Ok(created)
}

fn check_exists(path: &Path) -> Result<(), PrepareError> {
    std::fs::metadata(path)
        .map(|_| ())
        .map_err(|e| PrepareError::Path {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

/// Child side: enforce a duplicate of the prepared ruleset.
pub(crate) fn apply(ruleset: &RulesetCreated, require_full: bool) -> std::io::Result<()> {
    let status: RestrictionStatus = ruleset
        .try_clone()
        .map_err(|_| Step::Landlock.last_os_error())?
        .restrict_self()
        .map_err(|_| Step::Landlock.last_os_error())?;
    if require_full && status.ruleset != RulesetStatus::FullyEnforced {
        return Err(Step::Landlock.fail(libc::ENOTSUP));
    }
    Ok(())
}
