//! The run's bounds on registry traffic, held by the client that obeys them: time limits,
//! the retry policy and the number of requests in flight. The binary builds them from its
//! flags and environment; nothing here reads either.

use std::time::Duration;

/// Everything a [`crate::registry::Registry`] is configured with.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub limits: Limits,
    pub retry: Retry,
    /// Requests in flight at once, across every task of the run (at least two: a
    /// cross-registry copy reads and writes together).
    pub max_requests: usize,
    /// How layers are read: one stream, or ranges read in parallel.
    pub ranges: Ranges,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            limits: Limits::default(),
            retry: Retry::default(),
            max_requests: 16,
            ranges: Ranges::default(),
        }
    }
}

impl Settings {
    /// The same settings with at most `max_requests` requests in flight.
    pub fn with_max_requests(mut self, max_requests: usize) -> Self {
        self.max_requests = max_requests;
        self
    }
}

/// Parallel range reads of a layer: one connection to a CDN rarely fills a link, several
/// do. Ranges take their request slots among [`Settings::max_requests`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    /// Ranges of the run read or held at once (all layers together); below 2, each layer is
    /// one plain stream.
    pub parallel: usize,
    /// Bytes per range; a blob no larger than one range is one plain stream.
    pub size: u64,
}

impl Ranges {
    /// 8 ranges of 2 MiB: 8 connections fill a link where one connection gets a fraction of
    /// it (the benchmark's throttled link: 5-7x one stream), and the 16 MiB window keeps
    /// the tool well under its 100 MiB (measured on localhost, where ranges wait for the
    /// inflate: 8 x 4 MiB reached 90 MiB of RSS, as the allocator holds freed pieces per
    /// thread; 8 x 2 MiB stays near 70). SOCI's parallel pull advises 10-20 ranges of 8-16 MB
    /// for hosts with memory to spare.
    pub const DEFAULT_PARALLEL: usize = 8;
    pub const DEFAULT_SIZE: u64 = 2 * 1024 * 1024;
    /// The smallest range accepted: below it, requests cost more than the bytes they move.
    pub const MIN_SIZE: u64 = 4 * 1024;

    /// Whether a blob of `size` bytes is read in ranges.
    pub fn applies_to(&self, size: u64) -> bool {
        self.parallel >= 2 && size > self.size
    }
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges {
            parallel: Self::DEFAULT_PARALLEL,
            size: Self::DEFAULT_SIZE,
        }
    }
}

/// Time bounds for registry traffic (README "Bounds").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// No byte for this long ends a request.
    pub idle: Duration,
    /// The fixed part of every request's deadline.
    pub base: Duration,
    /// Slowest accepted rate, bytes per second: a request's deadline grows by its size at it.
    pub min_rate: u64,
    /// How long a `docker-credential-*` helper may run before it is killed.
    pub helper: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle: Duration::from_secs(60),
            base: Duration::from_secs(60),
            min_rate: 256 * 1024,
            helper: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// The deadline of a request that moves `bytes`: the base plus their time at the min rate.
    pub fn deadline(&self, bytes: u64) -> Duration {
        self.base + Duration::from_secs_f64(bytes as f64 / self.min_rate.max(1) as f64)
    }
}

/// Retry policy for transient failures: exponential backoff with jitter, bounded in count and
/// in total time.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Tries in all, the first included (1 turns retries off).
    pub attempts: u32,
    pub base: Duration,
    pub cap: Duration,
    pub budget: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::with_retries(5)
    }
}

impl Retry {
    /// The default policy with `retries` retries after the first try (0 turns them off).
    pub fn with_retries(retries: u32) -> Self {
        Retry {
            attempts: retries.saturating_add(1),
            base: Duration::from_millis(200),
            cap: Duration::from_secs(10),
            budget: Duration::from_secs(120),
        }
    }

    /// The wait before attempt `n` (1-based retry count), with ±50% jitter.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << n.min(16)).min(self.cap);
        // Jitter from the clock's sub-second part, so runs and processes spread their retries.
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let nanos = clock ^ std::process::id().rotate_left(n);
        let jitter = 0.5 + f64::from(nanos % 1000) / 1000.0;
        exp.mul_f64(jitter)
    }
}
