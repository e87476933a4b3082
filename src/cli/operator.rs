//! Operator commands that prove the confinement on this machine. They are
//! not reachable through MCP.
//!
//! - `hardening check`: what will be enforced, then a confined self-probe —
//!   real escape attempts, each with the errno that must stop it.
//! - `hardening exec -- ARGS`: run the configured agent-browser with ARGS
//!   exactly as a call would (same environment, same confinement), minus
//!   browser-shell's validation, to see what the kernel alone refuses.

use std::{io::Write, path::PathBuf, process::Stdio};

use anyhow::Context;

use super::flags::ServeArgs;

/// Print the confinement report and run the confined self-probe. Returns
/// whether every probe matched its expectation.
pub(super) fn hardening_check(args: &ServeArgs) -> anyhow::Result<bool> {
    let prepared = args.prepare()?;
    let policy = args.confinement_policy(&prepared.runner.state_dir(), &prepared.output_dir)?;
    let mut out = std::io::stdout().lock();
    print_enforced(&mut out, prepared.runner.confinement().report(), &policy)?;
    let results = run_probe(args, &prepared, &policy)?;
    print_probe(&mut out, &results)
}

/// What will be enforced, as the kernel and the policy say.
fn print_enforced(
    out: &mut impl Write,
    report: &hardening::Report,
    policy: &hardening::Policy,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "browser-shell {} — confinement of agent-browser",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(out, "  kernel Landlock ABI : {}", report.landlock_abi)?;
    writeln!(out, "  Landlock            : {}", report.landlock)?;
    writeln!(out, "  seccomp             : {}", report.seccomp)?;
    writeln!(
        out,
        "  capabilities        : all cleared; bounding set {}",
        if report.bounding_set_dropped {
            "empty, securebits locked"
        } else {
            "kept (no CAP_SETPCAP)"
        }
    )?;
    writeln!(out, "  no_new_privs        : on")?;
    writeln!(out, "  degraded            : {}", report.is_degraded())?;
    writeln!(
        out,
        "  read+exec           : {}",
        join(&policy.read_exec_paths)
    )?;
    writeln!(out, "  read                : {}", join(&policy.read_paths))?;
    writeln!(
        out,
        "  read+write no exec  : {}",
        join(&policy.read_write_paths)
    )?;
    writeln!(
        out,
        "  TCP connect ports   : {:?} (any address: Landlock ports are not address-specific)",
        policy.connect_tcp_ports
    )?;
    writeln!(out, "  TCP bind            : denied")?;
    for limit in &report.rlimits {
        writeln!(
            out,
            "  rlimit              : {} = {}",
            limit.resource.proc_name(),
            limit.value
        )?;
    }
    writeln!(out, "  memory/CPU          : {}", report.cgroup)?;
    writeln!(
        out,
        "  seccomp denies      : {}",
        hardening::denied_syscalls().join(", ")
    )?;
    writeln!(out)?;
    Ok(())
}

/// Run the self-probe: this binary, confined like agent-browser, attempting
/// each escape and reporting what the kernel said.
fn run_probe(
    args: &ServeArgs,
    prepared: &crate::server::Parts,
    policy: &hardening::Policy,
) -> anyhow::Result<Vec<hardening::probe::Outcome>> {
    // The probe is this binary, which is dynamically linked: the probe's
    // policy adds exec of itself and the system libraries to agent-browser's.
    let me = std::env::current_exe().context("cannot locate this binary")?;
    let mut probe_policy = policy.clone();
    probe_policy.read_exec_paths.extend(
        ["/usr", "/lib", "/lib64"]
            .into_iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .chain(me.parent().map(PathBuf::from)),
    );
    // Prepared here only to fail early and plainly; the child prepares it
    // again for itself, through the same trampoline every call's child uses.
    hardening::prepare(&probe_policy)?;
    let mut command = hardening::Trampoline::new("/proc/self/exe", &probe_policy)?.command(&me);
    command
        .arg("__probe")
        .args(["--cdp", &args.cdp_port.to_string(), "--writable"])
        .arg(&prepared.output_dir)
        .arg("--protect")
        .arg(prepared.audit.path())
        .env_clear()
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let output = command
        .output()
        .context("cannot run the confined self-probe")?;
    if let Some(why) = hardening::trampoline::failure(output.status.code(), &output.stderr) {
        anyhow::bail!("the self-probe could not be confined: {why}");
    }
    let results: Vec<hardening::probe::Outcome> =
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&output.stdout)
            .context("the self-probe printed no result")?
            .into_iter()
            .map(|(name, value)| hardening::probe::Outcome {
                name,
                result: value.as_str().unwrap_or_default().to_owned(),
            })
            .collect();
    Ok(results)
}

/// Each probe's result against its expectation; true when all matched.
fn print_probe(
    out: &mut impl Write,
    results: &[hardening::probe::Outcome],
) -> anyhow::Result<bool> {
    writeln!(out, "self-probe (a confined child attempting escapes):")?;
    let expected = |name: &str| {
        hardening::probe::EXPECTED_WHEN_CONFINED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, want)| *want)
            .or_else(|| name.starts_with("append_protected_").then_some("EACCES"))
    };
    for outcome in results {
        let (mark, want) = match expected(&outcome.name) {
            Some(want) if want == outcome.result => ("ok  ", want),
            Some(want) => ("FAIL", want),
            None => ("    ", "-"),
        };
        writeln!(
            out,
            "  {mark} {:<34} {:<18} expected {want}",
            outcome.name, outcome.result
        )?;
    }
    let gaps = hardening::probe::gaps(results);
    writeln!(out)?;
    if gaps.is_empty() {
        writeln!(
            out,
            "confinement verified: every escape attempt was refused as expected"
        )?;
    } else {
        writeln!(out, "CONFINEMENT GAPS:\n  {}", gaps.join("\n  "))?;
    }
    Ok(gaps.is_empty())
}

fn join(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Run agent-browser with `argv` confined as a call would be; return its exit code.
pub(super) fn hardening_exec(args: &ServeArgs, argv: &[String]) -> anyhow::Result<i32> {
    let prepared = args.prepare()?;
    let mut command = prepared.runner.confined_command();
    command.args(argv);
    let status = command.status().context("cannot run agent-browser")?;
    Ok(status.code().unwrap_or(1))
}

/// The hidden `__probe` subcommand: run the probes in this (confined)
/// process and print them as one JSON object.
pub(super) fn probe(argv: &[String]) -> i32 {
    let flag = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
    };
    let targets = hardening::probe::Targets {
        allowed_port: flag("--cdp").and_then(|p| p.parse().ok()),
        writable_dir: flag("--writable").map(PathBuf::from),
        protected_files: flag("--protect").map(PathBuf::from).into_iter().collect(),
    };
    let map: serde_json::Map<String, serde_json::Value> = hardening::probe::run(&targets)
        .into_iter()
        .map(|o| (o.name, serde_json::Value::String(o.result)))
        .collect();
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", serde_json::Value::Object(map)) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}
