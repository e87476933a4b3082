//! Where a person is asked for a yes, and answers: the channels of the
//! policy's approval rules. The call pipeline's stage (`call::approve`)
//! decides which calls need a yes and records every step; a channel only
//! carries the question and brings back the answer, with whatever identity
//! it can vouch for. Nothing here is reachable through MCP or from the
//! driven browser: an approval is never something the agent or the page
//! can produce.
//!
//! The one channel so far is the operator's desk ([`desk`]): request files
//! beside the audit log, answered with `browser-shell approvals`.

pub(crate) mod desk;
