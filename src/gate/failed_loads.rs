//! The loads each session's pages said failed (CDP `Log.entryAdded` from the
//! `network` source, which a page reports for every resource it could not
//! load): the word that makes a refused connection the page's.
//!
//! The egress proxy sees a connection, not who opened it: a page's fetch and
//! a request Chromium makes for itself through the same context look alike
//! there. So each refusal waits briefly for the page's word, and is the
//! page's only when a page of that session reported a load to that host and
//! port after it; otherwise its requester is unknown, never the page by
//! default.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::{browser_refusals::Destination, sync::lock};

/// How long a refusal waits for a page to report the failed load: it does
/// so as soon as the proxy's 403 reaches it, within milliseconds.
pub(crate) const PAGE_WORD_WITHIN: Duration = Duration::from_millis(500);

/// Reports kept, at most: older ones are dropped first (a page that fails
/// loads faster than they are claimed only loses its oldest words).
const KEPT: usize = 1024;

/// A report older than this is forgotten.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(10);

/// One page's report of a failed load.
#[derive(Debug)]
struct Failed {
    daemon: String,
    destination: Destination,
    at: Instant,
}

/// The recent reports of every session.
#[derive(Debug, Default)]
pub(crate) struct FailedLoads {
    recent: Mutex<VecDeque<Failed>>,
}

impl FailedLoads {
    /// `daemon`'s page says its load of `url` failed.
    pub(super) fn note(&self, daemon: &str, url: &str) {
        let Some(destination) = url::Url::parse(url)
            .ok()
            .and_then(|u| Destination::of_url(&u))
        else {
            return;
        };
        let now = Instant::now();
        let mut recent = lock(&self.recent);
        while recent
            .front()
            .is_some_and(|f| recent.len() >= KEPT || now.duration_since(f.at) > FORGOTTEN_AFTER)
        {
            recent.pop_front();
        }
        recent.push_back(Failed {
            daemon: daemon.to_owned(),
            destination,
            at: now,
        });
    }

    /// Did a page of `daemon` report a failed load of `destination` at or
    /// after `refused_at`? A report confirms one refusal only.
    pub(crate) fn claim(
        &self,
        daemon: &str,
        destination: &Destination,
        refused_at: Instant,
    ) -> bool {
        let mut recent = lock(&self.recent);
        let found = recent.iter().position(|f| {
            f.daemon == daemon && f.destination == *destination && f.at >= refused_at
        });
        found.and_then(|i| recent.remove(i)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(host: &str, port: u16) -> Destination {
        Destination {
            hostname: host.into(),
            port,
        }
    }

    #[test]
    fn a_page_report_confirms_one_refusal_of_its_own_session_and_destination() {
        let loads = FailedLoads::default();
        let refused = Instant::now();
        loads.note("d1", "http://127.0.0.2:8080/img.png");
        loads.note("d1", "https://127.0.0.3/s");
        assert!(
            !loads.claim("d2", &to("127.0.0.2", 8080), refused),
            "another session's page"
        );
        assert!(
            !loads.claim("d1", &to("127.0.0.2", 80), refused),
            "another port"
        );
        assert!(
            loads.claim("d1", &to("127.0.0.3", 443), refused),
            "the scheme's default port"
        );
        assert!(loads.claim("d1", &to("127.0.0.2", 8080), refused));
        assert!(
            !loads.claim("d1", &to("127.0.0.2", 8080), refused),
            "claimed once"
        );
    }

    #[test]
    fn a_report_made_before_the_refusal_does_not_confirm_it() {
        let loads = FailedLoads::default();
        loads.note("d1", "http://127.0.0.2:8080/");
        std::thread::sleep(Duration::from_millis(2));
        assert!(!loads.claim("d1", &to("127.0.0.2", 8080), Instant::now()));
    }

    #[test]
    fn the_kept_reports_are_bounded() {
        let loads = FailedLoads::default();
        let start = Instant::now();
        for i in 0..KEPT + 10 {
            loads.note("d1", &format!("http://127.0.0.2:{}/", 1000 + i));
        }
        assert_eq!(lock(&loads.recent).len(), KEPT);
        assert!(
            !loads.claim("d1", &to("127.0.0.2", 1000), start),
            "the oldest was dropped"
        );
        assert!(loads.claim("d1", &to("127.0.0.2", 1000 + KEPT as u16 + 9), start));
    }
}
