//! The `browser-shell` binary: parse the operator's configuration, prepare,
//! and serve MCP on stdio. stdout carries JSON-RPC and nothing else;
//! diagnostics go to stderr.

#![forbid(unsafe_code)]

use std::{process::ExitCode, sync::Arc};

use anyhow::Context;
use browser_shell::{config, mcp, operator, pipeline, review, stdio, telemetry, wire};
use clap::{Parser, Subcommand};
use rmcp::ServiceExt;

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
    serve: config::ServeArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the MCP server on stdin/stdout (the default).
    Serve(config::ServeArgs),
    /// Validate a URL policy file, or explain the verdict on one URL.
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Check and summarise audit logs (for reviewers; reads only).
    #[command(subcommand)]
    Audit(AuditCmd),
    /// Inspect and prove the confinement of agent-browser on this machine.
    #[command(subcommand)]
    Hardening(HardeningCmd),
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
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// Check the hash chain and checkpoint; name the first broken record
    /// (file, line, seq, expected vs found); list torn lines and intents
    /// without outcome. Exits 0 only when the log is intact.
    Verify(review::VerifyArgs),
    /// Per-session timelines, totals, denials by rule, p50/p95 durations.
    Report(review::ReportArgs),
}

#[derive(Debug, Subcommand)]
enum HardeningCmd {
    /// Print what will be enforced, then run a confined self-probe (writes
    /// outside, connects elsewhere, ptrace, mount, …) and report each result.
    /// Exits 0 only if every escape attempt was refused as expected.
    Check(config::ServeArgs),
    /// Run the configured agent-browser with ARGS, confined exactly as a call
    /// would be but without browser-shell's validation: shows what the kernel
    /// alone refuses. Example: `hardening exec -- --cdp 9222 --json screenshot /etc/x.png`.
    Exec {
        #[command(flatten)]
        serve: config::ServeArgs,
        /// Arguments for agent-browser (after `--`).
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Every agent-browser child starts as this binary under the
    // trampoline's name (see `Runner::confined_command`): it confines
    // itself and execs agent-browser, before anything else here runs.
    if hardening::trampoline::invoked() {
        hardening::trampoline::main();
    }
    let cli = Cli::parse();
    let diagnostics_dir = match &cli.command {
        Some(Cmd::Serve(args)) => args.diagnostics_dir.clone(),
        None => cli.serve.diagnostics_dir.clone(),
        _ => None,
    };
    init_diagnostics(diagnostics_dir.as_deref());
    let result = match cli.command {
        Some(Cmd::Serve(args)) => serve(&args).map(|()| ExitCode::SUCCESS),
        None => serve(&cli.serve).map(|()| ExitCode::SUCCESS),
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
        Some(Cmd::Audit(AuditCmd::Verify(args))) => review::verify(&args).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        Some(Cmd::Audit(AuditCmd::Report(args))) => {
            review::report(&args).map(|()| ExitCode::SUCCESS)
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

/// Diagnostics go to stderr (stdout is JSON-RPC), filtered by `RUST_LOG`, and
/// optionally to a daily rolling file. rmcp logs whole requests — tool
/// arguments, so typed passwords — at debug and below; those never get
/// through, whatever `RUST_LOG` says. (The audit trail is not diagnostics: it
/// has its own durable writer.)
fn init_diagnostics(dir: Option<&std::path::Path>) {
    use tracing_subscriber::{
        EnvFilter, Layer, filter::filter_fn, layer::SubscriberExt, util::SubscriberInitExt,
    };
    let env = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new("info,opentelemetry=warn"))
    };
    let no_request_bodies = || {
        filter_fn(|meta| {
            !(meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO)
        })
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(env())
        .with_filter(no_request_bodies());
    // A plain (blocking) appender: tracing-appender's non_blocking writer can
    // drop lines, and print to stdout when its worker misses the shutdown.
    let file = dir.map(|dir| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(tracing_appender::rolling::daily(
                dir,
                "browser-shell.log",
            )))
            .with_ansi(false)
            .with_filter(env())
            .with_filter(no_request_bodies())
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .init();
}

fn serve(args: &config::ServeArgs) -> anyhow::Result<()> {
    let prepared = args.prepare()?;
    let grace = std::time::Duration::from_secs(args.shutdown_grace_sec);
    tracing::info!(
        agent_browser = %prepared.runner.agent_browser.display(),
        cdp_port = prepared.runner.cdp_port,
        audit_log = %prepared.audit.path().display(),
        "browser-shell ready on stdio"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // OTLP exporters must be built inside the runtime (tonic spawns a task).
    let telemetry = {
        let _entered = runtime.enter();
        telemetry::Telemetry::from_env().context("bad OTEL_* configuration")?
    };
    if telemetry.is_enabled() {
        tracing::info!("OTLP export on (best effort; the audit log is the record)");
    }
    let pipeline = Arc::new(pipeline::Pipeline::new(prepared, telemetry.clone()));
    runtime.block_on(async move {
        // stdin → wire → rmcp → wire → stdout: the wire frames, bounds and
        // parses messages, answers malformed ones itself, is rmcp's transport
        // and stdout's only writer; `stdio` decides how stdin and stdout are
        // read and written.
        let (transport, ends) = wire::Wire::new();
        let (answers_tx, answers_rx) = tokio::sync::mpsc::unbounded_channel();
        let fault_sink = Arc::clone(&pipeline);
        let input = tokio::spawn(wire::pump_input(
            stdio::input(),
            ends.to_server,
            answers_tx,
            move |fault| fault_sink.record_protocol_fault(fault),
        ));
        let output = tokio::spawn(wire::pump_output(
            ends.from_server,
            answers_rx,
            stdio::output(),
        ));
        pipeline.adopt_orphans().await;
        let reaper = {
            let pipeline = Arc::clone(&pipeline);
            tokio::spawn(async move {
                let tick = (pipeline.session_idle() / 4).clamp(
                    std::time::Duration::from_millis(250),
                    std::time::Duration::from_secs(30),
                );
                loop {
                    tokio::time::sleep(tick).await;
                    pipeline.reap_idle().await;
                }
            })
        };
        let service = mcp::BrowserShellServer::new(Arc::clone(&pipeline))
            .serve(transport)
            .await?;
        let stop = service.cancellation_token();
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            quit = service.waiting() => { quit?; }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: refusing new calls, letting in-flight calls finish");
                pipeline.drain(grace).await;
                stop.cancel();
                input.abort();
            }
        }
        // Everything rmcp and the wire still have to say reaches stdout; a
        // client that stops reading cannot hold the exit.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), output).await;
        reaper.abort();
        // No standby outlives the server (one would also exit on its own,
        // reading EOF, but not before the runtime is gone).
        pipeline.runner.standbys.clear();
        // Deferred audit records reach the disk, and the checkpoint names
        // the last one, before the process goes.
        pipeline.flush_audit();
        tracing::info!("browser-shell exiting");
        anyhow::Ok(())
    })?;
    // Flush OTLP with a bound; a dead collector cannot hold the exit longer.
    telemetry.shutdown(std::time::Duration::from_secs(2));
    // When stdin is not a pipe, tokio reads it on a blocking thread that
    // cannot be interrupted while the client keeps it open (SIGTERM): do not
    // wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}
