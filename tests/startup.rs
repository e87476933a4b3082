//! Operator configuration is checked before the server reads any JSON-RPC:
//! a bad setting exits non-zero with a specific message on stderr, and
//! nothing at all is written to stdout (which belongs to JSON-RPC).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is the test failing

use std::{
    io::Write,
    process::{Command, Output, Stdio},
};

#[allow(dead_code)] // each test binary uses a different part
mod common;

use common::{Dirs, agent_browser, binaries_under_tmp_flag, dirs};

const BIN: &str = env!("CARGO_BIN_EXE_browser-shell");

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

const DISCOVER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// Run the server with `overrides` on top of a valid base config and an
/// `initialize` waiting on stdin.
fn run(dirs: &Dirs, overrides: &[(&str, String)]) -> Output {
    run_strict(dirs, &lenient(overrides))
}

/// `overrides`, plus the flag that accepts this checkout's binaries when
/// they lie under /tmp (a clone there; see `binaries_under_tmp_flag`).
fn lenient<'a>(overrides: &[(&'a str, String)]) -> Vec<(&'a str, String)> {
    let mut overrides = overrides.to_vec();
    if let Some(flag) = binaries_under_tmp_flag(BIN.as_ref()) {
        overrides.push((flag, String::new()));
    }
    overrides
}

/// [`run`], without accepting binaries under /tmp.
fn run_strict(dirs: &Dirs, overrides: &[(&str, String)]) -> Output {
    run_with_input(dirs, overrides, INITIALIZE)
}

/// [`run_strict`], with `input` (one line) on stdin instead.
fn run_with_input(dirs: &Dirs, overrides: &[(&str, String)], input: &str) -> Output {
    let dir = dirs.scratch.path();
    let mut settings = vec![
        ("--agent-browser", agent_browser().display().to_string()),
        ("--state-dir", dir.join("s").display().to_string()),
        ("--output-dir", dir.join("o").display().to_string()),
        (
            "--audit-log",
            dirs.evidence
                .path()
                .join("audit.jsonl")
                .display()
                .to_string(),
        ),
        // Not under /tmp: the child could write it there. `{}`: every key
        // at its default (a missing file is refused unless at the default path).
        ("--policy", {
            let policy = dirs.evidence.path().join("default-policy.json");
            std::fs::write(&policy, "{}").expect("write the policy");
            policy.display().to_string()
        }),
    ];
    let mut flags = Vec::new();
    for (flag, value) in overrides {
        if value.is_empty() {
            flags.push(*flag);
            continue;
        }
        settings.retain(|(f, _)| f != flag);
        settings.push((flag, value.clone()));
    }
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(settings.iter().flat_map(|(f, v)| [*f, v.as_str()]))
        .args(flags)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = writeln!(stdin, "{input}");
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn assert_refused_at_start(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "expected failure, stderr: {stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "stdout must stay JSON-RPC only: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr.contains(needle),
        "expected {needle:?} in stderr: {stderr}"
    );
}

#[test]
fn valid_config_answers_initialize_on_stdout() {
    let d = dirs();
    let output = run(&d, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
    }
    assert!(stdout.contains("\"serverInfo\""), "{stdout}");
}

#[test]
fn missing_agent_browser_is_refused_at_start() {
    let d = dirs();
    let output = run(
        &d,
        &[("--agent-browser", "/nonexistent/agent-browser".into())],
    );
    assert_refused_at_start(
        &output,
        "agent-browser binary not found at /nonexistent/agent-browser",
    );
}

#[test]
fn relative_state_dir_is_refused_at_start() {
    let d = dirs();
    let output = run(&d, &[("--state-dir", "relative/state".into())]);
    assert_refused_at_start(&output, "--state-dir must be an absolute path");
}

#[test]
fn state_dir_too_long_for_unix_sockets_is_refused_at_start() {
    let d = dirs();
    let long = d.scratch.path().join("x".repeat(40));
    let output = run(&d, &[("--state-dir", long.display().to_string())]);
    assert_refused_at_start(&output, "is too long: agent-browser's socket paths");
}

#[test]
fn an_invalid_policy_file_is_refused_at_start_naming_the_key() {
    let d = dirs();
    for (text, needle) in [
        ("{not json", "key must be a string"),
        (
            r#"{"open": {"allow_hostz": []}}"#,
            "unknown field `allow_hostz`",
        ),
        (
            r#"{"open": {"allow_private_cidrs": ["10.0.0.0/33"]}}"#,
            "open.allow_private_cidrs: \"10.0.0.0/33\"",
        ),
        (
            r#"{"open": {"allow_schemes": ["file"]}}"#,
            "open.allow_schemes: \"file\" cannot be allowed",
        ),
    ] {
        let policy = d.evidence.path().join("policy.json");
        std::fs::write(&policy, text).unwrap();
        let output = run(&d, &[("--policy", policy.display().to_string())]);
        assert_refused_at_start(&output, needle);
    }
}

#[test]
fn a_policy_path_that_does_not_exist_stops_the_start_naming_it() {
    let d = dirs();
    let mistyped = d.evidence.path().join("polcy.json");
    let output = run(&d, &[("--policy", mistyped.display().to_string())]);
    assert_refused_at_start(
        &output,
        &format!("--policy {}: no such file", mistyped.display()),
    );
    assert_eq!(output.status.code(), Some(2));
}

/// One truth for "is this policy usable": the reviewers' commands say of a
/// path what `serve` would do with it.
#[test]
fn policy_check_and_explain_refuse_the_missing_path_serve_refuses() {
    let d = dirs();
    let mistyped = d.evidence.path().join("polcy.json");
    let serve = run(&d, &[("--policy", mistyped.display().to_string())]);
    assert_eq!(serve.status.code(), Some(2));
    let path = mistyped.display().to_string();
    for argv in [
        vec!["policy", "check", path.as_str()],
        vec![
            "policy",
            "explain",
            "--policy",
            path.as_str(),
            "http://127.0.0.1/",
        ],
    ] {
        let out = Command::new(BIN)
            .args(&argv)
            .env_remove("BROWSER_SHELL_POLICY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{path}: no such file")),
            "{argv:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{argv:?}");
    }
}

#[test]
fn unwritable_audit_log_is_refused_at_start() {
    let d = dirs();
    let not_a_dir = d.evidence.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let output = run(
        &d,
        &[(
            "--audit-log",
            not_a_dir.join("audit.jsonl").display().to_string(),
        )],
    );
    assert_refused_at_start(&output, "cannot create directory");
}

#[test]
fn out_of_range_flags_are_refused_by_the_parser() {
    let d = dirs();
    let output = run(&d, &[("--cdp-port", "0".into())]);
    assert_refused_at_start(&output, "--cdp-port");
    let output = run(&d, &[("--max-output-bytes", "10".into())]);
    assert_refused_at_start(&output, "--max-output-bytes");
    let output = run(
        &d,
        &[("--max-image-bytes", (64 * 1024 * 1024 + 1).to_string())],
    );
    assert_refused_at_start(&output, "--max-image-bytes");
}

#[test]
fn a_client_that_only_discovers_learns_every_revision_and_the_server_ends_cleanly() {
    let d = dirs();
    let output = run_with_input(&d, &lenient(&[]), DISCOVER);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}: {stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let reply: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        reply["result"]["supportedVersions"],
        serde_json::json!([
            "2024-11-05",
            "2025-03-26",
            "2025-06-18",
            "2025-11-25",
            "2026-07-28"
        ])
    );
}

#[test]
fn help_documents_every_setting_and_its_environment_variable() {
    let output = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "BROWSER_SHELL_AGENT_BROWSER",
        "BROWSER_SHELL_CDP_PORT",
        "BROWSER_SHELL_STATE_DIR",
        "BROWSER_SHELL_OUTPUT_DIR",
        "BROWSER_SHELL_ON_EXIT",
        "BROWSER_SHELL_POLICY",
        "BROWSER_SHELL_AUDIT_LOG",
        "126 refused",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

#[test]
fn an_audit_log_the_confined_child_could_write_is_refused_at_start() {
    let d = dirs();
    let in_tmp = d.scratch.path().join("audit.jsonl").display().to_string();
    // The keys (beside the log by default) are files the server trusts:
    // kept out of /tmp, or the other check refuses the start.
    let key = d.evidence.path().join("audit.key").display().to_string();
    let signing = d.evidence.path().join("audit.sign").display().to_string();
    let output = run(
        &d,
        &[
            ("--audit-log", in_tmp.clone()),
            ("--audit-key", key.clone()),
            ("--checkpoint-key", signing.clone()),
        ],
    );
    assert_refused_at_start(&output, "which the confined agent-browser may write");
    let output = run(
        &d,
        &[
            ("--audit-log", in_tmp),
            ("--audit-key", key),
            ("--checkpoint-key", signing),
            ("--allow-writable-audit-log", String::new()),
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn an_agent_browser_that_cannot_run_confined_is_refused_at_start() {
    // A shell script: its interpreter is outside the confinement's
    // executable set, so the confined self-test fails before serving.
    let d = dirs();
    // Outside /tmp, or the check of trusted files refuses it first.
    let bin_dir = tempfile::Builder::new()
        .prefix("bs-ab")
        .tempdir_in("/var/tmp")
        .unwrap();
    let script = bin_dir.path().join("agent-browser");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let output = run(&d, &[("--agent-browser", script.display().to_string())]);
    assert_refused_at_start(&output, "the confined agent-browser does not start");
    // The start failed as a bad configuration does: the `initialize`
    // waiting on stdin was never answered, and the server never said ready.
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("ready on stdio"), "{stderr}");
}

#[test]
fn a_preexisting_state_dir_is_made_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = dirs();
    let state = d.scratch.path().join("s");
    std::fs::create_dir_all(state.join("sock")).unwrap();
    for dir in [&state, &state.join("sock")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let output = run(&d, &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // No one else may list either dir; the socket dir, which the children's
    // uids write (`--child-uids`), lets none remove another's file (sticky).
    for dir in [&state, &state.join("sock")] {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode & 0o044, 0, "{} is listable: {mode:o}", dir.display());
        let shared_write = mode & 0o022 != 0;
        assert!(
            !shared_write || mode & 0o1000 != 0,
            "{} is writable by others without the sticky bit: {mode:o}",
            dir.display()
        );
    }
    let state_mode = std::fs::metadata(&state).unwrap().permissions().mode() & 0o777;
    assert_eq!(state_mode & 0o022, 0, "{state_mode:o}");
}

#[test]
fn a_policy_or_binary_the_child_could_write_stops_the_start_naming_it_and_the_flag() {
    let d = dirs();
    let policy = d.scratch.path().join("policy.json");
    std::fs::write(&policy, "{}").unwrap();
    let policy = policy.display().to_string();
    let output = run_strict(&d, &[("--policy", policy.clone())]);
    assert_refused_at_start(
        &output,
        &format!("the policy file {policy} lies under /tmp"),
    );
    assert_refused_at_start(&output, "--allow-child-writable-inputs");
    let output = run_strict(
        &d,
        &[
            ("--policy", policy.clone()),
            ("--allow-child-writable-inputs", String::new()),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("WARN") && stderr.contains(&policy),
        "no warning naming {policy}: {stderr}"
    );
}
