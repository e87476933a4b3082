//! A stand-in for agent-browser that probes its own confinement.
//!
//! It accepts agent-browser's argv (`--cdp <port or ws://127.0.0.1:<port>/…>
//! … batch …`) and its batch on stdin, so it can be spawned through exactly
//! the same path as agent-browser. It runs [`hardening::probe::run`] and
//! prints the result in agent-browser's batch envelope, so the reply's
//! `stdout` is the probe map. In the batch, `fill <selector> <text>` names
//! an extra file that must not be appendable (e.g. the audit log), or, with
//! the selector `#port`, a TCP port that must be out of reach (e.g.
//! Chromium's DevTools). `--writable DIR` overrides the writable directory
//! probed (default `/tmp`).
//!
//! Started as [`hardening::trampoline::ARG0`], it is the crate's trampoline
//! instead (for the tests of [`hardening::Trampoline`]).

use std::{io::Read, path::PathBuf};

use serde_json::{Map, Value, json};

fn main() {
    if hardening::trampoline::invoked() {
        hardening::trampoline::main();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mut targets = hardening::probe::Targets {
        allowed_port: flag("--cdp").as_deref().and_then(port_of),
        writable_dir: Some(flag("--writable").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)),
        protected_files: Vec::new(),
        forbidden_ports: Vec::new(),
    };
    let mut stdin = String::new();
    let _ = std::io::stdin().read_to_string(&mut stdin);
    let batch: Vec<Vec<String>> = serde_json::from_str(&stdin).unwrap_or_default();
    for command in &batch {
        if let [verb, selector, text] = command.as_slice()
            && verb == "fill"
        {
            match (selector.as_str(), text.parse::<u16>()) {
                ("#port", Ok(port)) => targets.forbidden_ports.push(port),
                _ => targets.protected_files.push(PathBuf::from(text)),
            }
        }
    }
    let probes: Map<String, Value> = hardening::probe::run(&targets)
        .into_iter()
        .map(|o| (o.name, Value::String(o.result)))
        .collect();
    // One entry per batch command, as agent-browser prints them: the probe
    // results answer the first; a trailing `get url` (browser-shell's
    // navigation guard) gets a page that is always allowed.
    let first = batch.first().cloned().unwrap_or_default();
    let mut entries = vec![
        json!({"command": first, "success": true, "error": null, "result": {"probes": probes}}),
    ];
    for command in batch.iter().skip(1) {
        let result = if command == &["get", "url"] {
            json!({"url": "about:blank"})
        } else {
            json!({})
        };
        entries.push(json!({"command": command, "success": true, "error": null, "result": result}));
    }
    let envelope = Value::Array(entries);
    let mut out = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut out, format!("{envelope}\n").as_bytes());
}

/// The port of a `--cdp` value: a port, or a `ws://127.0.0.1:<port>/…` URL.
fn port_of(cdp: &str) -> Option<u16> {
    let authority = cdp
        .strip_prefix("ws://")
        .map_or(cdp, |rest| rest.split('/').next().unwrap_or(rest));
    authority.rsplit(':').next()?.parse().ok()
}
