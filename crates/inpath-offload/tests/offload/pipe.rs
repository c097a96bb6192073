//! Tests moved from inpath-query's offload tests that never needed SQL: a device served over
//! a pipe answers as the local one, declines and cancels alike; a pipe that is not a device is
//! refused, and a device that goes away fails its graphs.

use crate::graphs::{aggregate_over_t, sum_over_t};
use crate::table::random_table;
use arrow_array::{Decimal128Array, Int64Array, RecordBatch};
use inpath_offload::graph::{Agg, AggFunc, Op, Operator, TableTask};
use inpath_offload::{serve, Device, LocalDevice, ProcessDevice, TaskGraph};
use inpath_seal::KeyRing;
use inpath_table::TableReader;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Table `t` of `random_table` (3,000 rows) under `dir`, as a device's tables.
pub fn t_tables(dir: &Path, seed: u64) -> HashMap<String, Arc<TableReader>> {
    random_table(dir, 3_000, seed);
    let reader = Arc::new(TableReader::open(&dir.join("t"), &KeyRing::new()).unwrap());
    HashMap::from([("t".to_string(), reader)])
}

/// A device served over a pipe (as `--device process` serves one) and its host's end.
fn piped(device: LocalDevice) -> ProcessDevice {
    let (from_host, to_device) = std::io::pipe().unwrap();
    let (from_device, to_host) = std::io::pipe().unwrap();
    std::thread::spawn(move || serve(device, from_host, to_host));
    ProcessDevice::connect(to_device, from_device).unwrap()
}

#[test]
fn a_device_over_a_pipe_answers_as_the_local_one_declines_and_cancels_alike() {
    let dir = tempfile::tempdir().unwrap();
    let tables = t_tables(dir.path(), 5);
    let local = LocalDevice::new(tables.clone(), 2, 64 << 20).unwrap();
    let remote = piped(LocalDevice::new(tables.clone(), 2, 64 << 20).unwrap());
    assert_eq!(remote.memory_budget(), 64 << 20);
    assert_eq!(remote.lanes(), 2);
    assert!(local.in_host_process() && !remote.in_host_process());

    // The same graphs give the same rows: sums, a product, min and max.
    let tasks = [
        sum_over_t(vec![Op::Load { column: 0 }], 0, 2),
        sum_over_t(
            vec![
                Op::Load { column: 0 },
                Op::Load { column: 1 },
                Op::Mul(0, 1),
            ],
            2,
            4,
        ),
        aggregate_over_t(
            vec![Op::Load { column: 3 }],
            vec![
                Agg {
                    func: AggFunc::Min,
                    arg: Some(0),
                    scale: 0,
                },
                Agg {
                    func: AggFunc::Max,
                    arg: Some(0),
                    scale: 0,
                },
            ],
            vec![("lo".into(), "Int64".into()), ("hi".into(), "Int64".into())],
        ),
    ];
    // One partial a lane, of the pages it read; the lanes share a queue of pages, so which
    // lane read which page depends on timing. The partials merged (as the host's Final
    // aggregate merges them) are what must agree.
    let merged = |device: &dyn Device, task: &TableTask| -> Vec<Option<i128>> {
        let Operator::Aggregate { aggs } = &task.operator else {
            unreachable!("aggregates only")
        };
        let batches: Vec<RecordBatch> = device
            .submit(&TaskGraph::single(task.clone()))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(!batches.is_empty());
        aggs.iter()
            .enumerate()
            .map(|(c, agg)| {
                let values = batches.iter().flat_map(|b| {
                    let column = b.column(c).as_any();
                    let values: Vec<Option<i128>> = match column.downcast_ref::<Decimal128Array>() {
                        Some(d) => d.iter().collect(),
                        None => column
                            .downcast_ref::<Int64Array>()
                            .unwrap()
                            .iter()
                            .map(|v| v.map(i128::from))
                            .collect(),
                    };
                    values.into_iter().flatten()
                });
                match agg.func {
                    AggFunc::Sum => values.reduce(|a, b| a + b),
                    AggFunc::Min => values.min(),
                    AggFunc::Max => values.max(),
                    _ => unreachable!("sums, minima and maxima only"),
                }
            })
            .collect()
    };
    for task in &tasks {
        let want = merged(&local, task);
        assert!(want.iter().all(Option::is_some), "{task:?}: {want:?}");
        assert_eq!(merged(&remote, task), want, "{task:?}");
    }
    // The device process's counters come back, with its own peak memory, and reset.
    let stats = remote.stats();
    assert_eq!(stats.graphs, 3);
    assert!(stats.pages_read >= 9 && stats.bytes_read > 0, "{stats:?}");
    assert!(stats.process_peak_rss > 0, "{stats:?}");
    remote.reset_stats();
    assert_eq!(remote.stats().graphs, 0);

    // Errors cross the pipe: a table the device does not hold, and a budget below one page,
    // which is a decline (the host then runs the plan itself), as from a local device.
    let mut bad = tasks[0].clone();
    bad.table = "nope".into();
    let e = remote
        .submit(&TaskGraph::single(bad))
        .unwrap()
        .find_map(|r| r.err())
        .unwrap();
    assert!(e.to_string().contains("no table \"nope\""), "{e}");
    let small = piped(LocalDevice::new(tables, 8, 64 << 10).unwrap());
    let e = small
        .submit(&TaskGraph::single(tasks[0].clone()))
        .unwrap()
        .find_map(|r| r.err())
        .unwrap();
    assert!(
        matches!(e, inpath_table::Error::DeviceDeclined { .. })
            && e.to_string().contains("cannot hold one page"),
        "{e}"
    );

    // A cancelled graph stops, and a stream dropped early cancels; the device goes on.
    let mut stream = remote.submit(&TaskGraph::single(tasks[1].clone())).unwrap();
    stream.cancel();
    assert!(stream.by_ref().count() <= 2);
    drop(remote.submit(&TaskGraph::single(tasks[1].clone())).unwrap());
    assert_eq!(merged(&remote, &tasks[2]), merged(&local, &tasks[2]));
}

#[test]
fn a_pipe_that_is_not_a_device_is_refused_and_a_device_that_goes_away_fails_its_graphs() {
    // No hello: something else at the other end.
    let (from_device, mut to_host) = std::io::pipe().unwrap();
    let (_, to_device) = std::io::pipe().unwrap();
    std::io::Write::write_all(&mut to_host, b"hello, world\n").unwrap();
    drop(to_host);
    let e = ProcessDevice::connect(to_device, from_device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("did not say hello"), "{e}");
    let (from_device, to_host) = std::io::pipe().unwrap();
    let (_, to_device) = std::io::pipe().unwrap();
    drop(to_host);
    let e = ProcessDevice::connect(to_device, from_device)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("did not say hello") && e.contains("closed"),
        "{e}"
    );

    // A device that reads a frame of a kind it does not know stops with an error naming it
    // (after its hello), rather than guessing at it.
    let dir = tempfile::tempdir().unwrap();
    let device = LocalDevice::new(t_tables(dir.path(), 6), 1, 64 << 20).unwrap();
    let mut frame = 9u32.to_le_bytes().to_vec();
    frame.push(99);
    frame.extend(7u64.to_le_bytes());
    let (replies, to_host) = std::io::pipe().unwrap();
    let e = serve(device, &frame[..], to_host).unwrap_err().to_string();
    assert!(e.contains("unknown kind") && e.contains("99"), "{e}");
    let mut hello = Vec::new();
    std::io::Read::read_to_end(&mut { replies }, &mut hello).unwrap();
    assert!(String::from_utf8_lossy(&hello).contains("\"protocol\":1"));

    // A device whose pipe breaks: its graphs end with an error naming that, never hang.
    let dir = tempfile::tempdir().unwrap();
    let device = LocalDevice::new(t_tables(dir.path(), 6), 2, 64 << 20).unwrap();
    let (from_host, to_device) = std::io::pipe().unwrap();
    let (from_device, to_host) = std::io::pipe().unwrap();
    // The device side answers hello and then reads one frame and stops (as a process that
    // dies would).
    let server = std::thread::spawn(move || {
        let limited = std::io::Read::take(from_host, 4);
        let _ = serve(device, limited, to_host);
    });
    let remote = ProcessDevice::connect(to_device, from_device).unwrap();
    let task = sum_over_t(vec![Op::Load { column: 0 }], 0, 2);
    let got: Vec<_> = match remote.submit(&TaskGraph::single(task.clone())) {
        Ok(stream) => stream.collect(),
        Err(e) => vec![Err(e)],
    };
    server.join().unwrap();
    let e = got
        .iter()
        .find_map(|r| r.as_ref().err())
        .expect("an error")
        .to_string();
    assert!(e.contains("device process"), "{e}");
    // Later graphs are refused at once.
    let e = remote
        .submit(&TaskGraph::single(task))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("exited") || e.contains("cannot"), "{e}");
    assert_eq!(remote.stats(), inpath_offload::DeviceStats::default());
}
