//! The confinement a spawn ran under, as audit records show it (the
//! `started` record and every call's intent and outcome).

use serde_json::{Value, json};

/// The confinement applied to a spawn, as the audit log records it.
pub(crate) fn record(report: &hardening::Report) -> Value {
    json!({
        "landlock_abi": report.landlock_abi,
        "landlock": report.landlock.to_string(),
        "seccomp": report.seccomp.to_string(),
        "capabilities": "cleared",
        "bounding_set_empty": report.bounding_set_dropped,
        "no_new_privs": true,
        "uid": report.uid,
        "degraded": report.is_degraded(),
        "memory_cpu": report.cgroup,
        "rlimits": report
            .rlimits
            .iter()
            .map(|l| (l.resource.proc_name().to_owned(), l.value))
            .collect::<std::collections::BTreeMap<String, u64>>(),
    })
}
