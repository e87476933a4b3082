//! The 2026-07-28 way to ask the person at the client: the call's result is
//! `input_required`, carrying the approval question as the same form the
//! older revisions elicit mid-call, and the client retries the call with
//! the answer and the sealed request state (`crate::approvals::retry`).
//! Only for clients that declared form elicitation on that revision.

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, ElicitRequest, ElicitResult, InputRequest, InputRequests,
        InputRequiredResult, InputResponses,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::elicit::{NO_REQUESTS_FROM, answer_of, form};
use crate::approvals::{
    Answer,
    retry::{Echo, Question, Retry},
};

/// The key of the one input request: the client answers under it.
const KEY: &str = "approval";

/// The call's client as a channel, if it speaks 2026-07-28 or newer and
/// declared form elicitation; with the answer its retry carries.
pub(super) fn retry_of(
    context: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
    client: Option<&str>,
) -> Option<Retry> {
    let revision = context.protocol_version()?.to_string();
    if revision.as_str() < NO_REQUESTS_FROM {
        return None;
    }
    let elicitation = context.client_capabilities()?.elicitation?;
    // No mode named means form, as on the older revisions.
    if elicitation.form.is_none() && elicitation.url.is_some() {
        return None;
    }
    let by = json!({"channel": "input_required", "client": client});
    let echo = request.request_state.as_ref().map(|state| Echo {
        state: state.clone(),
        answer: answer_in(request.input_responses.as_ref(), by),
    });
    Some(Retry { echo })
}

/// The person's answer among the retry's responses. A retry without one,
/// or with something that is no elicitation result, is a no.
fn answer_in(responses: Option<&InputResponses>, by: Value) -> Answer {
    let Some(response) = responses.and_then(|r| r.get(KEY)) else {
        return Answer::No {
            by,
            why: format!("the client's retry carried no answer under {KEY:?}"),
        };
    };
    match serde_json::from_value::<ElicitResult>(response.clone()) {
        Ok(result) => answer_of(&result, by),
        Err(e) => Answer::No {
            by,
            why: format!("the client's answer is not an elicitation result: {e}"),
        },
    }
}

/// The call's result when it asks: the question, and the state to echo.
pub(super) fn result_of(question: Question) -> Result<InputRequiredResult, ErrorData> {
    let params = form(question.message).map_err(|why| {
        ErrorData::internal_error(format!("the question could not be put: {why}"), None)
    })?;
    let asked = InputRequest::Elicitation(ElicitRequest::new(params));
    let requests = InputRequests::from([(KEY.to_owned(), asked)]);
    Ok(InputRequiredResult::new(
        Some(requests),
        Some(question.state),
    ))
}
