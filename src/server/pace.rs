//! A bound on how fast a client can make browser-shell refuse: a token
//! bucket that refusals spend and the wire waits on.
//!
//! Every refusal is an audit record, so a client that floods refusals
//! floods the log, and rotation would carry older evidence away. Dropping
//! or merging records would lose calls; instead, once the client has spent
//! its burst, the wire reads its next message only when the bucket has
//! refilled. The client is slowed, no record is lost, and nothing queues
//! up in memory (the pipe holds what it has not read).

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

/// Refusals a client may make at once.
pub(crate) const BURST: f64 = 200.0;
/// Refusals per second it may keep up after the burst.
pub(crate) const PER_SECOND: f64 = 50.0;

#[derive(Debug)]
pub(crate) struct RefusalPace {
    bucket: Mutex<Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// May go below zero: a refusal is never held back, only the next read.
    tokens: f64,
    at: Instant,
}

impl Default for RefusalPace {
    fn default() -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                tokens: BURST,
                at: Instant::now(),
            }),
        }
    }
}

impl RefusalPace {
    /// One refusal was made.
    pub(crate) fn spend(&self) {
        self.spend_at(Instant::now());
    }

    /// How long the wire must wait before it reads the next message.
    pub(crate) fn delay(&self) -> Duration {
        self.delay_at(Instant::now())
    }

    fn spend_at(&self, now: Instant) {
        let mut bucket = self.refilled(now);
        bucket.tokens -= 1.0;
        self.store(bucket);
    }

    fn delay_at(&self, now: Instant) -> Duration {
        let bucket = self.refilled(now);
        self.store(bucket);
        if bucket.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - bucket.tokens) / PER_SECOND)
        }
    }

    fn refilled(&self, now: Instant) -> Bucket {
        let bucket = *self.lock();
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        Bucket {
            tokens: (bucket.tokens + elapsed * PER_SECOND).min(BURST),
            at: now.max(bucket.at),
        }
    }

    fn store(&self, bucket: Bucket) {
        *self.lock() = bucket;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bucket> {
        crate::sync::lock(&self.bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_is_free_and_then_each_refusal_costs_a_fiftieth_of_a_second() {
        let pace = RefusalPace::default();
        let start = Instant::now();
        for _ in 0..200 {
            assert_eq!(pace.delay_at(start), Duration::ZERO);
            pace.spend_at(start);
        }
        assert_eq!(pace.delay_at(start), Duration::from_millis(20));
        // A second later, 50 more are free again.
        let later = start + Duration::from_secs(1);
        for _ in 0..50 {
            assert_eq!(pace.delay_at(later), Duration::ZERO);
            pace.spend_at(later);
        }
        assert!(pace.delay_at(later) > Duration::ZERO);
    }

    #[test]
    fn an_idle_client_gets_back_its_burst_and_no_more() {
        let pace = RefusalPace::default();
        let start = Instant::now();
        for _ in 0..250 {
            pace.spend_at(start);
        }
        let much_later = start + Duration::from_secs(3600);
        assert_eq!(pace.delay_at(much_later), Duration::ZERO);
        for _ in 0..200 {
            pace.spend_at(much_later);
        }
        assert!(pace.delay_at(much_later) > Duration::ZERO);
    }
}
