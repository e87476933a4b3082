//! The context of a log's calls: the server processes that wrote it and
//! the policies that decided them, from their `started`, `reloaded`,
//! `reload_refused` and `stopped` records.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::{
    build::{at, short, text},
    model::{Policy, Row, Server},
    short_time,
};

pub(super) fn servers(records: &[Value]) -> Vec<Server> {
    let mut servers: Vec<Server> = Vec::new();
    let mut index: HashMap<(String, Option<u64>), usize> = HashMap::new();
    for record in records {
        let key = (
            text(record, "host").unwrap_or_default(),
            record.get("pid").and_then(Value::as_u64),
        );
        let time = text(record, "time").unwrap_or_default();
        let i = *index.entry(key.clone()).or_insert_with(|| {
            servers.push(Server {
                host: key.0.clone(),
                pid: key.1,
                first: time.clone(),
                ..Server::default()
            });
            servers.len() - 1
        });
        let s = &mut servers[i];
        s.records += 1;
        s.last.clone_from(&time);
        if s.producer.is_none() {
            s.producer = text(record, "producer");
        }
        if text(record, "phase").as_deref() != Some("lifecycle")
            || record.get("session_id").is_some()
        {
            continue;
        }
        match text(record, "outcome").as_deref() {
            Some("started") => {
                s.started = Some(time);
                s.version = at(record, "/detail/browser_shell/version");
                s.sha256 = at(record, "/detail/browser_shell/sha256");
                s.agent_browser_path = at(record, "/detail/agent_browser/path");
                s.agent_browser_version = at(record, "/detail/agent_browser/version");
                s.agent_browser_sha256 = at(record, "/detail/agent_browser/sha256");
                s.trampoline_path = record.pointer("/detail/trampoline").map(|t| {
                    t.get("path")
                        .and_then(Value::as_str)
                        .map_or_else(|| "browser-shell's own binary".to_owned(), str::to_owned)
                });
                s.trampoline_sha256 = at(record, "/detail/trampoline/sha256");
                s.otlp = record.pointer("/detail/otlp").and_then(Value::as_bool);
                s.confinement = record.pointer("/detail/confinement").map(confinement);
            }
            Some("stopped") => {
                s.stopped = Some(time);
                s.stop_reason = text(record, "reason");
                s.calls_served = record
                    .pointer("/detail/calls_served")
                    .and_then(Value::as_u64);
            }
            _ => {}
        }
    }
    servers
}

/// `landlock enforced (ABI 7), seccomp enforced`, and `DEGRADED` when so.
fn confinement(c: &Value) -> String {
    let field = |k: &str| match c.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    };
    let mut out = format!(
        "landlock {} (ABI {}), seccomp {}, capabilities {}",
        field("landlock"),
        field("landlock_abi"),
        field("seccomp"),
        field("capabilities")
    );
    if c.get("degraded").and_then(Value::as_bool) == Some(true) {
        out.push_str(", DEGRADED");
    }
    out
}

pub(super) fn policies(records: &[Value], rows: &[Row]) -> Vec<Policy> {
    let mut policies: Vec<Policy> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut entry = |policies: &mut Vec<Policy>, sha: &str| -> usize {
        *index.entry(sha.to_owned()).or_insert_with(|| {
            policies.push(Policy {
                sha256: sha.to_owned(),
                ..Policy::default()
            });
            policies.len() - 1
        })
    };
    for record in records {
        let Some(sha) = text(record, "policy_sha256") else {
            continue;
        };
        let i = entry(&mut policies, &sha);
        if text(record, "phase").as_deref() != Some("lifecycle")
            || record.get("session_id").is_some()
        {
            continue;
        }
        let time = short_time(&text(record, "time").unwrap_or_default());
        let pid = record
            .get("pid")
            .and_then(Value::as_u64)
            .map_or_else(|| "?".into(), |p| p.to_string());
        let described = |p: &mut Policy| {
            if let Some(policy) = record.pointer("/detail/policy") {
                p.source = at(policy, "/source");
                p.file = at(policy, "/file");
                p.file_sha256 = at(policy, "/file_sha256");
                p.effective = policy.get("effective").cloned();
            }
        };
        match text(record, "outcome").as_deref() {
            Some("started") => {
                described(&mut policies[i]);
                policies[i]
                    .events
                    .push(format!("{time}: in force when server pid {pid} started"));
            }
            Some("reloaded") => {
                described(&mut policies[i]);
                let previous = at(record, "/detail/previous_policy_sha256");
                let replaced = previous
                    .as_deref()
                    .filter(|p| *p != sha)
                    .map_or_else(String::new, |p| format!(", replacing {}", short(p)));
                policies[i].events.push(format!(
                    "{time}: loaded on reload by server pid {pid}{replaced}"
                ));
                if let Some(previous) = previous.filter(|p| *p != sha) {
                    let j = entry(&mut policies, &previous);
                    policies[j].events.push(format!(
                        "{time}: replaced by {} on reload by server pid {pid}",
                        short(&sha)
                    ));
                }
            }
            Some("reload_refused") => {
                let file = at(record, "/detail/file").unwrap_or_default();
                policies[i].events.push(format!(
                    "{time}: kept by server pid {pid}: a reload of {file} was refused"
                ));
            }
            _ => {}
        }
    }
    count_decided(&mut policies, rows);
    policies
}

/// How many calls and refusals each policy decided.
fn count_decided(policies: &mut [Policy], rows: &[Row]) {
    let mut decided: BTreeMap<&str, u64> = BTreeMap::new();
    for r in rows {
        if matches!(r.kind.as_str(), "call" | "refusal" | "gate")
            && let Some(sha) = &r.policy_sha256
        {
            *decided.entry(sha).or_insert(0) += 1;
        }
    }
    for p in policies {
        p.decided = decided.get(p.sha256.as_str()).copied().unwrap_or(0);
    }
}
