//! The open connections, for `stats conns`: each connection's addresses, whether it is
//! processing a request, and when it last did. A leaf: the server registers connections, the
//! protocol lists them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What is known of one connection (or the listening socket).
struct Conn {
    peer: Option<SocketAddr>,
    local: SocketAddr,
    state: Arc<ConnState>,
}

/// The part of a connection's entry its own task updates, without the table's lock.
#[derive(Debug)]
pub struct ConnState {
    busy: AtomicBool,
    last_cmd: AtomicU32,
}

impl ConnState {
    /// The connection has a request to process (`busy`) or waits for one, as of `now`.
    pub fn set(&self, busy: bool, now: u32) {
        self.busy.store(busy, Relaxed);
        if busy {
            self.last_cmd.store(now, Relaxed);
        }
    }
}

/// The table of open connections, by descriptor number.
#[derive(Default)]
pub struct Conns {
    table: Mutex<BTreeMap<i64, Conn>>,
}

/// Removes its connection from the table when dropped.
pub struct Registered {
    conns: Arc<Conns>,
    fd: i64,
    pub state: Arc<ConnState>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut t = self.conns.table.lock().unwrap_or_else(|p| p.into_inner());
        t.remove(&self.fd);
    }
}

impl Conns {
    /// Adds a connection (`peer` is `None` for the listening socket) until the guard drops.
    pub fn register(
        self: &Arc<Self>,
        fd: i64,
        peer: Option<SocketAddr>,
        local: SocketAddr,
        now: u32,
    ) -> Registered {
        let state = Arc::new(ConnState {
            busy: AtomicBool::new(false),
            last_cmd: AtomicU32::new(now),
        });
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.insert(
            fd,
            Conn {
                peer,
                local,
                state: state.clone(),
            },
        );
        Registered {
            conns: self.clone(),
            fd,
            state,
        }
    }

    /// `stats conns` as memcached writes it: per descriptor `addr`, `listen_addr` (not for the
    /// listening socket), `state` and `secs_since_last_cmd`.
    pub fn stats(&self, now: u32) -> Vec<(String, String)> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines = Vec::with_capacity(t.len() * 4);
        for (fd, c) in t.iter() {
            let (addr, state) = match c.peer {
                None => (tcp(&c.local), "conn_listening"),
                Some(peer) => (
                    tcp(&peer),
                    if c.state.busy.load(Relaxed) {
                        "conn_parse_cmd"
                    } else {
                        "conn_waiting"
                    },
                ),
            };
            lines.push((format!("{fd}:addr"), addr));
            if c.peer.is_some() {
                lines.push((format!("{fd}:listen_addr"), tcp(&c.local)));
            }
            lines.push((format!("{fd}:state"), state.to_string()));
            let last = c.state.last_cmd.load(Relaxed);
            lines.push((
                format!("{fd}:secs_since_last_cmd"),
                now.saturating_sub(last).to_string(),
            ));
        }
        lines
    }
}

/// memcached's address spelling: `tcp:1.2.3.4:port`, `tcp6:[::1]:port`.
fn tcp(a: &SocketAddr) -> String {
    match a {
        SocketAddr::V4(_) => format!("tcp:{a}"),
        SocketAddr::V6(_) => format!("tcp6:{a}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_connections_until_they_close() {
        let conns = Arc::new(Conns::default());
        let local: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let _l = conns.register(3, None, local, 100);
        let c = conns.register(7, Some("127.0.0.1:5000".parse().unwrap()), local, 100);
        c.state.set(true, 104);
        let s = conns.stats(110);
        let get = |k: &str| s.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("3:addr"), Some("tcp:127.0.0.1:11211"));
        assert_eq!(get("3:state"), Some("conn_listening"));
        assert_eq!(get("3:listen_addr"), None);
        assert_eq!(get("7:addr"), Some("tcp:127.0.0.1:5000"));
        assert_eq!(get("7:listen_addr"), Some("tcp:127.0.0.1:11211"));
        assert_eq!(get("7:state"), Some("conn_parse_cmd"));
        assert_eq!(get("7:secs_since_last_cmd"), Some("6"));
        drop(c);
        assert_eq!(conns.stats(110).len(), 3);
    }
}
