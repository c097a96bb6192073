//! The `stats` groups both protocols list as name/value pairs (the text protocol as `STAT`
//! lines, the binary one as one response each). A leaf of `proto`: `text` and `binary` import
//! it, it imports only the store.

use crate::store::Store;

/// The statistics of `stats` (`None`) or `stats <group>` for the groups that are lists:
/// `settings`, `items`, `slabs`, `sizes`, `conns`. `None` for any other group (the caller
/// answers `reset`, `detail`, `cachedump` itself, and an error for the rest).
pub fn group(store: &Store, name: Option<&[u8]>) -> Option<Vec<(String, String)>> {
    Some(match name {
        None => store
            .stats()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        // No size histogram is kept (memcached's default, -o track_sizes off).
        Some(b"sizes") => vec![("sizes_status".into(), "disabled".into())],
        Some(b"items") => {
            let c = store.class_summary();
            if c.items == 0 {
                Vec::new()
            } else {
                [
                    ("number", c.items),
                    ("number_hot", c.dram_items),
                    ("number_cold", c.items.saturating_sub(c.dram_items)),
                    ("evicted", c.evicted),
                    ("outofmemory", 0),
                    ("reclaimed", c.reclaimed),
                ]
                .into_iter()
                .map(|(k, v)| (format!("items:1:{k}"), v.to_string()))
                .collect()
            }
        }
        Some(b"slabs") => {
            let c = store.class_summary();
            let active = u64::from(c.items > 0);
            let mut lines: Vec<(String, String)> = Vec::new();
            if active == 1 {
                lines.push(("1:used_chunks".into(), c.items.to_string()));
            }
            lines.push(("active_slabs".into(), active.to_string()));
            lines.push(("total_malloced".into(), c.dram_bytes.to_string()));
            lines
        }
        Some(b"conns") => store.conns.stats(crate::types::now_unix()),
        Some(b"settings") => {
            let s = store.settings();
            let on_off = |on: bool, yes: &str, no: &str| if on { yes } else { no }.to_string();
            let protocol = match s.protocol {
                crate::types::Protocol::Ascii => "ascii",
                crate::types::Protocol::Binary => "binary",
                crate::types::Protocol::Auto => "auto-negotiate",
            };
            // memcached 1.6.18's names and order, for the settings inpath has; then the
            // security settings (`ssl_*`, `auth_*`).
            let mut lines = vec![
                ("maxbytes".into(), store.memory_limit().to_string()),
                ("maxconns".into(), s.max_conns.to_string()),
                ("tcpport".into(), s.tcp_port.to_string()),
                ("udpport".into(), s.udp_port.to_string()),
                ("verbosity".into(), store.verbosity().to_string()),
                (
                    "evictions".into(),
                    on_off(store.evictions_enabled(), "on", "off"),
                ),
                ("domain_socket".into(), "NULL".into()),
                (
                    "shutdown_command".into(),
                    on_off(s.shutdown_command, "yes", "no"),
                ),
                ("num_threads".into(), s.threads.to_string()),
                ("num_threads_per_udp".into(), s.threads.to_string()),
                ("detail_enabled".into(), "no".into()),
                ("reqs_per_event".into(), s.reqs_per_event().to_string()),
                (
                    "cas_enabled".into(),
                    on_off(store.cas_enabled(), "yes", "no"),
                ),
                ("tcp_backlog".into(), s.backlog.to_string()),
                ("binding_protocol".into(), protocol.into()),
                ("item_size_max".into(), store.item_max().to_string()),
                (
                    "flush_enabled".into(),
                    on_off(store.flush_all_enabled(), "yes", "no"),
                ),
                ("dump_enabled".into(), on_off(!s.dump_disabled, "yes", "no")),
                ("idle_timeout".into(), s.idle_timeout_secs.to_string()),
                ("track_sizes".into(), "no".into()),
                (
                    "flash_direct_io".into(),
                    u8::from(store.flash_direct()).to_string(),
                ),
            ];
            lines.extend(store.access.settings());
            lines
        }
        Some(_) => return None,
    })
}
