//! Diagnostics (not the audit trail, which has its own durable writer).

/// Diagnostics go to stderr (stdout is JSON-RPC), filtered by `RUST_LOG`, and
/// optionally to a daily rolling file. rmcp logs whole requests — tool
/// arguments, so typed passwords — at debug and below; those never get
/// through, whatever `RUST_LOG` says. (The audit trail is not diagnostics: it
/// has its own durable writer.)
pub(super) fn init(dir: Option<&std::path::Path>) {
    use tracing_subscriber::{
        EnvFilter, Layer, filter::filter_fn, layer::SubscriberExt, util::SubscriberInitExt,
    };
    let env = || {
        EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| EnvFilter::new("info,opentelemetry=warn"))
    };
    let no_request_bodies = || {
        filter_fn(|meta| {
            !(meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO)
        })
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(env())
        .with_filter(no_request_bodies());
    // A plain (blocking) appender: tracing-appender's non_blocking writer can
    // drop lines, and print to stdout when its worker misses the shutdown.
    let file = dir.map(|dir| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::sync::Mutex::new(tracing_appender::rolling::daily(
                dir,
                "browser-shell.log",
            )))
            .with_ansi(false)
            .with_filter(env())
            .with_filter(no_request_bodies())
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .init();
}
