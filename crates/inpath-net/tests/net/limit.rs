//! Slowing: a few failures a second from one address are free, then its attempts are spaced
//! by the delay, in parallel or not; other addresses are not slowed.

use inpath_net::{Limiter, Slowing};
use std::net::IpAddr;
use std::time::Duration;

#[test]
fn an_address_over_its_free_failures_waits_for_spaced_slots() {
    let l = Limiter::new(Slowing {
        free_per_second: 5,
        delay: Duration::from_millis(100),
    });
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    for _ in 0..5 {
        assert_eq!(l.admit(a), None);
        l.failed(a);
    }
    // The sixth attempt, and those made in parallel with it, each take the next slot.
    let waits: Vec<Duration> = (0..4).map(|_| l.admit(a).unwrap()).collect();
    assert!(waits[0] < Duration::from_millis(5), "{waits:?}");
    for pair in waits.windows(2) {
        let gap = pair[1].saturating_sub(pair[0]);
        assert!(gap >= Duration::from_millis(95), "{waits:?}");
    }
    assert_eq!(l.slowed(), 4);
    assert_eq!(l.failures(), 5);
    // Another address is not slowed.
    assert_eq!(l.admit(b), None);
    // The score drains: after a second without failures the address is free again.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(l.admit(a), None);
}
