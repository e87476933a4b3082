//! The server's stdin and stdout, read and written where the call runs.
//!
//! `tokio::io::stdin()`/`stdout()` hand every read and write to a blocking
//! thread and wait for it to come back: two thread wake-ups per message each
//! way, a visible share of a warm call (docs/benchmarks.md, "The wire and
//! the stdio pipes"). An MCP client
//! starts a stdio server with pipes, and a pipe can be polled: then the
//! runtime reads and writes it directly (`tokio::net::unix::pipe`, which also
//! makes our end non-blocking). Anything else (a terminal, a file, a socket)
//! keeps tokio's blocking stdio, which works with every kind of descriptor.
//!
//! Our descriptors are duplicates of 0 and 1; `O_NONBLOCK` lives on the open
//! file they share, so stdout stays blocking when stderr is the same pipe
//! (`2>&1`): diagnostics written to stderr must not meet `EAGAIN`.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// The server's input, polled when it is a pipe.
pub(crate) fn input() -> Box<dyn AsyncRead + Send + Unpin> {
    let polled = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Receiver::from_owned_fd);
    match polled {
        Ok(receiver) => Box::new(receiver),
        Err(e) => {
            tracing::debug!(error = %e, "stdin is not a pipe; reading it on a blocking thread");
            Box::new(tokio::io::stdin())
        }
    }
}

/// The server's output, polled when it is a pipe that stderr does not share.
pub(crate) fn output() -> Box<dyn AsyncWrite + Send + Unpin> {
    if shares_stderr() {
        tracing::debug!("stdout and stderr are one pipe; writing stdout on a blocking thread");
        return Box::new(tokio::io::stdout());
    }
    let polled = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd);
    match polled {
        Ok(sender) => Box::new(sender),
        Err(e) => {
            tracing::debug!(error = %e, "stdout is not a pipe; writing it on a blocking thread");
            Box::new(tokio::io::stdout())
        }
    }
}

/// Whether stdout and stderr are the same file (by device and inode); when
/// either cannot be examined, they are assumed to be.
fn shares_stderr() -> bool {
    let identity = |fd: std::os::fd::BorrowedFd<'_>| {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let meta = file.metadata().ok()?;
        Some((meta.dev(), meta.ino()))
    };
    match (
        identity(std::io::stdout().as_fd()),
        identity(std::io::stderr().as_fd()),
    ) {
        (Some(out), Some(err)) => out == err,
        _ => true,
    }
}
