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
    let gate_port = prepared.runner.gate_port();
    let policy = args.confinement_policy(
        prepared.runner.agent_browser(),
        &prepared.runner.state_dir(),
        &prepared.output_dir,
        gate_port,
    )?;
    let mut out = std::io::stdout().lock();
    print_enforced(&mut out, prepared.runner.confinement().report(), &policy)?;
    print_inputs(&mut out, args, &policy)?;
    print_separation(&mut out, prepared.runner.identities())?;
    // The gate serves while the probe runs, as it does for every call.
    let mut prepared = prepared;
    let gate = serve_gate(&mut prepared)?;
    let mut results = run_probe(args, &prepared, &policy)?;
    results.push(egress_outcome(gate, &results));
    let separated = prepared.runner.identities().range().is_some();
    print_probe(&mut out, &results, separated)
}

/// The probe asked a page in its own session's context to fetch from
/// Chromium's DevTools port, which no policy allows: the context routes
/// through the egress when the egress refused it, naming the probe's
/// session. The context is disposed of afterwards.
fn egress_outcome(
    mut gate: ServedGate,
    results: &[hardening::probe::Outcome],
) -> hardening::probe::Outcome {
    let sent = results
        .iter()
        .find(|o| o.name == super::gate_probe::EGRESS_FETCH)
        .map(|o| o.result.clone())
        .unwrap_or_else(|| "<missing>".into());
    let result = if sent == "sent" {
        let seen = gate.runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            while let Ok(Some(refused)) =
                tokio::time::timeout_at(deadline, gate.refusals.recv()).await
            {
                if refused.daemon.as_deref() == Some(super::gate_probe::SESSION)
                    && refused.reason.contains("egress proxy")
                    && refused.reason.contains("[port.protected]")
                {
                    return true;
                }
            }
            false
        });
        if seen {
            "refused".to_owned()
        } else {
            "NOT SEEN by the egress proxy".to_owned()
        }
    } else {
        format!("not attempted: {sent}")
    };
    let ended = match super::gate_probe::session() {
        Ok(session) => gate
            .runtime
            .block_on(gate.handle.end_session(&session))
            .map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    if let Err(e) = ended {
        tracing::warn!(error = %e, "the self-probe's browser context was not disposed of");
    }
    hardening::probe::Outcome {
        name: super::gate_probe::EGRESS_CONNECTION.to_owned(),
        result,
    }
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

/// The files the server trusts, each `ok` or under the child-writable root
/// it lies in (the start refuses that unless the operator accepted it).
fn print_inputs(
    out: &mut impl Write,
    args: &ServeArgs,
    policy: &hardening::Policy,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "files the child must not write (the server trusts them):"
    )?;
    for line in args.inputs_report(&policy.read_write_paths)? {
        writeln!(out, "  {line}")?;
    }
    writeln!(out)?;
    Ok(())
}

/// Whether sessions' children are apart by uid (`--child-uids`).
fn print_separation(
    out: &mut impl Write,
    identities: &crate::daemons::Identities,
) -> anyhow::Result<()> {
    match identities.range() {
        Some(range) => writeln!(
            out,
            "session separation: each session's daemon runs as a uid of its own, from {range} \
             (held by this server alone); the gate checks the uid of each connection\n"
        )?,
        None => writeln!(
            out,
            "session separation: OFF: every child runs as this server's uid ({}); a compromised \
             child could reach another session's gate connection, socket, /proc and /tmp files\n",
            crate::daemons::why_no_child_uids().unwrap_or_else(|| "--child-uids off".into())
        )?,
    }
    Ok(())
}

/// Run the self-probe: this binary, confined like agent-browser, attempting
/// each escape and reporting what the kernel said.
fn run_probe(
    args: &ServeArgs,
    prepared: &crate::server::Parts,
    policy: &hardening::Policy,
) -> anyhow::Result<Vec<hardening::probe::Outcome>> {
    let me = std::env::current_exe().context("cannot locate this binary")?;
    let probe_policy = probe_policy(policy, &me);
    // Prepared here only to fail early and plainly; the child prepares it
    // again for itself, through the same trampoline every call's child uses.
    hardening::prepare(&probe_policy)?;
    let trampoline =
        crate::boot::assemble::trampoline_from(prepared.trampoline_file.as_deref(), &probe_policy)?;
    // The probe runs as the uid a daemon of its session would, and writes
    // in that uid's HOME (the output root is no child's to write).
    let (uid, home) = prepared
        .runner
        .child_home(super::gate_probe::SESSION)
        .context("cannot give the self-probe a uid")?;
    let mut command = trampoline
        .command_as(&me, uid.map(crate::daemons::ChildUid::identity))
        .context("cannot prepare the self-probe's confinement")?;
    command
        .arg("__probe")
        .args([
            "--cdp",
            &prepared.runner.gate_port().to_string(),
            "--forbid",
            &args.cdp_port.to_string(),
            "--gate",
            &crate::daemons::gate_endpoint(
                prepared.runner.gate_port(),
                &super::gate_probe::session()?,
            ),
            "--writable",
        ])
        .arg(if uid.is_some() {
            &home
        } else {
            &prepared.output_dir
        })
        .arg("--protect")
        .arg(prepared.audit.path())
        .args(uid.is_none().then_some("--unseparated"))
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
            .with_context(|| {
                format!(
                    "the self-probe printed no result ({}); it said: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )
            })?
            .into_iter()
            .map(|(name, value)| hardening::probe::Outcome {
                name,
                result: value.as_str().unwrap_or_default().to_owned(),
            })
            .collect();
    Ok(results)
}

/// agent-browser's policy as the probe needs it: the probe is this binary,
/// so it adds exec of itself and the system libraries (a plain `cargo
/// build` links it dynamically), and the random devices: linked
/// statically, it finds no `getrandom` in libc (the getrandom crate looks
/// it up with dlsym), so it polls /dev/random until the pool is ready and
/// reads /dev/urandom.
fn probe_policy(policy: &hardening::Policy, me: &std::path::Path) -> hardening::Policy {
    let mut probe_policy = policy.clone();
    probe_policy.read_exec_paths.extend(
        ["/usr", "/lib", "/lib64"]
            .into_iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .chain(me.parent().map(PathBuf::from)),
    );
    probe_policy
        .read_paths
        .extend(["/dev/random", "/dev/urandom"].map(PathBuf::from));
    probe_policy
}

/// Each probe's result against its expectation; true when all matched.
fn print_probe(
    out: &mut impl Write,
    results: &[hardening::probe::Outcome],
    separated: bool,
) -> anyhow::Result<bool> {
    writeln!(out, "self-probe (a confined child attempting escapes):")?;
    // Sessions sharing one uid cannot be told apart at the gate: said
    // above (session separation: OFF), not a gap of the confinement.
    let gate_expected: Vec<(&str, &str)> = super::gate_probe::EXPECTED
        .iter()
        .map(|&(name, want)| match name {
            super::gate_probe::OTHER_SESSION if !separated => (name, "unchecked"),
            _ => (name, want),
        })
        .collect();
    let expected = |name: &str| {
        hardening::probe::EXPECTED_WHEN_CONFINED
            .iter()
            .chain(&gate_expected)
            .chain(super::gate_probe::EGRESS_EXPECTED)
            .find(|(n, _)| *n == name)
            .map(|(_, want)| *want)
            .or_else(|| hardening::probe::is_per_target(name).then_some("EACCES"))
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
    let mut gaps = hardening::probe::gaps(results);
    for (name, want) in gate_expected
        .iter()
        .chain(super::gate_probe::EGRESS_EXPECTED)
    {
        let got = results
            .iter()
            .find(|o| o.name == *name)
            .map(|o| o.result.as_str());
        if got != Some(*want) {
            gaps.push(format!(
                "{name}: expected {want}, got {}",
                got.unwrap_or("<missing>")
            ));
        }
    }
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

/// Run agent-browser with `argv` confined as a call would be, reaching
/// Chromium through a browser gate of its own (its `--cdp`, put first);
/// return its exit code.
pub(super) fn hardening_exec(args: &ServeArgs, argv: &[String]) -> anyhow::Result<i32> {
    if argv.iter().any(|a| a == "--cdp" || a.starts_with("--cdp=")) {
        anyhow::bail!(
            "hardening exec sets --cdp itself (its browser gate's URL, the only way a confined \
             agent-browser reaches Chromium); remove it from the arguments"
        );
    }
    let mut prepared = args.prepare()?;
    let _served = serve_gate(&mut prepared)?;
    let exec = crate::session_id::DaemonName::checked("hardening-exec")
        .context("hardening-exec is not a daemon name")?;
    let endpoint = crate::daemons::gate_endpoint(prepared.runner.gate_port(), &exec);
    let mut command = prepared
        .runner
        .confined_command("hardening-exec")
        .context("cannot prepare agent-browser's confinement")?;
    command.args(["--cdp", &endpoint]).args(argv);
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
        forbidden_ports: flag("--forbid")
            .and_then(|p| p.parse().ok())
            .into_iter()
            .collect(),
    };
    let mut map: serde_json::Map<String, serde_json::Value> = hardening::probe::run(&targets)
        .into_iter()
        .map(|o| (o.name, serde_json::Value::String(o.result)))
        .collect();
    if let Some(gate) = flag("--gate") {
        let devtools = flag("--forbid").and_then(|p| p.parse().ok());
        let separated = !argv.iter().any(|a| a == "--unseparated");
        for (name, result) in super::gate_probe::run(gate, devtools, separated) {
            map.insert(name, serde_json::Value::String(result));
        }
    }
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", serde_json::Value::Object(map)) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The browser gate, serving on a runtime of its own for as long as the
/// returned value lives (its refusals are not audited here: an operator
/// command is not a call).
struct ServedGate {
    runtime: tokio::runtime::Runtime,
    refusals: tokio::sync::mpsc::Receiver<crate::browser_refusals::BrowserRefusal>,
    handle: crate::gate::Handle,
}

fn serve_gate(prepared: &mut crate::server::Parts) -> anyhow::Result<ServedGate> {
    let gate = prepared
        .gate
        .take()
        .context("the browser gate was not bound")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let resolver = std::sync::Arc::new(prepared.resolver);
    let handle = crate::gate::Handle::default();
    let refusals = {
        let _entered = runtime.enter();
        gate.serve(
            std::sync::Arc::clone(&prepared.rules),
            resolver,
            prepared.runner.socket_dir().clone(),
            std::sync::Arc::clone(prepared.runner.identities()),
            None,
            &handle,
        )?
    };
    Ok(ServedGate {
        runtime,
        refusals,
        handle,
    })
}
