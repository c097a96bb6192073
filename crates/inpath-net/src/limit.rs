//! Failed authentication attempts, counted and slowed per source address.
//!
//! Each address has a score: every failure adds one, and the score drains at
//! `free_per_second`. While it is at or above `free_per_second` (more than a few failures in
//! about the last second), each new attempt from that address waits for a slot before its
//! credential is even looked at, and slots are `delay` apart. So an address that guesses gets
//! one guess per `delay` whatever the number of connections it opens in parallel, and a
//! correct guess is no faster to learn than a wrong one. Other addresses are not slowed.
//! A legitimate client that mistypes a few times is never slowed.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses remembered at most; past that, the idle ones are forgotten (and, if all are
/// busy, all of them: slowing then starts again from nothing).
const MAX_ADDRESSES: usize = 65_536;

/// How failures are slowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slowing {
    /// Failures per second from one address taken without delay.
    pub free_per_second: u32,
    /// The time between the attempts of an address over that rate.
    pub delay: Duration,
}

impl Default for Slowing {
    /// 5 failures a second free, then one attempt a second.
    fn default() -> Slowing {
        Slowing {
            free_per_second: 5,
            delay: Duration::from_secs(1),
        }
    }
}

struct Entry {
    score: f64,
    at: Instant,
    next_slot: Instant,
}

/// The counts and slots of failed attempts.
pub struct Limiter {
    slowing: Slowing,
    addresses: Mutex<HashMap<IpAddr, Entry>>,
    failures: AtomicU64,
    slowed: AtomicU64,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("slowing", &self.slowing)
            .field("failures", &self.failures())
            .field("slowed", &self.slowed())
            .finish()
    }
}

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter::new(Slowing::default())
    }
}

impl Limiter {
    /// A limiter with these settings.
    pub fn new(slowing: Slowing) -> Limiter {
        Limiter {
            slowing: Slowing {
                free_per_second: slowing.free_per_second.max(1),
                delay: slowing.delay,
            },
            addresses: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
            slowed: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn slowing(&self) -> Slowing {
        self.slowing
    }

    fn drained(&self, e: &mut Entry, now: Instant) {
        let secs = now.saturating_duration_since(e.at).as_secs_f64();
        e.score = (e.score - secs * f64::from(self.slowing.free_per_second)).max(0.0);
        e.at = now;
    }

    /// Whether an attempt from `ip` is slowed, and how long it must wait before its
    /// credential is checked: `None` for an address that has not failed often just now;
    /// else the wait for the address's next slot, which it takes (zero when the slot is
    /// free already: attempts slower than the delay do not wait).
    pub fn admit(&self, ip: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let mut map = self.addresses.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.get_mut(&ip)?;
        self.drained(e, now);
        // `free_per_second` failures (about a second's worth) are free; the next waits.
        if e.score <= f64::from(self.slowing.free_per_second) - 1.0 {
            return None;
        }
        let slot = e.next_slot.max(now);
        e.next_slot = slot + self.slowing.delay;
        self.slowed.fetch_add(1, Ordering::Relaxed);
        Some(slot - now)
    }

    /// Counts a failed attempt from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut map = self.addresses.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ADDRESSES && !map.contains_key(&ip) {
            let free = f64::from(self.slowing.free_per_second);
            map.retain(|_, e| {
                let secs = now.saturating_duration_since(e.at).as_secs_f64();
                e.score - secs * free > 0.0 || e.next_slot > now
            });
            if map.len() >= MAX_ADDRESSES {
                map.clear();
            }
        }
        let e = map.entry(ip).or_insert(Entry {
            score: 0.0,
            at: now,
            next_slot: now,
        });
        self.drained(e, now);
        e.score += 1.0;
    }

    /// Failed attempts so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Attempts made to wait so far.
    pub fn slowed(&self) -> u64 {
        self.slowed.load(Ordering::Relaxed)
    }
}
