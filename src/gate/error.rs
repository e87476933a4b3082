//! What went wrong on the gate's own connections to Chromium. Callers
//! branch on which: Chromium's own refusal of a command (a tab it no longer
//! knows has closed) is not a connection that failed (the tab may be there,
//! unpoliced). Every variant reads as a sentence for the audit record.

use serde_json::Value;

#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GateError {
    /// Chromium answered the command with this error object.
    #[error("Chromium refused: {0}")]
    Refused(Value),
    /// The connection closed before the answer came.
    #[error("the warden's connection to Chromium closed")]
    Closed,
    /// Chromium did not answer this method in time.
    #[error("Chromium did not answer {0} in time")]
    TimedOut(String),
    /// Anything else, said in words: Chromium out of reach, an answer
    /// without what it should hold, a listener that could not open.
    #[error("{0}")]
    Failed(String),
}

impl GateError {
    /// Chromium said it knows no target of the id the command named: the
    /// tab has closed. Its protocol says so only in words.
    pub(crate) fn is_unknown_target(&self) -> bool {
        matches!(self, Self::Refused(error)
            if error.get("message").and_then(Value::as_str)
                .is_some_and(|m| m.contains("No target with given id")))
    }

    /// Chromium said the tab's session has no page right now: a
    /// navigation's commit is swapping its document, and asked again a
    /// moment later it answers.
    pub(crate) fn is_between_documents(&self) -> bool {
        matches!(self, Self::Refused(error)
            if error.get("message").and_then(Value::as_str)
                .is_some_and(|m| m.contains("Not attached to an active page")))
    }
}

impl From<String> for GateError {
    fn from(why: String) -> Self {
        Self::Failed(why)
    }
}

impl From<&str> for GateError {
    fn from(why: &str) -> Self {
        Self::Failed(why.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_chromiums_own_no_such_target_answer_means_the_tab_is_gone() {
        let gone =
            GateError::Refused(json!({"code": -32602, "message": "No target with given id found"}));
        assert!(gone.is_unknown_target());
        let other = GateError::Refused(json!({"code": -32000, "message": "Not allowed"}));
        assert!(!other.is_unknown_target());
        // Words that merely mention it, from the gate or a dead connection, do not count.
        assert!(!GateError::Failed("No target with given id".into()).is_unknown_target());
        assert!(!GateError::Closed.is_unknown_target());
        assert!(!GateError::TimedOut("Target.getTargetInfo".into()).is_unknown_target());
    }

    #[test]
    fn only_chromiums_own_no_page_answer_means_a_document_swap() {
        let swapping = GateError::Refused(
            json!({"code": -32000, "message": "Not attached to an active page"}),
        );
        assert!(swapping.is_between_documents());
        let other = GateError::Refused(json!({"code": -32000, "message": "Not allowed"}));
        assert!(!other.is_between_documents());
        assert!(!GateError::Failed("Not attached to an active page".into()).is_between_documents());
    }
}
