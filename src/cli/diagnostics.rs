//! Diagnostics (not the audit trail, which has its own durable writer).

/// Diagnostics go to stderr (stdout is JSON-RPC), filtered by `RUST_LOG`, and
/// optionally to a daily rolling file. rmcp logs whole requests — tool
/// arguments, so typed passwords — at debug and below; those never get
/// through, whatever `RUST_LOG` says. Every line that does passes the
/// records' scrubber ([`Scrubbed`]). (The audit trail is not diagnostics: it
/// has its own durable writer.)
pub(super) fn init(dir: Option<&std::path::Path>) {
    use tracing_subscriber::{EnvFilter, util::SubscriberInitExt};
    let env = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new("info,opentelemetry=warn"))
    };
    subscriber(env, dir).init();
}

/// The layers [`init`] installs, each filtered by a fresh `env()`.
fn subscriber(
    env: impl Fn() -> tracing_subscriber::EnvFilter,
    dir: Option<&std::path::Path>,
) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::{Layer, filter::filter_fn, layer::SubscriberExt};
    let no_request_bodies = || {
        filter_fn(|meta| {
            !(meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO)
        })
    };
    // `RUST_LOG`'s filter goes outermost: a layer's level hint is its outer
    // filter's, and that hint becomes the `log` crate's maximum. Under a
    // hint-less filter, every `log::trace!` of the WebSocket library (a few
    // per CDP message the gate relays) was built and offered to the
    // filters, only to be dropped.
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(Scrubbed(std::io::stderr))
        .with_ansi(false)
        .with_filter(no_request_bodies())
        .with_filter(env());
    // A plain (blocking) appender: tracing-appender's non_blocking writer can
    // drop lines, and print to stdout when its worker misses the shutdown.
    let file = dir.map(|dir| {
        tracing_subscriber::fmt::layer()
            .with_writer(Scrubbed(std::sync::Mutex::new(
                tracing_appender::rolling::daily(dir, "browser-shell.log"),
            )))
            .with_ansi(false)
            .with_filter(no_request_bodies())
            .with_filter(env())
    });
    tracing_subscriber::registry().with(stderr).with(file)
}

/// A writer whose every line passes the records' scrubber
/// ([`crate::obs::shield::scrub_diagnostic`]) before it reaches `W`: the
/// formatter writes one event per writer it makes, so a line is scrubbed
/// whole, never split where a secret could straddle two writes.
struct Scrubbed<W>(W);

impl<'a, W: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Scrubbed<W>
{
    type Writer = Line<W::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            text: Vec::new(),
            out: self.0.make_writer(),
            scrub: crate::obs::shield::scrub_diagnostic,
        }
    }
}

/// One event's text, written scrubbed when the formatter lets it go.
struct Line<W: std::io::Write> {
    text: Vec<u8>,
    out: W,
    scrub: fn(&str) -> std::borrow::Cow<'_, str>,
}

impl<W: std::io::Write> std::io::Write for Line<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: std::io::Write> Drop for Line<W> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.text);
        let scrubbed = (self.scrub)(&text);
        // A diagnostic that cannot be written has nowhere else to go.
        let _ = self.out.write_all(scrubbed.as_bytes());
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn no_hunter(text: &str) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Owned(text.replace("hunter22", "{{secret:pw}}"))
    }

    #[test]
    fn the_most_verbose_level_let_through_is_the_one_rust_log_names() {
        use tracing_subscriber::EnvFilter;
        let dir = tempfile::tempdir().expect("a temp dir");
        for (spec, most) in [
            (
                "info,opentelemetry=warn",
                tracing::level_filters::LevelFilter::INFO,
            ),
            ("warn", tracing::level_filters::LevelFilter::WARN),
            (
                "info,browser_shell::gate=trace",
                tracing::level_filters::LevelFilter::TRACE,
            ),
        ] {
            for dir in [None, Some(dir.path())] {
                let subscriber = subscriber(|| EnvFilter::new(spec), dir);
                assert_eq!(
                    tracing::Subscriber::max_level_hint(&subscriber),
                    Some(most),
                    "{spec}, file: {}",
                    dir.is_some()
                );
            }
        }
    }

    #[test]
    fn a_line_is_scrubbed_whole_even_when_written_in_pieces() {
        let mut out = Vec::new();
        {
            let mut line = Line {
                text: Vec::new(),
                out: &mut out,
                scrub: no_hunter,
            };
            for piece in ["INFO refused http://x/?pw=hun", "ter", "22 now\n"] {
                line.write_all(piece.as_bytes()).expect("buffered");
            }
        }
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "INFO refused http://x/?pw={{secret:pw}} now\n"
        );
    }
}
