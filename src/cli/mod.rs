//! The command line: `serve` (the default) prepares the operator's
//! configuration ([`flags`], [`prepare`]) and runs the server ([`serve`]);
//! `policy` and `audit` are the reviewers' read-only commands ([`review`]);
//! `hardening` proves the confinement on this machine ([`operator`]);
//! `approvals` answers what a running server asks a person ([`approvals`]).

mod approvals;
mod diagnostics;
mod flags;
mod gate_probe;
mod inputs;
mod instance;
mod operator;
mod prepare;
mod reload;
mod review;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "browser-shell",
    version,
    about = "Audit-first MCP stdio server: one tool, `browser-shell`, that drives Chromium through allow-listed agent-browser subcommands",
    long_about = None,
    args_conflicts_with_subcommands = true,
    after_help = "With no subcommand, `serve` runs. Every flag also reads the environment variable shown.\n\
                  Exit codes of tool replies: 0 ok, 1 agent-browser failure, 124 timed out, 125 browser-shell error, 126 refused."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    serve: flags::ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the MCP server on stdin/stdout (the default).
    Serve(flags::ServeArgs),
    /// Validate a URL policy file, explain the verdict on one URL, or make
    /// a running server read its policy file again.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Check and summarise audit logs (for reviewers; reads only).
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Inspect and prove the confinement of agent-browser on this machine.
    #[command(subcommand)]
    Hardening(HardeningCmd),
    /// Answer the approvals a running server waits for (the policy's
    /// `approvals` rules): list them, show one, approve or deny it. On the
    /// machine only: neither the agent nor the page can reach them.
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCmd),
    /// Internal: the confined self-probe `hardening check` runs.
    #[command(name = "__probe", hide = true)]
    Probe {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum PolicyCmd {
    /// Validate FILE and print the effective policy (exit 2 when invalid).
    Check(review::PolicyCheckArgs),
    /// Print the verdict on URL and the rule that decided it (resolves DNS).
    /// Exits 0 when allowed, 1 when refused.
    Explain(review::PolicyExplainArgs),
    /// Make the running server read its policy file again (SIGHUP, found
    /// through the pid file beside its audit log) and print what it did: a
    /// valid file applies from the next call; an invalid one is refused and
    /// the policy in force stays (exit 1). Both are audited.
    Reload(reload::ReloadArgs),
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check the hash chain and checkpoint; name the first broken record
    /// (file, line, seq, what it stores vs what the chain requires); list
    /// torn lines and intents without outcome. Needs only the checkpoint's
    /// public key (`<log>.checkpoint-key.pub`), never the redaction key. Exits 0 when the log is INTACT, 1 when it is NOT
    /// INTACT, 3 when it is UNVOUCHED (the chain holds, but its server kept
    /// a checkpoint that is gone or under another key, and no --against
    /// anchor reaches its end: records may have been cut from the end),
    /// 2 on a usage or read error.
    Verify(review::VerifyArgs),
    /// Verify first (as `verify` does) and say so at the top; then each
    /// session's counts and destinations, one timeline in log order
    /// (redacted argv, verdict, rule and reason, who made a refused request,
    /// exit, duration, the page after, digests; `--session` for one
    /// session's rows), the servers and policies seen, totals. A log that is not intact is not
    /// rendered unless `--render-anyway` (exit 1 either way); an UNVOUCHED
    /// one is rendered under that verdict (exit 3).
    Report(review::ReportArgs),
}

#[derive(Debug, Subcommand)]
enum HardeningCmd {
    /// Print what will be enforced, then run a confined self-probe (writes
    /// outside, connects elsewhere — Chromium's DevTools port included —,
    /// asks the browser gate for downloads and `file:` tabs, ptrace, mount,
    /// …) and report each result. Exits 0 only if every escape attempt was
    /// refused as expected.
    Check(flags::ServeArgs),
    /// Run the configured agent-browser with ARGS, confined exactly as a call
    /// would be but without browser-shell's validation: shows what the kernel
    /// and the browser gate alone refuse. `--cdp` is set to a gate of this
    /// run's own, so use a new `--session` each run. Example:
    /// `hardening exec -- --json --session x screenshot /etc/x.png`.
    Exec {
        #[command(flatten)]
        serve: flags::ServeArgs,
        /// Arguments for agent-browser (after `--`).
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

/// Parse the command line and run what it asks for.
pub fn main() -> ExitCode {
    // Every agent-browser child starts as this binary under the
    // trampoline's name (see `Runner::confined_command`): it confines
    // itself and execs agent-browser, before anything else here runs.
    if hardening::trampoline::invoked() {
        hardening::trampoline::main();
    }
    // Before any thread exists to look a name up (the OTLP exporters resolve
    // their collector's host too): glibc does not lock its table against it.
    if let Err(e) = hardening::nss::hosts_from_builtin_modules() {
        eprintln!("browser-shell: cannot keep host-name lookups to glibc's files and dns: {e}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse();
    let diagnostics_dir = match &cli.command {
        Some(Cmd::Serve(args)) => args.diagnostics_dir.clone(),
        None => cli.serve.diagnostics_dir.clone(),
        _ => None,
    };
    diagnostics::init(diagnostics_dir.as_deref());
    let result = match cli.command {
        Some(Cmd::Serve(args)) => serve::serve(&args).map(|()| ExitCode::SUCCESS),
        None => serve::serve(&cli.serve).map(|()| ExitCode::SUCCESS),
        Some(Cmd::Policy(PolicyCmd::Check(args))) => {
            review::policy_check(&args).map(|()| ExitCode::SUCCESS)
        }
        Some(Cmd::Policy(PolicyCmd::Explain(args))) => review::policy_explain(&args).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        Some(Cmd::Policy(PolicyCmd::Reload(args))) => reload::reload(&args).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        Some(Cmd::Audit(AuditCmd::Verify(args))) => {
            review::verify(&args).map(|trust| ExitCode::from(trust.exit_code()))
        }
        Some(Cmd::Audit(AuditCmd::Report(args))) => {
            review::report(&args).map(|trust| ExitCode::from(trust.exit_code()))
        }
        Some(Cmd::Hardening(HardeningCmd::Check(args))) => {
            operator::hardening_check(&args).map(|ok| {
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            })
        }
        Some(Cmd::Hardening(HardeningCmd::Exec { serve, args })) => {
            operator::hardening_exec(&serve, &args)
                .map(|code| ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Some(Cmd::Approvals(cmd)) => approvals::run(&cmd).map(|()| ExitCode::SUCCESS),
        Some(Cmd::Probe { args }) => {
            return ExitCode::from(u8::try_from(operator::probe(&args)).unwrap_or(1));
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("browser-shell: {e:#}");
            ExitCode::from(2)
        }
    }
}
