//! A field shorter than a secret keeps only the value's first characters
//! (its `maxlength`): a spelling no scrubber of the whole value finds.
//! After a command that typed secrets, the field is read once, and what it
//! kept of each secret is taught to the scrubber
//! ([`Secrets::learn_cut`]) before any reply could show it: the reply of
//! this call is normalised after, and the session's next call waits for it.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::plan::Planned;
use crate::{
    policy::secrets::Secrets,
    runner::{Bounds, Executed, Runner, Termination},
    session_id::SessionId,
};

/// How long the read of the field may take.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Read the field `planned` typed secrets into, and learn what it kept of
/// them. Nothing to do for a command that typed none or did not succeed.
pub(crate) async fn learn(
    runner: &Runner,
    secrets: &Secrets,
    session: &SessionId,
    planned: &Planned,
    executed: &Executed,
) {
    if planned.secrets.is_empty() || !matches!(executed.raw.termination, Termination::Exited(0)) {
        return;
    }
    // `fill`/`type <selector> <text>`: the field is the selector's.
    let (Some(intent), Some(selector)) = (executed.intent.as_ref(), planned.tokens.get(1)) else {
        return;
    };
    let read = vec![vec!["get".to_owned(), "value".to_owned(), selector.clone()]];
    let never = CancellationToken::new();
    let bounds = Bounds {
        timeout: READ_TIMEOUT,
        cancel: &never,
    };
    let raw = runner.run_more(intent, session, &read, bounds).await;
    let kept = serde_json::from_slice::<Value>(&raw.stdout)
        .ok()
        .and_then(|items| Some(items.pointer("/0/result/value")?.as_str()?.to_owned()));
    let Some(kept) = kept else {
        tracing::debug!(
            session = session.as_str(),
            "the field a secret was typed into could not be read back"
        );
        return;
    };
    for name in &planned.secrets {
        if secrets.learn_cut(name, &kept) {
            tracing::info!(
                session = session.as_str(),
                secret = %name,
                "a field kept only the start of a secret; that start is scrubbed as the secret is"
            );
        }
    }
}
