//! Output capture: each stream of a child is read to its end, the first
//! [`CAPTURE_LIMIT`] bytes kept for normalisation and the rest only counted,
//! so a child that prints gigabytes costs memory it cannot choose.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of each stream kept for normalisation; the rest is counted only.
pub(crate) const CAPTURE_LIMIT: usize = 8 * 1024 * 1024;

/// How long to wait for pipes to close after the child was killed.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub(super) struct Captured {
    pub(super) kept: Vec<u8>,
    pub(super) total: u64,
}

pub(super) async fn capture<R: AsyncRead + Unpin>(stream: Option<R>) -> Captured {
    let mut captured = Captured::default();
    let Some(mut stream) = stream else {
        return captured;
    };
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                captured.total += n as u64;
                let room = CAPTURE_LIMIT.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    captured
}

pub(super) async fn join_capture(task: tokio::task::JoinHandle<Captured>) -> Captured {
    match tokio::time::timeout(DRAIN_GRACE, task).await {
        Ok(Ok(captured)) => captured,
        // A pipe still held open by a straggler, or a panicked reader: report
        // what we have rather than hang the call.
        _ => Captured::default(),
    }
}
