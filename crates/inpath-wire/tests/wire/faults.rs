//! Faults on real loopback sockets: refused and resetting destinations, resetting clients,
//! half-close each way, slow readers, idle timeouts, many connections, shutdown, bad settings.
//! Every case is bounded in count and time.

use crate::common::*;
use inpath_taps::parse_tap;
use inpath_wire::{Direction, Server, ServerConfig, WireError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn relay_to(addr: std::net::SocketAddr) -> ServerConfig {
    let mut config = ServerConfig::relay("127.0.0.1:0", addr.to_string());
    config.taps = vec![parse_tap("crc").unwrap()];
    config.directions = vec![Direction::C2s, Direction::S2c];
    config
}

fn closed_records(hub: &inpath_wire::Hub, outcome: &str) -> usize {
    hub.closed()
        .iter()
        .filter(|c| c["outcome"] == outcome)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_destination_is_reported_and_the_relay_keeps_serving() {
    let (dead, _held) = dead_port();
    let server = start(relay_to(dead)).await;
    for _ in 0..3 {
        // The relay resets the client: the connect, or the first read, fails (or ends at
        // once); it never hangs.
        let Ok(mut c) = TcpStream::connect(server.addr).await else {
            continue;
        };
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(LIMIT, c.read(&mut buf)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    }
    wait_for("three refusals", || {
        closed_records(&server.hub, "destination_refused") == 3
    })
    .await;
    let (log, _dir) = server.stop().await;
    let conns = events(&log, "connection");
    assert_eq!(conns.len(), 3);
    assert!(
        conns[0]["detail"].as_str().unwrap().contains("refused"),
        "{}",
        conns[0]
    );
    assert!(events(&log, "job").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reset_mid_stream_resets_the_destination() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dest = listener.local_addr().unwrap();
    let server = start(relay_to(dest)).await;
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    let (mut upstream, _) = listener.accept().await.unwrap();
    client.write_all(&[1u8; 100_000]).await.unwrap();
    let mut got = vec![0u8; 100_000];
    upstream.read_exact(&mut got).await.unwrap();
    reset_on_drop(&client);
    drop(client);
    // The destination must see the cut as a reset, not as a clean end of a complete stream.
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(LIMIT, upstream.read(&mut buf))
        .await
        .unwrap();
    assert!(r.is_err(), "destination saw {r:?} instead of a reset");
    wait_for("reported", || server.hub.closed().len() == 1).await;
    let (log, _dir) = server.stop().await;
    let conn = events(&log, "connection")[0];
    assert_eq!(conn["outcome"], "client_reset", "{conn}");
    let job = events(&log, "job")
        .into_iter()
        .find(|j| j["direction"] == "c2s")
        .unwrap();
    assert_eq!(job["complete"], false);
    assert_eq!(job["end"], "client_reset");
    assert_eq!(job["bytes"], 100_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_reset_resets_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dest = listener.local_addr().unwrap();
    let server = start(relay_to(dest)).await;
    let client = TcpStream::connect(server.addr).await.unwrap();
    let (mut upstream, _) = listener.accept().await.unwrap();
    let (mut crd, mut cwr) = client.into_split();
    cwr.write_all(&[2u8; 50_000]).await.unwrap();
    let mut got = vec![0u8; 10_000];
    upstream.read_exact(&mut got).await.unwrap();
    reset_on_drop(&upstream);
    drop(upstream);
    // (The client only reads here: Linux reports a reset once, to whichever call comes
    // first, so a concurrent write could take it and leave the read a plain end.)
    let mut buf = [0u8; 64];
    let r = tokio::time::timeout(LIMIT, crd.read(&mut buf))
        .await
        .unwrap();
    assert!(r.is_err(), "client saw {r:?} instead of a reset");
    wait_for("reported", || server.hub.closed().len() == 1).await;
    let conn = &server.hub.closed()[0];
    assert_eq!(conn["outcome"], "destination_reset", "{conn}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_passes_through_in_each_direction() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dest = listener.local_addr().unwrap();
    let server = start(relay_to(dest)).await;
    let request = random_bytes(&mut rng(1), 300_000);
    let response = random_bytes(&mut rng(2), 700_000);

    // 1. The client half-closes first: the destination reads to the end, then answers.
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    let (mut upstream, _) = listener.accept().await.unwrap();
    client.write_all(&request).await.unwrap();
    client.shutdown().await.unwrap();
    let got = read_all(&mut upstream).await.unwrap();
    assert!(got == request);
    upstream.write_all(&response).await.unwrap();
    upstream.shutdown().await.unwrap();
    let answer = tokio::time::timeout(LIMIT, read_all(&mut client))
        .await
        .unwrap()
        .unwrap();
    assert!(answer == response);

    // 2. The destination half-closes first (a greeting, then EOF); the client still sends.
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    let (mut upstream, _) = listener.accept().await.unwrap();
    upstream.write_all(b"hello, then silence").await.unwrap();
    upstream.shutdown().await.unwrap();
    let greeting = tokio::time::timeout(LIMIT, read_all(&mut client))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(greeting, b"hello, then silence");
    client.write_all(&request).await.unwrap();
    client.shutdown().await.unwrap();
    let got = tokio::time::timeout(LIMIT, read_all(&mut upstream))
        .await
        .unwrap()
        .unwrap();
    assert!(got == request);

    wait_for("both closed", || server.hub.closed().len() == 2).await;
    let (log, _dir) = server.stop().await;
    for conn in events(&log, "connection") {
        assert_eq!(conn["outcome"], "closed", "{conn}");
    }
    assert!(events(&log, "job").iter().all(|j| j["complete"] == true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_on_either_side_do_not_stall_other_connections() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dest = listener.local_addr().unwrap();
    let mut config = relay_to(dest);
    config.taps = vec![parse_tap("sketch:format=u32").unwrap()];
    config.buffer = 16 << 10;
    config.depth = 2;
    let server = start(config).await;
    let big = random_bytes(&mut rng(4), 4 << 20);

    // A slow destination reader: the client's writes are held back by TCP flow control.
    let mut slow_client = TcpStream::connect(server.addr).await.unwrap();
    let (mut slow_dest, _) = listener.accept().await.unwrap();
    let data = big.clone();
    let slow_writer = tokio::spawn(async move {
        slow_client.write_all(&data).await.unwrap();
        slow_client.shutdown().await.unwrap();
        slow_client
    });
    let slow_reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = slow_dest.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        got
    });

    // A slow client reader of a fast destination.
    let mut slow_reading_client = TcpStream::connect(server.addr).await.unwrap();
    let (mut fast_dest, _) = listener.accept().await.unwrap();
    let data = big.clone();
    let fast_writer = tokio::spawn(async move {
        fast_dest.write_all(&data).await.unwrap();
        fast_dest.shutdown().await.unwrap();
        fast_dest
    });
    let slow_client_reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = slow_reading_client.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (got, slow_reading_client)
    });

    // Meanwhile a third connection completes a full exchange.
    for round in 0..3 {
        let mut quick = TcpStream::connect(server.addr).await.unwrap();
        let (mut quick_dest, _) = listener.accept().await.unwrap();
        let msg = random_bytes(&mut rng(10 + round), 100_000);
        quick.write_all(&msg).await.unwrap();
        quick.shutdown().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), read_all(&mut quick_dest))
            .await
            .expect("the quick connection is not held up by the slow ones")
            .unwrap();
        assert!(got == msg);
        drop(quick_dest);
        assert!(read_all(&mut quick).await.unwrap().is_empty());
    }
    assert!(
        !slow_reader.is_finished(),
        "the slow transfer is still going"
    );

    let got = tokio::time::timeout(LIMIT, slow_reader)
        .await
        .unwrap()
        .unwrap();
    assert!(got == big);
    let mut c = slow_writer.await.unwrap();
    let (got, _c) = tokio::time::timeout(LIMIT, slow_client_reader)
        .await
        .unwrap()
        .unwrap();
    assert!(got == big);
    let _d = fast_writer.await.unwrap();
    drop(c.shutdown().await);
    server.stop.now();
    let (log, _dir) = server.stop().await;
    let slow = events(&log, "job")
        .into_iter()
        .filter(|j| j["bytes"] == big.len())
        .count();
    assert!(slow >= 1, "the slow transfers were tapped in full");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_time_out_and_busy_ones_do_not() {
    let echo = echo_server().await;
    let mut config = relay_to(echo);
    config.idle_timeout = Some(Duration::from_millis(1000));
    let server = start(config).await;
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    let mut busy = TcpStream::connect(server.addr).await.unwrap();
    let started = tokio::time::Instant::now();
    for i in 0..15u8 {
        busy.write_all(&[i; 10]).await.unwrap();
        let mut back = [0u8; 10];
        busy.read_exact(&mut back).await.unwrap();
        assert_eq!(back, [i; 10]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut buf = [0u8; 8];
    let n = tokio::time::timeout(LIMIT, idle.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "the idle connection is closed");
    assert!(started.elapsed() >= Duration::from_millis(1000));
    busy.shutdown().await.unwrap();
    assert!(read_all(&mut busy).await.unwrap().is_empty());
    wait_for("both closed", || server.hub.closed().len() == 2).await;
    assert_eq!(closed_records(&server.hub, "idle_timeout"), 1);
    assert_eq!(closed_records(&server.hub, "closed"), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_and_sixty_four_busy_connections() {
    const IDLE: usize = 1000;
    const BUSY: usize = 64;
    // Each relayed connection holds 4 descriptors in this process (client, relay's two,
    // echo's one), and the tests running beside this one in the process hold their own.
    let need = ((IDLE + BUSY) * 4) as u64 + NOFILE_SHARED;
    let have = nofile_limit();
    if have < need {
        eprintln!("SKIPPED a_thousand_idle_and_sixty_four_busy_connections: the open-file limit is {have}, {need} needed (raise it with ulimit -n)");
        return;
    }
    let echo = echo_server().await;
    let mut config = ServerConfig::relay("127.0.0.1:0", echo.to_string());
    config.taps = vec![parse_tap("sketch:format=u32").unwrap()];
    config.buffer = 32 << 10;
    let server = start(config).await;
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(server.addr).await.unwrap());
    }
    wait_for("idle connections open", || server.hub.open_count() == IDLE).await;
    let mut busy = Vec::new();
    for i in 0..BUSY {
        let addr = server.addr;
        busy.push(tokio::spawn(async move {
            let data = random_bytes(&mut rng(i as u64), 256 << 10);
            let stream = TcpStream::connect(addr).await.unwrap();
            let (mut rd, mut wr) = stream.into_split();
            let sent = data.clone();
            let w = tokio::spawn(async move {
                write_segments(&mut wr, &sent, i as u64, 20_000)
                    .await
                    .unwrap();
                wr.shutdown().await.unwrap();
            });
            let got = read_all(&mut rd).await.unwrap();
            w.await.unwrap();
            crc32fast::hash(&got) == crc32fast::hash(&data) && got.len() == data.len()
        }));
    }
    for b in busy {
        assert!(
            tokio::time::timeout(LIMIT, b).await.unwrap().unwrap(),
            "busy echo intact"
        );
    }
    wait_for("busy closed", || server.hub.closed().len() == BUSY).await;
    assert_eq!(server.hub.open_count(), IDLE);
    // The idle ones still work.
    for s in idle.iter_mut().step_by(100) {
        s.write_all(b"ping").await.unwrap();
        let mut b = [0u8; 4];
        tokio::time::timeout(LIMIT, s.read_exact(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&b, b"ping");
    }
    drop(idle);
    wait_for("all closed", || server.hub.open_count() == 0).await;
    let (log, _dir) = server.stop().await;
    assert_eq!(events(&log, "connection").len(), IDLE + BUSY);
    // Idle connections that never sent a byte produce no job; the busy and pinged ones do.
    assert_eq!(events(&log, "job").len(), BUSY + IDLE / 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_open_jobs_and_writes_results() {
    let mut config = ServerConfig::sink("127.0.0.1:0");
    config.taps = vec![
        parse_tap("sketch:format=u32").unwrap(),
        parse_tap("crc").unwrap(),
    ];
    config.grace = Duration::from_millis(1000);
    let server = start(config).await;
    let mut open = Vec::new();
    for i in 0..3u32 {
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let items: Vec<u8> = (0..1000 * (i + 1)).flat_map(|v| v.to_le_bytes()).collect();
        s.write_all(&items).await.unwrap();
        open.push(s);
    }
    open.push(TcpStream::connect(server.addr).await.unwrap()); // idle, no data
    wait_for("tapped", || {
        server.hub.metrics.tap_bytes_total(1) == 4 * 6000
    })
    .await;
    // A connection that ends by itself within the grace period is a normal close.
    let mut finishing = TcpStream::connect(server.addr).await.unwrap();
    finishing.write_all(&[0u8; 8]).await.unwrap();
    wait_for("5 open", || server.hub.open_count() == 5).await;
    server.stop.drain();
    finishing.shutdown().await.unwrap();
    // New connections are refused once draining.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        TcpStream::connect(server.addr).await.is_err(),
        "not accepting while draining"
    );
    let (log, _dir) = server.stop().await;
    let jobs = events(&log, "job");
    assert_eq!(jobs.len(), 4);
    let cut: Vec<_> = jobs.iter().filter(|j| j["end"] == "shutdown").collect();
    assert_eq!(cut.len(), 3);
    for job in &cut {
        assert_eq!(job["complete"], false);
        let records = job["taps"]["sketch"]["records"].as_u64().unwrap();
        assert_eq!(job["bytes"].as_u64().unwrap(), records * 4);
    }
    let outcomes: Vec<_> = events(&log, "connection")
        .iter()
        .map(|c| c["outcome"].clone())
        .collect();
    assert_eq!(outcomes.iter().filter(|o| *o == "shutdown").count(), 4);
    // (A probe above may have been accepted just before the drain: it closes cleanly too.)
    assert!(outcomes.iter().filter(|o| *o == "closed").count() >= 1);
    assert_eq!(log.last().unwrap()["event"], "stopped");
    // The clients see the cut as a reset or end, never a hang.
    for mut s in open {
        let mut b = [0u8; 4];
        let r = tokio::time::timeout(LIMIT, s.read(&mut b)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_clear_errors() {
    let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap();
    let err = |config: ServerConfig| async move {
        match Server::bind(config).await {
            Ok(_) => panic!("should fail"),
            Err(e) => e,
        }
    };
    let e = err(ServerConfig::sink(port.to_string())).await;
    assert!(matches!(e, WireError::Bind { .. }), "{e}");
    assert!(e.to_string().contains("cannot listen on"), "{e}");
    let e = err(ServerConfig::sink("127.0.0.1")).await;
    assert!(e.to_string().contains("expected HOST:PORT"), "{e}");
    let e = err(ServerConfig::sink("no.such.host.invalid:80")).await;
    assert!(matches!(e, WireError::Address { .. }), "{e}");
    let e = err(ServerConfig::relay("127.0.0.1:0", "127.0.0.1:99999")).await;
    assert!(e.to_string().contains("99999"), "{e}");
    let mut c = ServerConfig::sink("127.0.0.1:0");
    c.directions = vec![Direction::S2c];
    assert!(err(c).await.to_string().contains("sink only receives"));
    let mut c = ServerConfig::sink("127.0.0.1:0");
    c.buffer = 10;
    assert!(err(c).await.to_string().contains("buffer = 10"));
    let mut c = ServerConfig::sink("127.0.0.1:0");
    c.http = Some(port.to_string());
    assert!(err(c).await.to_string().contains("(http)"));
}
