//! Operator configuration is checked before the server reads any JSON-RPC:
//! a bad setting exits non-zero with a specific message on stderr, and
//! nothing at all is written to stdout (which belongs to JSON-RPC).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is the test failing

use std::{
    io::Write,
    path::Path,
    process::{Command, Output, Stdio},
};

const BIN: &str = env!("CARGO_BIN_EXE_browser-shell");

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// Run the server with `args` on top of a valid base config and an
/// `initialize` waiting on stdin.
fn run(dir: &Path, overrides: &[(&str, String)]) -> Output {
    let fake_ab = dir.join("agent-browser");
    if !fake_ab.exists() {
        // Startup only checks that the binary exists and is executable; no
        // test here gets far enough to run it.
        std::fs::write(&fake_ab, "#!/bin/sh\nexit 99\n").unwrap();
        let mut perms = std::fs::metadata(&fake_ab).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&fake_ab, perms).unwrap();
    }
    let mut settings = vec![
        ("--agent-browser", fake_ab.display().to_string()),
        ("--state-dir", dir.join("s").display().to_string()),
        ("--output-dir", dir.join("o").display().to_string()),
        ("--audit-log", dir.join("audit.jsonl").display().to_string()),
        ("--policy", dir.join("no-policy.json").display().to_string()),
    ];
    for (flag, value) in overrides {
        settings.retain(|(f, _)| f != flag);
        settings.push((flag, value.clone()));
    }
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(settings.iter().flat_map(|(f, v)| [*f, v.as_str()]))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = writeln!(stdin, "{INITIALIZE}");
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn short_tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bs")
        .tempdir_in("/tmp")
        .unwrap()
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
    let dir = short_tempdir();
    let output = run(dir.path(), &[]);
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
    let dir = short_tempdir();
    let output = run(
        dir.path(),
        &[("--agent-browser", "/nonexistent/agent-browser".into())],
    );
    assert_refused_at_start(
        &output,
        "agent-browser binary not found at /nonexistent/agent-browser",
    );
}

#[test]
fn relative_state_dir_is_refused_at_start() {
    let dir = short_tempdir();
    let output = run(dir.path(), &[("--state-dir", "relative/state".into())]);
    assert_refused_at_start(&output, "--state-dir must be an absolute path");
}

#[test]
fn state_dir_too_long_for_unix_sockets_is_refused_at_start() {
    let dir = short_tempdir();
    let long = dir.path().join("x".repeat(40));
    let output = run(dir.path(), &[("--state-dir", long.display().to_string())]);
    assert_refused_at_start(&output, "is too long: agent-browser's socket paths");
}

#[test]
fn an_existing_policy_file_is_never_silently_ignored() {
    let dir = short_tempdir();
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, "{}").unwrap();
    let output = run(dir.path(), &[("--policy", policy.display().to_string())]);
    assert_refused_at_start(&output, "refusing to start rather than ignore it");
}

#[test]
fn unwritable_audit_log_is_refused_at_start() {
    let dir = short_tempdir();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let output = run(
        dir.path(),
        &[(
            "--audit-log",
            not_a_dir.join("audit.jsonl").display().to_string(),
        )],
    );
    assert_refused_at_start(&output, "cannot create directory");
}

#[test]
fn out_of_range_flags_are_refused_by_the_parser() {
    let dir = short_tempdir();
    let output = run(dir.path(), &[("--cdp-port", "0".into())]);
    assert_refused_at_start(&output, "--cdp-port");
    let output = run(dir.path(), &[("--max-output-bytes", "10".into())]);
    assert_refused_at_start(&output, "--max-output-bytes");
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
        "BROWSER_SHELL_POLICY",
        "BROWSER_SHELL_AUDIT_LOG",
        "126 refused",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}
