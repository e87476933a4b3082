//! What a call may reach: the URL policy for `open` and the navigation
//! guard ([`url_policy`]), held as reloadable [`rules`] with the operator's [`secrets`], the special address ranges it refuses ([`address`]), the
//! resolver it checks names with ([`resolve`]), and where screenshots may be
//! written and how much of them is kept ([`outputs`]). Decisions only: no
//! process is started here.

pub(crate) mod address;
pub(crate) mod approvals;
pub(crate) mod outputs;
pub(crate) mod resolve;
pub(crate) mod rules;
pub(crate) mod secrets;
pub(crate) mod spellings;
pub(crate) mod url_policy;
