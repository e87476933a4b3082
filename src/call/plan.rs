//! Planning: the subcommand grammar, then its one slot — the URL policy for
//! `open`, the output directory for `screenshot`. The plan is the exact
//! tokens agent-browser will receive.

use std::net::IpAddr;

use super::{
    grammar::{self, Slot},
    request::Validated,
    subcommand::Subcommand,
};
use crate::{
    policy::{
        outputs::{self, Outputs},
        resolve::Resolve,
        rules::Rules,
        secrets,
    },
    refusal::{Refusal, Rule},
};

/// What a valid request will do, once allowed.
#[derive(Debug)]
pub(crate) struct Planned {
    /// Which allow-listed subcommand it is: the later stages ask its facts.
    pub(crate) subcommand: Subcommand,
    /// The agent's command as agent-browser will receive it.
    pub(crate) tokens: Vec<String>,
    /// The addresses an `open` URL's host was checked against.
    pub(crate) resolved: Vec<IpAddr>,
    /// The file a `screenshot` will write.
    pub(crate) output: Option<outputs::Target>,
    /// The secrets whose `{{secret:NAME}}` placeholders the text of `fill` or
    /// `type` holds (the last token): typed only if the page is on their hosts.
    pub(crate) secrets: Vec<String>,
}

pub(crate) async fn plan(
    resolver: &dyn Resolve,
    outputs: &Outputs,
    rules: &Rules,
    request: &Validated,
) -> Result<Planned, Refusal> {
    let command = grammar::parse(&request.argv)?;
    let mut planned = Planned {
        subcommand: command.subcommand,
        secrets: secrets_named(rules, command.subcommand, &request.argv)?,
        tokens: command.tokens,
        resolved: Vec::new(),
        output: None,
    };
    match command.slot {
        Slot::None => {}
        Slot::Url(raw) => {
            let checked = rules.url.check_open(&raw, resolver).await?;
            planned.tokens.push(checked.url);
            planned.resolved = checked.resolved;
        }
        Slot::OutputFile(name) => {
            let target = outputs::resolve(&outputs.dir, &request.session, name.as_deref())?;
            // Only the check: room is made once the intent is durable.
            outputs::check_room(&outputs.quota)?;
            planned.tokens.push(target.path.display().to_string());
            planned.output = Some(target);
        }
    }
    Ok(planned)
}

/// The secrets a command's placeholders name. Only the text of `fill` and
/// `type` is substituted; a placeholder anywhere else would be sent as it is,
/// so it is refused, as is one naming no configured secret.
fn secrets_named(
    rules: &Rules,
    subcommand: Subcommand,
    argv: &[String],
) -> Result<Vec<String>, Refusal> {
    let text_at = subcommand.facts().secrets_at;
    for (i, arg) in argv.iter().enumerate() {
        if Some(i) != text_at && secrets::mentions_placeholder(arg) {
            return Err(Refusal::new(
                Rule::SecretUnknown,
                "a {{secret:NAME}} placeholder works only in the text of fill and type",
            ));
        }
    }
    match text_at.and_then(|i| argv.get(i)) {
        Some(text) => rules.secrets.names_in(text),
        None => Ok(Vec::new()),
    }
}
