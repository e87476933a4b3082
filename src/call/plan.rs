//! Planning: the subcommand grammar, then its one slot — the URL policy for
//! `open`, the output directory for `screenshot`. The plan is the exact
//! tokens agent-browser will receive.

use std::net::IpAddr;

use super::{
    grammar::{self, Slot},
    request::Validated,
};
use crate::{policy::outputs, refusal::Refusal, server::Server};

/// What a valid request will do, once allowed.
#[derive(Debug)]
pub(crate) struct Planned {
    /// The agent's command as agent-browser will receive it.
    pub(crate) tokens: Vec<String>,
    /// The addresses an `open` URL's host was checked against.
    pub(crate) resolved: Vec<IpAddr>,
    /// The file a `screenshot` will write.
    pub(crate) output: Option<outputs::Target>,
}

pub(crate) async fn plan(server: &Server, request: &Validated) -> Result<Planned, Refusal> {
    let command = grammar::parse(&request.argv)?;
    let mut planned = Planned {
        tokens: command.tokens,
        resolved: Vec::new(),
        output: None,
    };
    match command.slot {
        Slot::None => {}
        Slot::Url(raw) => {
            let checked = server
                .url_policy
                .check_open(&raw, server.resolver.as_ref())
                .await?;
            planned.tokens.push(checked.url);
            planned.resolved = checked.resolved;
        }
        Slot::OutputFile(name) => {
            let target = outputs::resolve(&server.output_dir, &request.session, name.as_deref())?;
            // Only the check: room is made once the intent is durable.
            outputs::check_room(&server.limits.output_quota)?;
            planned.tokens.push(target.path.display().to_string());
            planned.output = Some(target);
        }
    }
    Ok(planned)
}
