//! Running the agent's command: the batch goes to the session's child only
//! through the release check — the intent durable, the page looked at first
//! if the session's last command left it unchecked, room made for a
//! screenshot — and the client's cancellation or the server's shutdown
//! stops it.

use super::{
    context::Call,
    guard::{self, Guard},
    intent::Intent,
    plan::Planned,
    request::Validated,
};
use crate::{
    policy::outputs::{self, Outputs},
    runner::{Bounds, Executed, Runner, Withheld, Withhold},
    session_id::SessionId,
};

pub(crate) async fn execute(
    services: super::Services<'_>,
    call: &Call<'_>,
    request: &Validated,
    planned: &Planned,
    intent: Intent,
    (guard, just_bound): (Guard, bool),
) -> Executed {
    // Chromium renders only the visible tab of a window, so actions in a
    // background tab wait out a 5 s timeout; a subcommand that reads runs
    // where it is, and activating anyway would switch tabs whenever two
    // sessions take turns on one Chromium. A person watching should see the
    // page an `open` (or a new session's first call) went to: its tab comes
    // forward beside this batch, not after the reply, where it would hold up
    // the session's next command (docs/design.md, "The daemon pool").
    let facts = planned.subcommand.facts();
    let front = !facts.ends_session && (!facts.background_ok || facts.comes_forward || just_bound);
    let batch = batch(services.journal, call, request, planned, guard);
    // The client's cancellation, or the server's shutdown, stops the call.
    let cancel = services.admission.shutdown_token();
    // Aborted when this future ends, however it ends: dropped unfinished
    // (its client went away mid-call), it must not leave the task waiting.
    let forward = {
        let (from_client, to_call) = (call.cancel.clone(), cancel.clone());
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            from_client.cancelled().await;
            to_call.cancel();
        }))
    };
    // The session's last command ended without the guard looking at the
    // page (it failed, timed out or was cancelled): look now, before this
    // command acts on whatever page that is.
    let look_first = guard.is_on() && services.sessions.is_unlooked(request.session.daemon_name());
    let mut waited = None;
    let release = released(
        services,
        call,
        (request, planned),
        intent,
        look_first,
        &mut waited,
    );
    // While the command runs, the gate lets a secret's text reach only a
    // focused frame on the secret's hosts (a field in a frame of another
    // origin is refused there).
    let _typing = (!planned.secrets.is_empty()).then(|| {
        services
            .typing
            .begin(request.session.daemon_name(), &planned.secrets)
    });
    let bounds = Bounds {
        timeout: request.timeout,
        cancel: &cancel,
    };
    let mut executed = services
        .runner
        .run(&request.session, &batch, bounds, front, release)
        .await;
    forward.abort();
    executed.waited = waited;
    executed
}

/// The batch agent-browser gets: the agent's tokens, a secret's text filled
/// in, the guard's read appended. From now on no record holds the call's
/// typed text in clear, not even in the URL of the page a form sends it to.
fn batch(
    journal: &crate::obs::journal::Journal,
    call: &Call<'_>,
    request: &Validated,
    planned: &Planned,
    guard: Guard,
) -> Vec<Vec<String>> {
    for text in super::record::free_text(&request.argv) {
        journal.remember_typed(text);
    }
    let mut tokens = planned.tokens.clone();
    if !planned.secrets.is_empty()
        && let Some(text) = tokens.last_mut()
    {
        // Filled in now, sent only once the release check checked the page.
        *text = call.rules.secrets.fill_in(text);
    }
    guard::batch_for(tokens, guard)
}

/// Resolves when the command may run: its intent durable, the page the
/// last command left looked at when it was not (`look_first`; how long
/// that took goes to `waited`), the page on a typed secret's hosts, and a
/// screenshot's room made. Any of them failing withholds the command.
async fn released(
    services: super::Services<'_>,
    call: &Call<'_>,
    (request, planned): (&Validated, &Planned),
    intent: Intent,
    look_first: bool,
    waited: &mut Option<String>,
) -> Result<audit::IntentSynced, Withheld> {
    let intent = intent.durable().await.map_err(|why| Withheld {
        why: Withhold::Audit(why.to_string()),
        intent: None,
    })?;
    let (runner, session) = (services.runner, &request.session);
    let intent = if look_first {
        let (intent, slow) =
            guard::look_before(runner, services.resolver, &call.rules, session, intent).await?;
        *waited = slow;
        intent
    } else {
        intent
    };
    let intent = if planned.secrets.is_empty() {
        intent
    } else {
        let names = &planned.secrets;
        guard::check_secret_hosts(runner, &call.rules, session, intent, names).await?
    };
    // A screenshot's room is made (the oldest files deleted) last: it is
    // the call's first side effect, due only once the intent is durable
    // and the guard let the command run.
    if let Some(target) = &planned.output {
        make_room(services.outputs, session).await;
        hand_over(services.outputs, runner, session.daemon_name(), target);
    }
    Ok(intent)
}

/// The screenshot's directories go to the daemon's uid, which writes there.
/// If they cannot, agent-browser's write fails and says so in the reply.
fn hand_over(outputs: &Outputs, runner: &Runner, daemon: &str, target: &outputs::Target) {
    let uid = match runner.identities().for_daemon(daemon) {
        Ok(Some(uid)) => uid,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "no uid for the session's daemon");
            return;
        }
    };
    if let Err(e) = outputs::hand_over(&outputs.dir, target, uid.get()) {
        tracing::warn!(error = %e, "the screenshot's directory was not handed to the daemon");
    }
}

/// Delete the oldest screenshots until one more fits the quotas (file I/O,
/// on a blocking thread).
async fn make_room(outputs: &Outputs, session: &SessionId) {
    let (root, name, quota) = (
        outputs.dir.clone(),
        session.own_name().to_owned(),
        outputs.quota,
    );
    match tokio::task::spawn_blocking(move || outputs::make_room(&root, &name, &quota)).await {
        Ok(0) => {}
        Ok(removed) => tracing::info!(
            removed,
            session = session.as_str(),
            "oldest screenshots removed to stay within the output quota"
        ),
        Err(e) => tracing::warn!(error = %e, "making room for a screenshot did not finish"),
    }
}
