//! `browser-shell approvals list|show|approve|deny`: the operator's side of
//! the approvals desk (`crate::approvals::desk`), on the machine. It reads
//! the requests beside the audit log and writes an answer file the waiting
//! server picks up; the server records who answered (the answer file's
//! owner) and whether it was for exactly what was shown.

use std::{io::Write, path::PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use serde_json::Value;

use crate::approvals::desk;

/// The running server's audit log: its desk is `<FILE>.approvals/`.
pub(super) use super::reload::ReloadArgs as DeskArgs;

#[derive(Debug, Subcommand)]
pub(super) enum ApprovalsCmd {
    /// List the requests waiting for an answer (id, session, rule, what).
    List(DeskArgs),
    /// Print one request in full: the session, the subcommand and its
    /// redacted arguments, the page's URL and title, the element, the
    /// digest of what is shown.
    Show {
        #[command(flatten)]
        desk: DeskArgs,
        id: String,
    },
    /// Say yes to request ID, exactly as `show` prints it. The call runs
    /// only if its page and element are still what was shown.
    Approve {
        #[command(flatten)]
        desk: DeskArgs,
        id: String,
    },
    /// Say no to request ID; the call is refused (exit 126 to the agent).
    Deny {
        #[command(flatten)]
        desk: DeskArgs,
        id: String,
        /// Why, for the agent's refusal and the record.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Run an `approvals` command.
pub(super) fn run(cmd: &ApprovalsCmd) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match cmd {
        ApprovalsCmd::List(args) => {
            let waiting = live(args);
            if waiting.is_empty() {
                writeln!(out, "no request is waiting ({})", dir(args).display())?;
            }
            for request in waiting {
                writeln!(out, "{}", summary(&request))?;
            }
            Ok(())
        }
        ApprovalsCmd::Show { desk, id } => {
            let request = find(desk, id)?;
            writeln!(out, "{}", serde_json::to_string_pretty(&request)?)?;
            // At `--evidence images`, the page as it was when asked.
            if let Some(sha) = request
                .pointer("/shown/image/sha256")
                .and_then(Value::as_str)
            {
                let image = audit::evidence_dir(&desk.audit_log).join(format!("{sha}.png"));
                writeln!(out, "image of the page: {}", image.display())?;
            }
            Ok(())
        }
        ApprovalsCmd::Approve { desk, id } => answer(&mut out, desk, id, true, None),
        ApprovalsCmd::Deny { desk, id, reason } => {
            answer(&mut out, desk, id, false, reason.as_deref())
        }
    }
}

fn dir(args: &DeskArgs) -> PathBuf {
    desk::dir_of(&args.audit_log)
}

/// The requests whose server still runs.
fn live(args: &DeskArgs) -> Vec<Value> {
    desk::requests_in(&dir(args))
        .into_iter()
        .map(|(_, request)| request)
        .filter(desk::is_live)
        .collect()
}

fn find(args: &DeskArgs, id: &str) -> anyhow::Result<Value> {
    let Some(request) = live(args).into_iter().find(|r| r["id"] == id) else {
        bail!(
            "no request {id} is waiting at {} (answered, expired, or its server stopped); \
             `browser-shell approvals list` shows those that are",
            dir(args).display()
        );
    };
    Ok(request)
}

fn answer(
    out: &mut impl Write,
    args: &DeskArgs,
    id: &str,
    yes: bool,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let request = find(args, id)?;
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "unknown".into());
    desk::write_answer(&dir(args), &request, yes, &user, reason)
        .with_context(|| format!("cannot answer request {id} (was it answered already?)"))?;
    let said = if yes { "approved" } else { "denied" };
    writeln!(out, "{said}: {}", summary(&request))?;
    writeln!(out, "the server records the answer in its audit log")?;
    Ok(())
}

/// One line about a request.
fn summary(request: &Value) -> String {
    let shown = &request["shown"];
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let element = &shown["element"];
    let element = if element.is_null() {
        String::new()
    } else if element.get("role").is_some() {
        format!(
            " on {} {:?}",
            text(&element["role"]),
            text(&element["name"])
        )
    } else {
        format!(" on {}", element)
    };
    format!(
        "{}  session {}  rule {:?}  {}{}  at {}",
        text(&request["id"]),
        text(&shown["session_id"]),
        text(&request["rule"]),
        text(&shown["subcommand"]),
        element,
        shown["page"]["url"].as_str().unwrap_or("(page unseen)"),
    )
}
