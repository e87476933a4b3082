//! The names Chromium gives what the gate tracks: a browser context, a
//! target (a tab, frame or worker) and a CDP session (one client's
//! attachment to a target). Each its own type, so that none is passed
//! where another, or a daemon's name, is meant; all are Chromium's words,
//! taken as given (the gate never makes one up).

use serde::{Deserialize, Serialize};

macro_rules! chromium_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub(crate) struct $name(String);

        impl $name {
            /// The id as Chromium wrote it (in an answer or an event).
            pub(crate) fn from_chromium(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

chromium_id! {
    /// A browser context's id, as Chromium named it when the gate made it
    /// (or when a previous server did): not a daemon's name.
    ContextId
}

chromium_id! {
    /// A target's id: a tab, an out-of-process frame or a worker. A tab's
    /// main frame has the same id.
    TargetId
}

chromium_id! {
    /// A CDP session's id: one connection's attachment to one target
    /// (agent-browser's, or the warden's own).
    CdpSessionId
}
