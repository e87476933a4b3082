//! The person at the MCP client as an approvals channel: an elicitation
//! (`elicitation/create`, form mode) asking a yes or no about exactly what
//! was shown. Only where the client declared the capability, and only on
//! revisions before 2026-07-28, which forbids requests from the server (its
//! `input_required` retry is another channel, not built). The answer comes
//! back on this request, so it cannot be replayed for another one.

use std::{sync::Arc, time::Duration};

use futures_util::future::BoxFuture;
use rmcp::{
    RoleServer,
    model::{ElicitRequestParams, ElicitationAction, ElicitationSchema},
    service::{ElicitationMode, Peer, RequestContext, ServiceError},
};
use serde_json::{Value, json};

use crate::approvals::{Answer, Ask};

/// The first revision without server-to-client requests.
const NO_REQUESTS_FROM: &str = "2026-07-28";

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
            let schema = ElicitationSchema::builder()
                .required_bool_with(APPROVE, |b| {
                    b.title("Approve")
                        .description("Tick only if you, a person, want exactly this to happen.")
                })
                .build();
            let schema = match schema {
                Ok(schema) => schema,
                Err(why) => {
                    return Answer::No {
                        by: self.by(),
                        why: format!("the question could not be put: {why}"),
                    };
                }
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: schema,
            };
            let asked = self
                .peer
                .create_elicitation_with_timeout(params, Some(within))
                .await;
            let by = self.by();
            match asked {
                Ok(result) => match result.action {
                    ElicitationAction::Accept => {
                        let yes = result
                            .content
                            .as_ref()
                            .and_then(|c| c.get(APPROVE))
                            .and_then(Value::as_bool);
                        if yes == Some(true) {
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
                },
                Err(ServiceError::Timeout { .. }) => Answer::None,
                Err(e) => Answer::No {
                    by,
                    why: format!("the client could not ask: {e}"),
                },
            }
        })
    }
}
