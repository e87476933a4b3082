//! The operator's desk: pending requests as files in `<audit-log>.approvals/`
//! (0700, files 0600), answered on the machine by `browser-shell approvals
//! approve|deny ID`, which writes an answer file beside the request.
//!
//! The directory lies beside the audit log, which the server refuses to
//! run with in the confined agent-browser's reach (Landlock): the agent
//! can neither read a request nor write an answer. An answer names the
//! digest of what was shown, so it says yes to exactly that request; the
//! answering file's owner (its uid, from the kernel) is the identity the
//! record gives, beside the name the operator's command reports. A request
//! names its server's pid: a request whose server is gone is not listed,
//! and a server drops what an earlier one left.

use std::{
    fs,
    io::Write,
    os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    time::Duration,
};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Answer;

/// How often a waiting call looks for an answer.
const LOOK_EVERY: Duration = Duration::from_millis(100);

const REQUEST: &str = ".request.json";
const ANSWER: &str = ".answer.json";

/// The desk's directory beside `audit_log`.
pub(crate) fn dir_of(audit_log: &Path) -> PathBuf {
    let mut name = audit_log.as_os_str().to_owned();
    name.push(".approvals");
    PathBuf::from(name)
}

/// The operator's desk of one server.
#[derive(Debug)]
pub(crate) struct Desk {
    dir: PathBuf,
}

impl Desk {
    /// The desk beside `audit_log`, made private; requests an earlier
    /// server left are dropped (a restart drops pending approvals).
    pub(crate) fn open(audit_log: &Path) -> std::io::Result<Self> {
        let dir = dir_of(audit_log);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let desk = Self { dir };
        for (path, request) in desk.requests() {
            let pid = request.get("server_pid").and_then(Value::as_u64);
            if pid.is_none_or(|pid| !crate::runner::is_alive(pid as u32)) {
                let _ = fs::remove_file(&path);
                let _ = fs::remove_file(desk.answer_path_of(&path));
            }
        }
        Ok(desk)
    }

    /// Put a request on the desk (atomically: a reader sees all of it or
    /// nothing).
    pub(crate) fn post(&self, id: &str, request: &Value) -> std::io::Result<()> {
        let path = self.dir.join(format!("{id}{REQUEST}"));
        write_new(&path, request)
    }

    /// Wait for the answer to request `id`, whose shown content has digest
    /// `shown_sha256`, for at most `within`; the request is taken off the
    /// desk whatever the answer.
    pub(crate) async fn answer(
        &self,
        id: &str,
        shown_sha256: &str,
        within: Duration,
        cancel: &CancellationToken,
    ) -> Answer {
        let request = self.dir.join(format!("{id}{REQUEST}"));
        let answer_path = self.answer_path_of(&request);
        let give_up = tokio::time::Instant::now() + within;
        let answer = loop {
            if let Some(answer) = read_answer(&answer_path, id, shown_sha256) {
                break answer;
            }
            if tokio::time::Instant::now() >= give_up {
                break Answer::None;
            }
            tokio::select! {
                () = tokio::time::sleep(LOOK_EVERY) => {}
                () = cancel.cancelled() => break Answer::Cancelled,
            }
        };
        let _ = fs::remove_file(&request);
        let _ = fs::remove_file(&answer_path);
        answer
    }

    /// Every request on the desk whose file parses, with its path.
    fn requests(&self) -> Vec<(PathBuf, Value)> {
        requests_in(&self.dir)
    }

    fn answer_path_of(&self, request: &Path) -> PathBuf {
        let name = request.file_name().and_then(|n| n.to_str()).unwrap_or("");
        self.dir.join(name.replace(REQUEST, ANSWER))
    }
}

/// The requests in a desk's directory, with their paths (oldest first).
pub(crate) fn requests_in(dir: &Path) -> Vec<(PathBuf, Value)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, Value)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(REQUEST)))
        .filter_map(|p| {
            let text = fs::read_to_string(&p).ok()?;
            Some((p, serde_json::from_str(&text).ok()?))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Whether a request's server still runs.
pub(crate) fn is_live(request: &Value) -> bool {
    request
        .get("server_pid")
        .and_then(Value::as_u64)
        .is_some_and(|pid| crate::runner::is_alive(pid as u32))
}

/// Write the answer to `request` (as read from the desk in `dir`): `yes`,
/// from `user`, with the operator's `note`. Refused when an answer is
/// there already.
pub(crate) fn write_answer(
    dir: &Path,
    request: &Value,
    yes: bool,
    user: &str,
    note: Option<&str>,
) -> std::io::Result<PathBuf> {
    let id = request
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let answer = json!({
        "id": id,
        "answer": if yes { "approve" } else { "deny" },
        "shown_sha256": request.get("shown_sha256"),
        "user": user,
        "note": note,
    });
    let path = dir.join(format!("{id}{ANSWER}"));
    write_new(&path, &answer)?;
    Ok(path)
}

/// Write `value` to `path`, which must not exist, in one step.
fn write_new(path: &Path, value: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(value.to_string().as_bytes())?;
    file.sync_all()?;
    drop(file);
    // A hard link fails if `path` exists: an answer is never replaced.
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    linked
}

/// The answer at `path`, if one is there: yes only when it is for request
/// `id` and the digest of what was shown; the file owner's uid is who.
fn read_answer(path: &Path, id: &str, shown_sha256: &str) -> Option<Answer> {
    let text = fs::read_to_string(path).ok()?;
    let uid = fs::metadata(path).ok()?.uid();
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let field = |key: &str| answer.get(key).and_then(Value::as_str);
    let by = json!({"channel": "operator", "uid": uid, "user": field("user")});
    if field("id") != Some(id) || field("shown_sha256") != Some(shown_sha256) {
        return Some(Answer::No {
            by,
            why: "the answer was for another request or for something not shown".into(),
        });
    }
    Some(match field("answer") {
        Some("approve") => Answer::Yes { by },
        Some("deny") => Answer::No {
            by,
            why: field("note").map_or_else(
                || "the operator said no".into(),
                |n| format!("the operator said no: {n}"),
            ),
        },
        _ => Answer::No {
            by,
            why: "the answer is neither approve nor deny".into(),
        },
    })
}

#[cfg(test)]
#[path = "desk_tests.rs"]
mod tests;
