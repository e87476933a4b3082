//! What a look at a session's tab found (the gate looks, for the evidence
//! of the session's actions; see `gate/look.rs`).

/// What a look at a tab found, once no navigation was pending.
#[derive(Debug, Clone)]
pub(crate) struct PageLook {
    /// The URL of the tab's current history entry: the committed one.
    pub(crate) url: String,
    pub(crate) title: String,
    /// Where the elements of the role and name the look was asked about
    /// are (x, y, width, height in CSS pixels, rounded), in document order;
    /// empty when it was asked about none, or none is rendered.
    pub(crate) places: Vec<[i64; 4]>,
}

/// An element as a snapshot names it: its role and accessible name.
pub(crate) type Named<'a> = (&'a str, &'a str);

/// A screenshot of the viewport, and the DOM read just before and after
/// it: what it may show.
#[derive(Debug, Clone)]
pub(crate) struct Shot {
    pub(crate) png: Vec<u8>,
    /// The viewport's width in CSS pixels (the PNG's in its own pixels
    /// says how they scale).
    pub(crate) css_width: f64,
    pub(crate) reads: [DomRead; 2],
}

/// What the DOM held that a screenshot may show.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DomRead {
    /// Form fields with a value (`input`, `textarea`).
    pub(crate) fields: Vec<Field>,
    /// The rendered text of every document in the snapshot.
    pub(crate) texts: Vec<String>,
    /// Frames whose document the snapshot does not hold (out of process,
    /// or not loaded): what they show is not known.
    pub(crate) unseen_frames: usize,
}

/// A field's value and where it is in the viewport (CSS pixels: x, y,
/// width, height), when it is in the main document and laid out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub(crate) value: String,
    pub(crate) rect: Option<[f64; 4]>,
}

/// Why a look at a session's tab found nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LookError {
    /// The pin file names no tab, or one the gate does not vouch for.
    #[error("the session has no tab the gate vouches for")]
    NoTab,
    /// No gate serves (a one-off check).
    #[error("no gate serves")]
    NoGate,
    /// The look after the session's previous call had not ended.
    #[error("the look after the session's previous call was still running")]
    Busy,
    /// Chromium did not answer as a look needs (the gate's words).
    #[error("{0}")]
    Browser(String),
}
