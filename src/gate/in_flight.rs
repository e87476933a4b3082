//! agent-browser's commands on a tab that Chromium has not answered yet.
//!
//! When a tab closes while a command on it is being handled (a popup
//! closed as it opened, a page that calls `window.close()`), Chromium
//! detaches the CDP session and never answers that command, and
//! agent-browser waits for the answer until the call times out. The relay
//! answers each such command with the error Chromium gives a command sent
//! after the detach, so the daemon carries on at once.
//!
//! It also remembers the CDP sessions that ended, so a command that names
//! one is answered like Chromium would, not refused and audited as a tab
//! that escaped the URL policy; and the commands it answered itself, so
//! that Chromium's own late answer to one (it often sends the error after
//! the detach) is not a second answer.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::Hash,
};

/// The error Chromium answers a command on a detached CDP session with.
pub(super) const SESSION_GONE: &str = "Session with given id not found.";

/// How many ended CDP sessions, and commands the gate answered, are
/// remembered: enough for what agent-browser sends on a tab it has just
/// seen close, bounded against a page that opens and closes tabs without
/// end.
const REMEMBERED: usize = 256;

/// How many unanswered commands are tracked: agent-browser has a handful in
/// flight; a child that sends commands Chromium never answers does not grow
/// the server (one past this is simply not answered for on a detach).
const MAX_PENDING: usize = 4096;

/// One connection's unanswered commands and ended CDP sessions.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    /// CDP session of each unanswered command, by the command's id.
    pending: HashMap<u64, String>,
    ended: Recent<String>,
    answered_by_gate: Recent<u64>,
}

impl InFlight {
    /// Command `id` on CDP session `cdp_session` went to Chromium.
    pub(super) fn sent(&mut self, id: u64, cdp_session: &str) {
        if self.pending.len() < MAX_PENDING {
            self.pending.insert(id, cdp_session.to_owned());
        }
    }

    /// Chromium answered command `id`. False when the gate has answered it
    /// already, so this answer is not to be passed on.
    pub(super) fn answered(&mut self, id: u64) -> bool {
        self.pending.remove(&id);
        !self.answered_by_gate.take(&id)
    }

    /// Might Chromium's next message answer a command the gate tracks?
    /// (Answers are read only then.)
    pub(super) fn waiting(&self) -> bool {
        !self.pending.is_empty() || !self.answered_by_gate.is_empty()
    }

    /// CDP session `cdp_session` ended: the ids of its commands Chromium
    /// may never answer, in the order they were sent; the gate answers them.
    pub(super) fn ended(&mut self, cdp_session: &str) -> Vec<u64> {
        let mut orphans: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, s)| *s == cdp_session)
            .map(|(id, _)| *id)
            .collect();
        orphans.sort_unstable();
        for id in &orphans {
            self.pending.remove(id);
            self.answered_by_gate.insert(*id);
        }
        self.ended.insert(cdp_session.to_owned());
        orphans
    }

    /// Did CDP session `cdp_session` end (recently)?
    pub(super) fn has_ended(&self, cdp_session: &str) -> bool {
        self.ended.contains(cdp_session)
    }
}

/// A set that keeps only its [`REMEMBERED`] latest members.
#[derive(Debug)]
struct Recent<T> {
    members: HashSet<T>,
    order: VecDeque<T>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self {
            members: HashSet::new(),
            order: VecDeque::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Recent<T> {
    fn insert(&mut self, member: T) {
        if !self.members.insert(member.clone()) {
            return;
        }
        self.order.push_back(member);
        while self.order.len() > REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.members.remove(&oldest);
            }
        }
    }

    fn contains<Q: Hash + Eq + ?Sized>(&self, member: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        self.members.contains(member)
    }

    /// Remove `member`; true if it was there.
    fn take(&mut self, member: &T) -> bool {
        let was = self.members.remove(member);
        if was {
            self.order.retain(|m| m != member);
        }
        was
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// The id of Chromium's answer in `text`, read without parsing the whole
/// message (an answer may be a multi-megabyte screenshot). Chromium writes
/// an answer's id first; a message in any other form is parsed in full.
pub(super) fn answer_id(text: &str) -> Option<u64> {
    if let Some(rest) = text.strip_prefix("{\"id\":") {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        return rest[..digits].parse().ok();
    }
    if text.starts_with("{\"method\":") {
        return None;
    }
    serde_json::from_str::<serde_json::Value>(text)
        .ok()?
        .get("id")?
        .as_u64()
}

/// The answer the relay gives command `id` on an ended CDP session.
pub(super) fn session_gone_answer(id: Option<serde_json::Value>, cdp_session: &str) -> String {
    serde_json::json!({
        "id": id.unwrap_or_default(),
        "sessionId": cdp_session,
        "error": {"code": -32001, "message": SESSION_GONE},
    })
    .to_string()
}

#[cfg(test)]
#[path = "in_flight_tests.rs"]
mod tests;
