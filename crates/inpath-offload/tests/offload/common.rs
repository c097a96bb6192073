//! Helpers of the offload tests: tables written in small pages and opened as a device opens
//! them, graphs built by hand, a device's batches read back as plain values, and the plain
//! Rust references' pieces (LIKE, a row's cell, partial aggregates merged).
#![allow(dead_code)]

use crate::table::options;
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Decimal128Type, Int32Type, Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use inpath_offload::graph::{
    Agg, AggFunc, MaskSource, Op, Operator, Output, Program, Selector, TableTask,
};
use inpath_offload::{Device, LocalDevice, TaskGraph};
use inpath_seal::KeyRing;
use inpath_table::{Error, TableReader, TableWriter};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Writes `batch` as table `name` under `dir` in pages of `rows_per_page` rows (plain pages)
/// and opens it as `LocalDevice::open` does (dictionary-coded strings as dictionaries).
pub fn write_table(
    dir: &Path,
    name: &str,
    batch: &RecordBatch,
    rows_per_page: usize,
) -> Arc<TableReader> {
    let path = dir.join(name);
    let mut w = TableWriter::create(
        &path,
        batch.schema(),
        options(rows_per_page, crate::table::plain()),
    )
    .unwrap();
    // In uneven chunks: pages never depend on how rows arrive.
    let mut at = 0;
    let mut chunk = 1;
    while at < batch.num_rows() {
        let take = chunk.min(batch.num_rows() - at);
        w.write(&batch.slice(at, take)).unwrap();
        at += take;
        chunk = chunk * 3 + 7;
    }
    w.finish().unwrap();
    Arc::new(
        TableReader::open(&path, &KeyRing::new())
            .unwrap()
            .with_dictionary_arrays(),
    )
}

/// A device over `tables` with `lanes` lanes and `budget` bytes.
pub fn device(tables: &[(&str, &Arc<TableReader>)], lanes: usize, budget: u64) -> LocalDevice {
    let tables = tables
        .iter()
        .map(|(n, r)| (n.to_string(), Arc::clone(r)))
        .collect::<HashMap<_, _>>();
    LocalDevice::new(tables, lanes, budget).unwrap()
}

/// Every batch of `graph` on `device`, or the first error (at submission or in the stream).
pub fn run(device: &dyn Device, graph: &TaskGraph) -> Result<Vec<RecordBatch>, Error> {
    device.submit(graph)?.collect()
}

/// A task over every row of `table`: the program `ops`, then `operator`, emitted as `fields`.
pub fn task(table: &str, ops: Vec<Op>, operator: Operator, fields: Vec<(&str, &str)>) -> TableTask {
    TableTask {
        table: table.into(),
        mask: MaskSource::All,
        selector: Selector::default(),
        transformer: Program { ops },
        flags: Vec::new(),
        joins: Vec::new(),
        filter: None,
        operator,
        keep: Vec::new(),
        output: Output {
            fields: fields
                .into_iter()
                .map(|(n, t)| (n.to_string(), t.to_string()))
                .collect(),
        },
        order: None,
        count_groups: None,
        whole_groups: false,
        having: Vec::new(),
    }
}

pub fn agg(func: AggFunc, arg: Option<usize>) -> Agg {
    Agg {
        func,
        arg,
        scale: 0,
    }
}

/// One cell of a device's output or of a reference row: an exact integer (integers, dates,
/// decimals as scaled integers, counts), a string, or null.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cell {
    Null,
    Int(i128),
    Str(String),
}

impl Cell {
    pub fn int(&self) -> Option<i128> {
        match self {
            Cell::Int(v) => Some(*v),
            _ => None,
        }
    }
}

/// A column's cells, whatever its Arrow type (dictionaries by their values).
pub fn cells(array: &dyn Array) -> Vec<Cell> {
    if let DataType::Dictionary(..) = array.data_type() {
        let d = array.as_dictionary::<Int32Type>();
        let values = cells(d.values().as_ref());
        return (0..array.len())
            .map(|i| match d.is_null(i) {
                true => Cell::Null,
                false => values[d.keys().value(i) as usize].clone(),
            })
            .collect();
    }
    (0..array.len())
        .map(|i| {
            if array.is_null(i) {
                return Cell::Null;
            }
            match array.data_type() {
                DataType::Int32 => Cell::Int(array.as_primitive::<Int32Type>().value(i).into()),
                DataType::Int64 => Cell::Int(array.as_primitive::<Int64Type>().value(i).into()),
                DataType::UInt64 => Cell::Int(array.as_primitive::<UInt64Type>().value(i).into()),
                DataType::Date32 => Cell::Int(array.as_primitive::<Date32Type>().value(i).into()),
                DataType::Decimal128(..) => {
                    Cell::Int(array.as_primitive::<Decimal128Type>().value(i))
                }
                DataType::Utf8 => Cell::Str(array.as_string::<i32>().value(i).to_string()),
                DataType::Utf8View => Cell::Str(array.as_string_view().value(i).to_string()),
                t => panic!("unexpected type {t}"),
            }
        })
        .collect()
}

/// The rows of `batches`, each a vector of cells.
pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<Cell>> {
    let mut out = Vec::new();
    for b in batches {
        let columns: Vec<Vec<Cell>> = b.columns().iter().map(|c| cells(c.as_ref())).collect();
        for i in 0..b.num_rows() {
            out.push(columns.iter().map(|c| c[i].clone()).collect());
        }
    }
    out
}

/// Column `c` of `batch` as exact integers (null as none).
pub fn ints(array: &ArrayRef) -> Vec<Option<i128>> {
    cells(array.as_ref()).iter().map(Cell::int).collect()
}

/// Column `c` of `batch` as strings (null as none).
pub fn strings(array: &ArrayRef) -> Vec<Option<String>> {
    cells(array.as_ref())
        .into_iter()
        .map(|c| match c {
            Cell::Str(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// An aggregate's state in a reference, and how partial states merge (the host's Final
/// aggregate): sums and counts add, minima and maxima take theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Sum(Option<i128>),
    Count(i128),
    Min(Option<i128>),
    Max(Option<i128>),
}

impl State {
    pub fn empty(func: AggFunc) -> State {
        match func {
            AggFunc::Sum => State::Sum(None),
            AggFunc::Count | AggFunc::CountAll => State::Count(0),
            AggFunc::Min => State::Min(None),
            AggFunc::Max => State::Max(None),
            AggFunc::Avg => panic!("an average is two states"),
        }
    }

    /// One value added (a row's register; for counts, 1 a row).
    pub fn add(&mut self, v: i128) {
        match self {
            State::Sum(s) => *s = Some(s.unwrap_or(0) + v),
            State::Count(c) => *c += 1,
            State::Min(m) => *m = Some(m.map_or(v, |m| m.min(v))),
            State::Max(m) => *m = Some(m.map_or(v, |m| m.max(v))),
        }
    }

    /// A partial state as the device emits it (a cell) merged in.
    pub fn merge(&mut self, cell: &Cell) {
        let v = cell.int();
        match self {
            State::Sum(s) => {
                if let Some(v) = v {
                    *s = Some(s.unwrap_or(0) + v);
                }
            }
            State::Count(c) => *c += v.expect("a count is never null"),
            State::Min(m) => {
                if let Some(v) = v {
                    *m = Some(m.map_or(v, |m| m.min(v)));
                }
            }
            State::Max(m) => {
                if let Some(v) = v {
                    *m = Some(m.map_or(v, |m| m.max(v)));
                }
            }
        }
    }

    pub fn cell(&self) -> Cell {
        let v = match *self {
            State::Sum(s) | State::Min(s) | State::Max(s) => s,
            State::Count(c) => Some(c),
        };
        v.map_or(Cell::Null, Cell::Int)
    }
}

/// Rows of partial groups (`keys` key cells, then one cell per aggregate of `funcs`) merged
/// into one row per distinct key, as a map.
pub fn merge_groups(
    rows: &[Vec<Cell>],
    keys: usize,
    funcs: &[AggFunc],
) -> HashMap<Vec<Cell>, Vec<Cell>> {
    let mut groups: HashMap<Vec<Cell>, Vec<State>> = HashMap::new();
    for row in rows {
        let states = groups
            .entry(row[..keys].to_vec())
            .or_insert_with(|| funcs.iter().map(|&f| State::empty(f)).collect());
        for (s, c) in states.iter_mut().zip(&row[keys..]) {
            s.merge(c);
        }
    }
    groups
        .into_iter()
        .map(|(k, s)| (k, s.iter().map(State::cell).collect()))
        .collect()
}

/// SQL LIKE (`%` any run, `_` one character, no escape), by plain recursion over characters.
pub fn like(text: &str, pattern: &str) -> bool {
    fn go(t: &[char], p: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('%', rest)) => (0..=t.len()).any(|i| go(&t[i..], rest)),
            Some(('_', rest)) => !t.is_empty() && go(&t[1..], rest),
            Some((c, rest)) => t.first() == Some(c) && go(&t[1..], rest),
        }
    }
    let t: Vec<char> = text.chars().collect();
    let p: Vec<char> = pattern.chars().collect();
    go(&t, &p)
}

/// The calendar year of a day number (days since 1970-01-01), by counting whole years.
pub fn year_of(days: i64) -> i64 {
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let len = |y: i64| if leap(y) { 366 } else { 365 };
    let (mut year, mut d) = (1970i64, days);
    while d < 0 {
        year -= 1;
        d += len(year);
    }
    while d >= len(year) {
        d -= len(year);
        year += 1;
    }
    year
}

/// Waits until the device holds no memory (its lanes gone), up to 10 seconds: its peak,
/// reset, is then 0. Returns whether it got there.
pub fn idle(device: &dyn Device) -> bool {
    for _ in 0..1000 {
        device.reset_stats();
        if device.stats().peak_memory == 0 {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

#[test]
fn the_references_helpers_agree_with_known_answers() {
    assert!(like("MAIL", "%AI%") && like("é ü", "é_ü") && !like("AIR", "A_") && like("", "%"));
    assert!(!like("REG AIR", "%AIR_") && like("REG AIR", "R%R"));
    assert_eq!(year_of(0), 1970);
    assert_eq!(year_of(-1), 1969);
    assert_eq!(year_of(365), 1971);
    // 1972-12-31 (a leap year's last day), 2000-02-29, 1900-03-01.
    assert_eq!(year_of(1095), 1972);
    assert_eq!(year_of(1096), 1973);
    assert_eq!(year_of(11_016), 2000);
    assert_eq!(year_of(-25_508), 1900);
}

/// A task over `table` that counts its rows by register 0 (`op`), after a join of `kind` on
/// its column 0 with task 0's first column: the probe side of the join tests' two-task graphs.
pub fn counted_by(table: &str, op: Op, kind: inpath_offload::graph::JoinKind) -> TableTask {
    use inpath_offload::graph::GroupKey;
    let mut probe = task(
        table,
        vec![op],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![agg(AggFunc::CountAll, None)],
        },
        vec![("k", "Int64"), ("n", "Int64")],
    );
    probe.joins.push(join_first(kind));
    probe
}

/// A join of `kind` of a task's column 0 with task 0's first column.
pub fn join_first(kind: inpath_offload::graph::JoinKind) -> inpath_offload::graph::Join {
    use inpath_offload::graph::{Join, JoinMethod, Source};
    Join {
        build: 0,
        probe_keys: vec![Source::Column(0)],
        build_keys: vec![0],
        kind,
        method: JoinMethod::Auto,
        residual: None,
        condition: None,
    }
}
