//! Every allow-listed subcommand as one row of facts, which each stage asks
//! instead of matching on names: its aliases and usage (the grammar, `--help`
//! and the tool's description), which arguments are text typed into the page
//! (never stored in clear) and which may hold `{{secret:NAME}}` placeholders,
//! which argument is a URL (redacted in records), how the navigation guard
//! learns where it left the page, whether it runs with its tab in the
//! background, what of its data is page text, whether it ends the session,
//! and what evidence its call leaves.
//! Adding a subcommand is one row here and one grammar arm (`super::grammar`);
//! a test holds the rows against README's and SKILL.md's tables.

/// How the navigation guard learns the page URL after the subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuardBy {
    /// Not at all: the subcommand ends the session.
    Nothing,
    /// Its own result carries the URL in this field (no second read).
    OwnField(&'static str),
    /// A `get url` joins the batch after it (`get url` itself is its own read).
    Trailing,
}

/// Which strings of the subcommand's data the page controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageText {
    /// None but a page `title`, wherever it appears (marked for every subcommand).
    TitleOnly,
    /// The `snapshot` text (and the names in `refs`, which are left out).
    Snapshot,
    /// Every string value of `get text|value|attr|title` but its metadata.
    GetValues,
}

/// Where a subcommand's URL argument is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UrlArg {
    None,
    /// `argv[i]` (`open <url>`).
    At(usize),
    /// The argument after this flag (`wait --url <pattern>`).
    AfterFlag(&'static str),
}

pub(crate) use crate::evidence::Witness;

/// What every stage needs to know about one subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) name: &'static str,
    pub(crate) aliases: &'static [&'static str],
    /// One line for `--help`, errors and the tool's description.
    pub(crate) usage: &'static str,
    /// `argv[i..]` is text typed or chosen into the page.
    pub(crate) typed_from: Option<usize>,
    /// `argv[i]` may hold `{{secret:NAME}}` placeholders (typed as values).
    pub(crate) secrets_at: Option<usize>,
    pub(crate) url: UrlArg,
    pub(crate) guard: GuardBy,
    /// Runs with its tab in the background: it reads or navigates and needs
    /// no rendering (docs/design.md, "Pinned tabs").
    pub(crate) background_ok: bool,
    pub(crate) page_text: PageText,
    pub(crate) ends_session: bool,
    /// Its tab comes forward as it runs: each session's tab has a window of
    /// its own (its browser context's), and a person watching should see
    /// the page the agent went to (docs/design.md, "Browser contexts").
    pub(crate) comes_forward: bool,
    /// Whether it can change the page, and so leaves evidence.
    pub(crate) witness: Witness,
    /// It only reads the page (not even focus or scroll moves): it need not
    /// wait for the look after the session's previous call, only for a
    /// navigation that call started to commit (docs/design.md, "Reads
    /// after an action").
    pub(crate) reads_only: bool,
}

macro_rules! subcommands {
    ($( $variant:ident => $facts:expr, )*) => {
        /// An allow-listed subcommand.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Subcommand {
            $( $variant, )*
        }

        impl Subcommand {
            /// Every subcommand, in the order `--help` and errors list them.
            pub(crate) const ALL: &[Subcommand] = &[$(Subcommand::$variant,)*];

            /// This subcommand's row.
            pub(crate) const fn facts(self) -> &'static Facts {
                match self {
                    $(Subcommand::$variant => {
                        const FACTS: Facts = $facts;
                        &FACTS
                    })*
                }
            }
        }
    };
}

/// A row with the defaults of a command that acts on the page's elements.
const fn acts(name: &'static str, usage: &'static str) -> Facts {
    Facts {
        name,
        aliases: &[],
        usage,
        typed_from: None,
        secrets_at: None,
        url: UrlArg::None,
        guard: GuardBy::Trailing,
        background_ok: false,
        page_text: PageText::TitleOnly,
        ends_session: false,
        comes_forward: false,
        witness: Witness::Element,
        reads_only: false,
    }
}

/// A row of `fill` and `type`: their text goes into the page and may hold
/// secrets' placeholders.
const fn types(name: &'static str, usage: &'static str) -> Facts {
    Facts {
        typed_from: Some(2),
        secrets_at: Some(2),
        ..acts(name, usage)
    }
}

/// A row whose command moves or shows but changes nothing a reviewer
/// needs to see (hover, focus, scroll, a screenshot the agent is given).
const fn quiet(facts: Facts) -> Facts {
    Facts {
        witness: Witness::Nothing,
        ..facts
    }
}

/// A row whose command changes the whole page, naming no element.
const fn on_page(facts: Facts) -> Facts {
    Facts {
        witness: Witness::Page,
        ..facts
    }
}

subcommands! {
    Open => Facts {
        aliases: &["goto", "navigate"],
        url: UrlArg::At(1),
        guard: GuardBy::OwnField("url"),
        background_ok: true,
        comes_forward: true,
        witness: Witness::Page,
        ..acts("open", "open <url>   (http/https, or about:blank; a URL without a scheme gets https://)")
    },
    Snapshot => Facts {
        guard: GuardBy::OwnField("origin"),
        background_ok: true,
        page_text: PageText::Snapshot,
        witness: Witness::Nothing,
        reads_only: true,
        ..acts("snapshot", "snapshot [-i] [-c] [-d <depth>] [-s <selector>]")
    },
    Click => acts("click", "click <selector|@ref>"),
    Dblclick => acts("dblclick", "dblclick <selector|@ref>"),
    Fill => types("fill", "fill <selector|@ref> <text>"),
    Type => types("type", "type <selector|@ref> <text>"),
    Press => Facts {
        aliases: &["key"],
        witness: Witness::Page,
        ..acts("press", "press <key>   (Enter, Tab, Control+a, …)")
    },
    Hover => quiet(acts("hover", "hover <selector|@ref>")),
    Focus => quiet(acts("focus", "focus <selector|@ref>")),
    Check => acts("check", "check <selector|@ref>"),
    Uncheck => acts("uncheck", "uncheck <selector|@ref>"),
    Select => Facts {
        typed_from: Some(2),
        ..acts("select", "select <selector|@ref> <value> [<value>…]")
    },
    Wait => Facts {
        url: UrlArg::AfterFlag("--url"),
        // Where a navigation the page started after a click or a key ended.
        witness: Witness::Page,
        ..acts(
            "wait",
            "wait <ms> | wait <selector> | wait --text <text> | wait --url <pattern> | wait --load load|domcontentloaded|networkidle",
        )
    },
    Screenshot => quiet(acts(
        "screenshot",
        "screenshot [--full] [<selector>] [<file.png>]   (saved under the output dir)",
    )),
    Get => Facts {
        background_ok: true,
        page_text: PageText::GetValues,
        witness: Witness::Nothing,
        reads_only: true,
        ..acts("get", "get title|url | get text|value|count <selector> | get attr <selector> <name>")
    },
    Scroll => quiet(acts("scroll", "scroll [up|down|left|right] [<pixels>]")),
    Back => on_page(acts("back", "back")),
    Forward => on_page(acts("forward", "forward")),
    Reload => on_page(acts("reload", "reload")),
    Close => Facts {
        guard: GuardBy::Nothing,
        background_ok: true,
        ends_session: true,
        witness: Witness::Nothing,
        ..acts("close", "close   (closes this session's daemon; never other sessions)")
    },
}

impl Subcommand {
    /// The subcommand `name` is, or an alias of.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| {
            let facts = s.facts();
            facts.name == name || facts.aliases.contains(&name)
        })
    }

    /// The subcommand of an argv (`argv[0]`).
    pub(crate) fn of(argv: &[String]) -> Option<Self> {
        argv.first().and_then(|name| Self::named(name))
    }

    /// The facts of an argv's subcommand, when it is one.
    pub(crate) fn facts_of(argv: &[String]) -> Option<&'static Facts> {
        Self::of(argv).map(Self::facts)
    }
}

#[cfg(test)]
#[path = "subcommand_tests.rs"]
mod tests;
