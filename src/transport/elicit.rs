//! The person at the MCP client as an approvals channel: an elicitation
//! (`elicitation/create`, form mode) asking a yes or no about exactly what
//! was shown. Only where the client declared the capability, and only on
//! revisions before 2026-07-28, which forbids requests from the server (its
//! `input_required` retry carries the same form: `super::input_required`).
//! The answer comes back on this request, so it cannot be replayed for
//! another one.

use std::{sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use rmcp::{
    RoleServer,
    model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema},
    service::{ElicitationMode, Peer, RequestContext, ServiceError},
};
use serde_json::{Value, json};

use crate::approvals::{Answer, Ask};

/// The first revision without server-to-client requests.
pub(super) const NO_REQUESTS_FROM: &str = "2026-07-28";

/// The key of the form's one field.
const APPROVE: &str = "approve";

/// The client of one call, when it can be asked.
pub(crate) struct Elicit {
    peer: Peer<RoleServer>,
    /// Who answers, as the client names itself.
    client: Option<String>,
}

impl std::fmt::Debug for Elicit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elicit")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Elicit {
    /// The call's client as a channel, if it declared form elicitation on
    /// a revision that lets the server ask.
    pub(crate) fn of(
        context: &RequestContext<RoleServer>,
        client: Option<String>,
    ) -> Option<Arc<dyn Ask>> {
        let revision = context.protocol_version().map(|v| v.to_string())?;
        if revision.as_str() >= NO_REQUESTS_FROM {
            return None;
        }
        let modes = context.peer.supported_elicitation_modes();
        modes.contains(&ElicitationMode::Form).then(|| {
            Arc::new(Self {
                peer: context.peer.clone(),
                client,
            }) as Arc<dyn Ask>
        })
    }

    fn by(&self) -> Value {
        json!({"channel": "elicitation", "client": self.client})
    }
}

impl Ask for Elicit {
    fn ask(&self, message: String, within: Duration) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let by = self.by();
            let params = match form(message) {
                Ok(params) => params,
                Err(why) => {
                    let why = format!("the question could not be put: {why}");
                    return Answer::No { by, why };
                }
            };
            let asked = self
                .peer
                .create_elicitation_with_timeout(params, Some(within))
                .await;
            match asked {
                Ok(result) => answer_of(&result, by),
                Err(ServiceError::Timeout { .. }) => Answer::None,
                Err(e) => Answer::No {
                    by,
                    why: format!("the client could not ask: {e}"),
                },
            }
        })
    }
}

/// The question as a form with one required box to tick: the same on
/// every revision; the schema builder's complaint if it refuses it.
pub(super) fn form(message: String) -> Result<ElicitRequestParams, &'static str> {
    let schema = ElicitationSchema::builder()
        .required_bool_with(APPROVE, |b| {
            b.title("Approve")
                .description("Tick only if you, a person, want exactly this to happen.")
        })
        .build()?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    })
}

/// The person's answer in the client's result: only a ticked box is a yes.
pub(super) fn answer_of(result: &ElicitResult, by: Value) -> Answer {
    match result.action {
        ElicitationAction::Accept => {
            let content = result.content.as_ref();
            let ticked = content
                .and_then(|c| c.get(APPROVE))
                .and_then(Value::as_bool);
            if ticked == Some(true) {
                Answer::Yes { by }
            } else {
                Answer::No {
                    by,
                    why: "the person at the client did not tick approve".into(),
                }
            }
        }
        ElicitationAction::Decline => Answer::No {
            by,
            why: "the person at the client declined".into(),
        },
        _ => Answer::No {
            by,
            why: "the person at the client cancelled".into(),
        },
    }
}
