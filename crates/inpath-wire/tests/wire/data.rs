//! The data path on real loopback sockets: forwarded bytes are identical, taps equal the
//! engines run from memory, framing across segments, job splitting, the transform hook and
//! the HTTP API.

use crate::common::*;
use inpath_core::Engine;
use inpath_sketch::{format, Params, SketchEngine};
use inpath_taps::{parse_tap, SketchPartial};
use inpath_wire::transform::{Transform, TransformError, TransformFactory};
use inpath_wire::{Direction, JobSplit, ServerConfig};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn memory_sketch_u32(bytes: &[u8]) -> Vec<u8> {
    let mut engine = SketchEngine::u32(Params::default()).unwrap();
    engine.update(bytes).unwrap();
    format::to_bytes(&engine.finish().unwrap())
}

/// A destination that reads its client's stream to the end while sending its own random
/// stream in random segments; reports (peer, bytes received) per connection.
async fn talking_server(
    replies: Arc<HashMap<u16, Vec<u8>>>,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(u16, Vec<u8>)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            let replies = replies.clone();
            tokio::spawn(async move {
                let (mut r, mut w) = stream.into_split();
                // The client announces which reply it wants in its first two bytes.
                let mut id = [0u8; 2];
                tokio::io::AsyncReadExt::read_exact(&mut r, &mut id)
                    .await
                    .unwrap();
                let id = u16::from_le_bytes(id);
                let reply = replies[&id].clone();
                let writer = tokio::spawn(async move {
                    write_segments(&mut w, &reply, id as u64 + 1000, 9000)
                        .await
                        .unwrap();
                    w.shutdown().await.unwrap();
                });
                let got = read_all(&mut r).await.unwrap();
                writer.await.unwrap();
                tx.send((id, got)).unwrap();
            });
        }
    });
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_forwards_identical_bytes_both_ways_and_taps_equal_memory() {
    const CONNS: u16 = 8;
    let mut r = rng(7);
    // Client streams: u32-aligned after the 2-byte id... the id is part of the stream, so
    // make the whole stream u32-aligned: 2 id bytes + 2 padding bytes + items.
    let mut sent = HashMap::new();
    let mut replies = HashMap::new();
    for id in 0..CONNS {
        let items = r.gen_range(0..300_000usize);
        let mut stream = id.to_le_bytes().to_vec();
        stream.extend_from_slice(&[0, 0]);
        stream.extend(random_bytes(&mut r, items * 4));
        sent.insert(id, stream);
        let reply_items = r.gen_range(0..200_000usize);
        replies.insert(id, random_bytes(&mut r, reply_items * 4));
    }
    let replies = Arc::new(replies);
    let (dest, mut received) = talking_server(replies.clone()).await;
    let mut config = ServerConfig::relay("127.0.0.1:0", dest.to_string());
    let save = tempfile::tempdir().unwrap();
    config.taps = vec![
        parse_tap(&format!("sketch:format=u32,save={}", save.path().display())).unwrap(),
        parse_tap("crc").unwrap(),
    ];
    config.directions = vec![Direction::C2s, Direction::S2c];
    config.buffer = 16 << 10; // small buffers: many chunk boundaries inside records
    let server = start(config).await;

    let mut clients = Vec::new();
    for id in 0..CONNS {
        let data = sent[&id].clone();
        let addr = server.addr;
        clients.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let local = stream.local_addr().unwrap();
            let (mut rd, mut wr) = stream.into_split();
            let writer = tokio::spawn(async move {
                write_segments(&mut wr, &data, id as u64, 7000)
                    .await
                    .unwrap();
                wr.shutdown().await.unwrap();
            });
            let got = read_all(&mut rd).await.unwrap();
            writer.await.unwrap();
            (id, local, got)
        }));
    }
    let mut peers = HashMap::new();
    for c in clients {
        let (id, local, got) = tokio::time::timeout(LIMIT, c).await.unwrap().unwrap();
        assert_eq!(
            crc32fast::hash(&got),
            crc32fast::hash(&replies[&id]),
            "s2c bytes of {id}"
        );
        assert_eq!(got, replies[&id]);
        peers.insert(local.to_string(), id);
    }
    for _ in 0..CONNS {
        let (id, got) = tokio::time::timeout(LIMIT, received.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.len() + 2, sent[&id].len());
        assert_eq!(
            crc32fast::hash(&got),
            crc32fast::hash(&sent[&id][2..]),
            "c2s bytes of {id}"
        );
    }
    wait_for("all connections closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    let jobs = events(&log, "job");
    let conns = events(&log, "connection");
    assert_eq!(conns.len(), CONNS as usize);
    for c in &conns {
        assert_eq!(c["outcome"], "closed", "{c}");
        let id = peers[c["peer"].as_str().unwrap()];
        assert_eq!(c["bytes_c2s"], sent[&id].len());
        assert_eq!(c["forwarded_s2c"], replies[&id].len());
    }
    for job in jobs {
        let id = peers[job["peer"].as_str().unwrap()];
        let expected = match job["direction"].as_str().unwrap() {
            "c2s" => &sent[&id],
            _ => &replies[&id],
        };
        assert_eq!(job["complete"], true);
        assert_eq!(job["bytes"], expected.len());
        assert_eq!(job["taps"]["crc"]["crc32"], crc32fast::hash(expected));
        assert_eq!(job["taps"]["sketch"]["leftover_bytes"], 0);
        assert_eq!(job["taps"]["sketch"]["records"], expected.len() / 4);
        let saved = std::fs::read(job["taps"]["sketch"]["saved"].as_str().unwrap()).unwrap();
        assert!(
            saved == memory_sketch_u32(expected),
            "sketch of {id} {}",
            job["direction"]
        );
    }
}

use rand::Rng;

/// Sends `data` to a sink in random segments; waits until the sink closed the connection.
async fn send_to_sink(addr: std::net::SocketAddr, data: &[u8], seed: u64, max_segment: usize) {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut rd, mut wr) = stream.into_split();
    write_segments(&mut wr, data, seed, max_segment)
        .await
        .unwrap();
    wr.shutdown().await.unwrap();
    // The sink closes after it has read everything.
    let rest = tokio::time::timeout(LIMIT, read_all(&mut rd))
        .await
        .unwrap()
        .unwrap();
    assert!(rest.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_fixed_width_records_split_across_segments_and_leftover_reported() {
    let mut r = rng(11);
    let items = random_bytes(&mut r, 4 * 50_000);
    let mut data = items.clone();
    data.extend_from_slice(&[9, 9, 9]); // a partial record at the end
    let mut config = ServerConfig::sink("127.0.0.1:0");
    let save = tempfile::tempdir().unwrap();
    config.taps =
        vec![parse_tap(&format!("sketch:format=u32,save={}", save.path().display())).unwrap()];
    config.buffer = 4093; // odd: reads end inside records
    let server = start(config).await;
    // Segments of 1 to 7 bytes for the first part, larger later.
    send_to_sink(server.addr, &data[..2000], 1, 7).await;
    send_to_sink(server.addr, &data, 2, 5000).await;
    wait_for("closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    let jobs = events(&log, "job");
    assert_eq!(jobs.len(), 2);
    let short = jobs.iter().find(|j| j["bytes"] == 2000).unwrap();
    assert_eq!(short["taps"]["sketch"]["records"], 500);
    assert_eq!(short["taps"]["sketch"]["leftover_bytes"], 0);
    let long = jobs.iter().find(|j| j["bytes"] == data.len()).unwrap();
    let sketch = &long["taps"]["sketch"];
    assert_eq!(sketch["records"], 50_000);
    assert_eq!(
        sketch["leftover_bytes"], 3,
        "partial record counted, not dropped"
    );
    let saved = std::fs::read(sketch["saved"].as_str().unwrap()).unwrap();
    assert!(
        saved == memory_sketch_u32(&items),
        "whole records sketched exactly"
    );
    let leftover = events(&log, "stopped");
    assert_eq!(leftover.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_lines_and_unterminated_last_line() {
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![parse_tap("sketch:format=lines").unwrap()];
    let server = start(config).await;
    let text: String = (0..10_000)
        .map(|i| format!("user{}\n", i % 777))
        .collect::<String>()
        + "tail";
    send_to_sink(server.addr, text.as_bytes(), 3, 13).await;
    wait_for("closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    let job = events(&log, "job")[0].clone();
    let sketch = &job["taps"]["sketch"];
    assert_eq!(sketch["records"], 10_001);
    assert_eq!(sketch["unterminated_line_bytes"], 4);
    let card = sketch["cardinality"].as_f64().unwrap();
    assert!((card - 778.0).abs() < 10.0, "{card}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_per_byte_count_and_combined_view_merges_exactly() {
    let mut r = rng(5);
    let data = random_bytes(&mut r, 4 * 100_000);
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![
        parse_tap("sketch:format=u32").unwrap(),
        parse_tap("crc").unwrap(),
    ];
    config.split = JobSplit::bytes(40_000).unwrap();
    let server = start(config).await;
    // Two connections with the same bytes: the combined sketch equals one of them (HLL and
    // Count-Min/AGMS merge exactly; counts add).
    send_to_sink(server.addr, &data, 4, 30_000).await;
    send_to_sink(server.addr, &data[..4 * 1001 + 2], 5, 30_000).await;
    wait_for("closed", || server.hub.open_count() == 0).await;
    let combined = server
        .hub
        .combined(Direction::C2s, 0, true)
        .expect("a combined sketch");
    let combined = combined.as_any().downcast_ref::<SketchPartial>().unwrap();
    let mut expected = SketchEngine::u32(Params::default()).unwrap();
    expected.update(&data).unwrap();
    expected.update(&data[..4 * 1001]).unwrap();
    assert!(combined.sketch.same_state(&expected.finish().unwrap()));
    let (log, _dir) = server.stop().await;
    let jobs = events(&log, "job");
    // 400,000 bytes in 40,000-byte jobs = 10; 4,006 bytes = 1 more.
    assert_eq!(jobs.len(), 11);
    assert!(jobs
        .iter()
        .all(|j| j["split"] == "bytes" && j["complete"] == true));
    let last = jobs.iter().find(|j| j["bytes"] == 4006).unwrap();
    assert_eq!(last["end"], "close");
    assert_eq!(last["taps"]["sketch"]["leftover_bytes"], 2);
    let first = jobs.iter().filter(|j| j["end"] == "bytes").count();
    assert_eq!(first, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_per_length_prefixed_message() {
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![parse_tap("crc").unwrap()];
    config.split = JobSplit::Message;
    let server = start(config).await;
    let messages: Vec<Vec<u8>> = vec![b"first".to_vec(), vec![], vec![7u8; 100_000]];
    let mut data = Vec::new();
    for m in &messages {
        data.extend_from_slice(&(m.len() as u32).to_be_bytes());
        data.extend_from_slice(m);
    }
    data.extend_from_slice(&[0, 0, 0, 50, 1, 2, 3]); // a cut message
    send_to_sink(server.addr, &data, 6, 3).await;
    wait_for("closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    let jobs = events(&log, "job");
    assert_eq!(jobs.len(), 4);
    for (job, m) in jobs.iter().zip(&messages) {
        assert_eq!(job["bytes"], m.len());
        assert_eq!(job["taps"]["crc"]["crc32"], crc32fast::hash(m));
        assert_eq!(job["complete"], true);
    }
    assert_eq!(jobs[3]["complete"], false);
    assert_eq!(jobs[3]["missing_bytes"], 47);
}

/// A test-only transform (not cryptography): XOR with a key byte, released in 1000-byte
/// blocks, so `finish` has to flush the rest. Proves the seal/unseal hook: bytes change on the
/// wire between the relays and come out unchanged; taps see the clear side.
struct BlockXor {
    held: Vec<u8>,
    output_side: bool,
}

impl Transform for BlockXor {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TransformError> {
        self.held.extend(input.iter().map(|b| b ^ 0x5a));
        let whole = self.held.len() - self.held.len() % 1000;
        out.extend(self.held.drain(..whole));
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TransformError> {
        out.append(&mut self.held);
        Ok(())
    }
    fn taps_see_output(&self) -> bool {
        self.output_side
    }
}

struct BlockXorFactory(bool);

impl TransformFactory for BlockXorFactory {
    fn name(&self) -> &str {
        "test-xor"
    }
    fn make(&self) -> Box<dyn Transform> {
        Box::new(BlockXor {
            held: Vec::new(),
            output_side: self.0,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transform_hook_changes_the_wire_not_the_endpoints() {
    // client -> relay A (encode c2s, decode s2c) -> relay B (decode c2s, encode s2c) -> echo
    let echo = echo_server().await;
    let mut b = ServerConfig::relay("127.0.0.1:0", echo.to_string());
    b.transforms = vec![
        (Direction::C2s, Arc::new(BlockXorFactory(true))),
        (Direction::S2c, Arc::new(BlockXorFactory(false))),
    ];
    b.taps = vec![parse_tap("crc").unwrap()];
    b.directions = vec![Direction::C2s, Direction::S2c];
    let relay_b = start(b).await;
    let mut a = ServerConfig::relay("127.0.0.1:0", relay_b.addr.to_string());
    a.transforms = vec![
        (Direction::C2s, Arc::new(BlockXorFactory(false))),
        (Direction::S2c, Arc::new(BlockXorFactory(true))),
    ];
    a.taps = vec![parse_tap("crc").unwrap()];
    a.directions = vec![Direction::C2s, Direction::S2c];
    let relay_a = start(a).await;

    let data = random_bytes(&mut rng(9), 123_457);
    let stream = TcpStream::connect(relay_a.addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        write_segments(&mut wr, &sent, 1, 3000).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let got = tokio::time::timeout(LIMIT, read_all(&mut rd))
        .await
        .unwrap()
        .unwrap();
    writer.await.unwrap();
    assert!(got == data, "endpoints see their own bytes");
    wait_for("closed", || {
        relay_a.hub.open_count() == 0 && relay_b.hub.open_count() == 0
    })
    .await;
    for relay in [relay_a, relay_b] {
        let (log, _dir) = relay.stop().await;
        let jobs = events(&log, "job");
        assert_eq!(jobs.len(), 2);
        for job in jobs {
            assert_eq!(
                job["taps"]["crc"]["crc32"],
                crc32fast::hash(&data),
                "taps see clear bytes"
            );
        }
        let conn = events(&log, "connection")[0];
        assert_eq!(conn["outcome"], "closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_api_and_metrics_parse() {
    let echo = echo_server().await;
    let mut config = ServerConfig::relay("127.0.0.1:0", echo.to_string());
    config.taps = vec![
        parse_tap("sketch:format=u32").unwrap(),
        parse_tap("crc").unwrap(),
    ];
    config.http = Some("127.0.0.1:0".into());
    let server = start(config).await;
    let http = server.http.unwrap();

    // One open connection with data in flight, one closed.
    let data = random_bytes(&mut rng(3), 4 * 10_000);
    let mut open = TcpStream::connect(server.addr).await.unwrap();
    open.write_all(&data).await.unwrap();
    let mut echoed = vec![0u8; data.len()];
    tokio::io::AsyncReadExt::read_exact(&mut open, &mut echoed)
        .await
        .unwrap();
    let mut closed = TcpStream::connect(server.addr).await.unwrap();
    closed.write_all(&data[..400]).await.unwrap();
    closed.shutdown().await.unwrap();
    read_all(&mut closed).await.unwrap();
    wait_for("one closed", || server.hub.closed().len() == 1).await;
    wait_for("tapped", || {
        server.hub.metrics.tap_bytes_total(0) == (data.len() + 400) as u64
    })
    .await;

    let (status, body) = http_get(http, "/connections").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["open"].as_array().unwrap().len(), 1);
    assert_eq!(
        v["open"][0]["current_job"]["c2s"]["taps"]["sketch"]["count"],
        10_000
    );
    assert_eq!(
        v["closed"][0]["recent_jobs"][0]["taps"]["sketch"]["count"],
        100
    );
    let id = v["open"][0]["conn"].as_u64().unwrap();
    let (status, body) = http_get(http, &format!("/connections/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["state"],
        "open"
    );

    let (status, body) = http_get(http, "/combined").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["combined"]["c2s"]["sketch"]["count"], 10_100,
        "open and closed merged"
    );
    assert_eq!(v["combined"]["c2s"]["crc"]["bytes"], data.len() + 400);

    let (status, body) = http_get(http, "/metrics").await;
    assert_eq!(status, 200);
    let samples = parse_prometheus(&body);
    let get = |k: &str| samples.iter().find(|(s, _)| s == k).map(|(_, v)| *v);
    assert_eq!(get("inpath_wire_connections_open"), Some(1.0));
    assert_eq!(get("inpath_wire_connections_accepted_total"), Some(2.0));
    assert_eq!(
        get("inpath_wire_bytes_forwarded_total{direction=\"c2s\"}"),
        Some((data.len() + 400) as f64)
    );
    assert_eq!(
        get("inpath_wire_tap_bytes_total{tap=\"sketch\"}"),
        Some((data.len() + 400) as f64)
    );
    assert_eq!(
        get("inpath_wire_connections_closed_total{outcome=\"closed\"}"),
        Some(1.0)
    );
    assert!(get("inpath_wire_tap_backlog_bytes").is_some());
    // The default (exact) policy never skips.
    for d in ["c2s", "s2c"] {
        assert_eq!(
            get(&format!(
                "inpath_wire_tap_skipped_bytes_total{{direction=\"{d}\"}}"
            )),
            Some(0.0)
        );
    }

    assert_eq!(http_get(http, "/health").await, (200, "ok\n".into()));
    assert_eq!(http_get(http, "/nope").await.0, 404);
    assert_eq!(http_get(http, "/connections/999").await.0, 404);
    assert_eq!(http_get(http, "/").await.0, 200);
    assert_eq!(
        http_request(http, "POST /metrics HTTP/1.1\r\n\r\n").await.0,
        405
    );
    assert_eq!(http_request(http, "garbage\r\n\r\n").await.0, 400);
    drop(open);
    let _ = tokio::time::timeout(Duration::from_secs(5), server.stop())
        .await
        .unwrap();
}
