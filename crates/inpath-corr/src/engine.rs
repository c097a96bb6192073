//! The `corr` engine: [`Corr`] implements inpath-core's [`Engine`] and [`Lane`].

use crate::accum::Accumulator;
use crate::arch::Kernel;
use crate::spearman::Collector;
use crate::stats::{check_streams, default_names, Kind, Statistics};
use crate::DType;
use inpath_core::error::excerpt;
use inpath_core::isa::Level;
use inpath_core::{CsvSpec, Deframer, Engine, Error, Framing, Lane, RecordSink, Result};

/// How the streams are laid out in the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Row-interleaved binary: each row holds one little-endian item of every stream, stream 0
    /// first. The reference's 64-byte lines are rows of 16 x 32-bit, 32 x 16-bit or 64 x 8-bit
    /// items ([`Layout::lines`]).
    Rows {
        /// Streams M (2 or more).
        streams: usize,
    },
    /// Numeric CSV columns (all, or a selection); each row is one item of every stream.
    Csv(CsvSpec),
}

impl Layout {
    /// The reference's 64-byte lines: as many streams as items of `dtype` fit in 64 bytes.
    pub fn lines(dtype: DType) -> Layout {
        Layout::Rows {
            streams: dtype.per_line(),
        }
    }
}

/// What to compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Method {
    /// Sufficient statistics of the values (Pearson, covariance, regression, cosine): one pass.
    #[default]
    Pearson,
    /// Statistics of the ranks (Spearman): the values are held in memory until the job ends,
    /// then ranked (ties get their average rank) and correlated. Two passes, memory N * M * 16
    /// bytes.
    Spearman,
}

/// Configuration of a [`Corr`] engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorrConfig {
    /// The item type of every stream.
    pub dtype: DType,
    /// The input layout.
    pub layout: Layout,
    /// Pearson (one pass) or Spearman (ranks, two passes).
    pub method: Method,
    /// Which kernels run (results are the same either way).
    pub kernel: Kernel,
}

impl CorrConfig {
    /// Row-interleaved binary input of `streams` streams of `dtype`.
    pub fn rows(dtype: DType, streams: usize) -> CorrConfig {
        CorrConfig {
            dtype,
            layout: Layout::Rows { streams },
            method: Method::Pearson,
            kernel: Kernel::Auto,
        }
    }

    /// CSV input; every selected column is a stream of `dtype`.
    pub fn csv(dtype: DType, spec: CsvSpec) -> CorrConfig {
        CorrConfig {
            dtype,
            layout: Layout::Csv(spec),
            method: Method::Pearson,
            kernel: Kernel::Auto,
        }
    }
}

/// The AMNES correlation engine: exact sufficient statistics of M parallel streams in one pass.
///
/// Feed it chunks of any size with [`Engine::update`]; [`Engine::finish`] returns the
/// [`Statistics`], from which every coefficient is computed ([`Statistics::pearson`]...).
///
/// ```
/// use inpath_core::Engine;
/// use inpath_corr::{Corr, CorrConfig, DType, NanPolicy};
///
/// // Three u8 streams, row-interleaved: (1, 2, 9), (2, 4, 8), (3, 6, 7).
/// let mut corr = Corr::new(CorrConfig::rows(DType::U8, 3))?;
/// corr.update(&[1, 2, 9, 2, 4, 8])?;
/// corr.update(&[3, 6, 7])?;
/// let stats = corr.finish()?;
/// assert_eq!(stats.count(), 3);
/// // Upper triangle, row by row: (0,1), (0,2), (1,2).
/// assert_eq!(stats.pearson(NanPolicy::Nan), vec![1.0, -1.0, -1.0]);
/// # Ok::<(), inpath_core::Error>(())
/// ```
pub struct Corr {
    config: CorrConfig,
    deframer: Deframer,
    sink: Sink,
}

struct Sink {
    dtype: DType,
    method: Method,
    kernel: Kernel,
    /// The highest kernel level this engine may use (below what the CPU and `INPATH_ISA`
    /// allow only in tests: [`Corr::with_isa_cap`]).
    cap: Level,
    has_header: bool,
    /// Streams, once known (from the configuration, or a CSV's first row).
    m: Option<usize>,
    names: Option<Vec<String>>,
    acc: Option<Accumulator>,
    stats: Option<Statistics>,
    collect: Option<Collector>,
    /// CSV: the current row's items, encoded as little-endian bytes.
    row: Vec<u8>,
    /// CSV: items in `row`.
    row_items: usize,
    /// CSV: data rows completed in the current input.
    csv_rows: u64,
}

impl Corr {
    /// A new engine. Fails if the stream count is out of range (binary layouts need 2 or more).
    pub fn new(config: CorrConfig) -> Result<Corr> {
        Corr::with_isa_cap(config, Level::Avx512)
    }

    /// [`Corr::new`] with its kernels capped at level `cap`, as `INPATH_ISA` caps them but for
    /// this engine only (its lanes and resets keep the cap): the tests run every level the CPU
    /// supports in one process. The effective level is the lowest of the CPU's, `INPATH_ISA`'s
    /// and `cap`.
    #[doc(hidden)]
    pub fn with_isa_cap(config: CorrConfig, cap: Level) -> Result<Corr> {
        let width = config.dtype.width();
        let (framing, m) = match &config.layout {
            Layout::Rows { streams } => {
                check_streams(*streams)?;
                (
                    Framing::Fixed {
                        width: streams * width,
                    },
                    Some(*streams),
                )
            }
            Layout::Csv(spec) => {
                if !spec.columns.is_empty() {
                    check_streams(spec.columns.len())?;
                }
                (
                    Framing::Csv(spec.clone()),
                    (!spec.columns.is_empty()).then_some(spec.columns.len()),
                )
            }
        };
        let has_header = matches!(&config.layout, Layout::Csv(spec) if spec.has_header);
        let deframer = Deframer::new(framing)?;
        let mut sink = Sink {
            dtype: config.dtype,
            method: config.method,
            kernel: config.kernel,
            cap,
            has_header,
            m: None,
            names: None,
            acc: None,
            stats: None,
            collect: None,
            row: Vec::new(),
            row_items: 0,
            csv_rows: 0,
        };
        if let (Some(m), Layout::Rows { .. }) = (m, &config.layout) {
            sink.init(m)?;
        } else if let Some(m) = m {
            sink.m = Some(m);
        }
        Ok(Corr {
            config,
            deframer,
            sink,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CorrConfig {
        &self.config
    }

    /// The kernels this engine runs on this CPU (see [`Kernel::name_for`]); Spearman ranks
    /// are floats, so they always take the `f64` tiles.
    pub fn kernel_name(&self) -> &'static str {
        let m = match &self.config.layout {
            Layout::Rows { streams } => *streams,
            Layout::Csv(_) => self.sink.m.unwrap_or(2),
        };
        match self.config.method {
            Method::Pearson => self
                .config
                .kernel
                .name_at(self.sink.cap, self.config.dtype, m),
            Method::Spearman => self.config.kernel.name_at(self.sink.cap, DType::F64, m),
        }
    }

    /// Streams M, once known (CSV inputs learn it from their first row).
    pub fn streams(&self) -> Option<usize> {
        self.sink.m
    }

    /// Names the streams (used in outputs and checked on merge). For CSV inputs the header
    /// names the streams unless this is called.
    pub fn set_names(&mut self, names: Vec<String>) -> Result<()> {
        if let Some(m) = self.sink.m {
            if names.len() != m {
                return Err(Error::parameter(
                    "stream names",
                    names.len(),
                    format!("exactly {m} names"),
                ));
            }
        }
        if let Some(stats) = &mut self.sink.stats {
            stats.set_names(names.clone())?;
        }
        self.sink.names = Some(names);
        Ok(())
    }

    /// Feeds a block of column-major data: `columns[i]` holds the next items of stream `i`,
    /// every column the same number of whole items. For row-interleaved layouts only (the
    /// stream count and item type come from the configuration).
    pub fn update_columns(&mut self, columns: &[&[u8]]) -> Result<()> {
        let m = match (&self.config.layout, self.sink.m) {
            (Layout::Rows { .. }, Some(m)) => m,
            _ => {
                return Err(Error::State(
                    "column-major data needs a binary (rows) layout".into(),
                ))
            }
        };
        if columns.len() != m {
            return Err(Error::parameter(
                "columns",
                columns.len(),
                format!("exactly {m}, one per stream"),
            ));
        }
        let w = self.config.dtype.width();
        let len = columns[0].len();
        if let Some((i, c)) = columns.iter().enumerate().find(|(_, c)| c.len() != len) {
            return Err(Error::parameter(
                format!("column {i} length"),
                c.len(),
                format!("{len} bytes, the length of column 0"),
            ));
        }
        if !len.is_multiple_of(w) {
            return Err(Error::TrailingBytes {
                trailing: len % w,
                width: w,
                complete: (len / w) as u64,
            });
        }
        if self.deframer.pending() != 0 {
            return Err(Error::State(
                "a partial row from update() is pending".into(),
            ));
        }
        const BLOCK: usize = 1024;
        let rows = len / w;
        let mut buf = vec![0u8; BLOCK.min(rows.max(1)) * m * w];
        let mut r0 = 0;
        while r0 < rows {
            let n = BLOCK.min(rows - r0);
            for (i, col) in columns.iter().enumerate() {
                let src = &col[r0 * w..(r0 + n) * w];
                for (r, item) in src.chunks_exact(w).enumerate() {
                    let at = (r * m + i) * w;
                    buf[at..at + w].copy_from_slice(item);
                }
            }
            self.sink.fixed(&buf[..n * m * w])?;
            r0 += n;
        }
        Ok(())
    }

    fn capture_names(&mut self) -> Result<()> {
        if let Some(names) = self.deframer.selected_names() {
            match &self.sink.names {
                None if names.len() >= 2 => {
                    if let Some(stats) = &mut self.sink.stats {
                        stats.set_names(names.clone())?;
                    }
                    self.sink.names = Some(names);
                }
                Some(old)
                    if self.sink.stats.is_some()
                        && *old != names
                        && old.len() == names.len()
                        && self.sink.has_header =>
                {
                    return Err(Error::Incompatible(format!(
                        "this input's columns are {names:?} but earlier input's were {old:?}"
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Sink {
    fn init(&mut self, m: usize) -> Result<()> {
        check_streams(m).map_err(|_| {
            Error::parameter(
                "streams",
                m,
                format!(
                    "2 to {} (correlation needs at least two streams or columns)",
                    crate::MAX_STREAMS
                ),
            )
        })?;
        self.m = Some(m);
        let names = self.names.clone().unwrap_or_else(|| default_names(m));
        match self.method {
            Method::Pearson => {
                self.stats = Some(Statistics::new(self.dtype, names)?);
                self.acc = Some(Accumulator::new(self.dtype, m, self.kernel, self.cap));
            }
            Method::Spearman => {
                let mut stats = Statistics::new(self.dtype, names)?;
                stats.set_kind(Kind::SpearmanRanks);
                self.stats = Some(stats);
                self.collect = Some(Collector::new(self.dtype, m));
            }
        }
        Ok(())
    }

    fn push(&mut self, rows: &[u8]) -> Result<()> {
        if let (Some(acc), Some(stats)) = (&mut self.acc, &mut self.stats) {
            acc.push_rows(rows, stats)
        } else if let Some(collect) = &mut self.collect {
            collect.push_rows(rows)
        } else {
            Err(Error::State(
                "corr engine used before its stream count is known".into(),
            ))
        }
    }

    fn close(&mut self) -> Result<()> {
        if let (Some(acc), Some(stats)) = (&mut self.acc, &mut self.stats) {
            acc.close(stats)?;
        }
        Ok(())
    }

    fn parse(&self, column: usize, text: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let row = self.csv_rows + 1 + self.has_header as u64;
        let bad = |expected: String| {
            let name = self
                .names
                .as_ref()
                .and_then(|n| n.get(column))
                .map_or_else(|| format!("#{column}"), |n| format!("{n:?}"));
            Error::BadValue {
                what: "CSV cell".into(),
                location: format!("row {row}, column {name}"),
                value: excerpt(text),
                expected,
            }
        };
        let s = std::str::from_utf8(text)
            .map_err(|_| bad("UTF-8 text".into()))?
            .trim();
        if s.is_empty() {
            return Err(bad(format!("a {} value (empty cells are not supported: corr needs a value in every row of every column)", self.dtype)));
        }
        let dtype = self.dtype;
        let int = |lo: i128, hi: i128| -> Result<i128> {
            let v: i128 = s
                .parse()
                .map_err(|_| bad(format!("an integer ({dtype}: {lo} to {hi})")))?;
            if v < lo || v > hi {
                return Err(bad(format!("in the {dtype} range {lo} to {hi}")));
            }
            Ok(v)
        };
        match dtype {
            DType::U8 => out.push(int(0, u8::MAX as i128)? as u8),
            DType::I8 => out.push(int(i8::MIN as i128, i8::MAX as i128)? as i8 as u8),
            DType::U16 => out.extend_from_slice(&(int(0, u16::MAX as i128)? as u16).to_le_bytes()),
            DType::I16 => out.extend_from_slice(
                &(int(i16::MIN as i128, i16::MAX as i128)? as i16).to_le_bytes(),
            ),
            DType::U32 => out.extend_from_slice(&(int(0, u32::MAX as i128)? as u32).to_le_bytes()),
            DType::I32 => out.extend_from_slice(
                &(int(i32::MIN as i128, i32::MAX as i128)? as i32).to_le_bytes(),
            ),
            DType::U64 => out.extend_from_slice(&(int(0, u64::MAX as i128)? as u64).to_le_bytes()),
            DType::I64 => out.extend_from_slice(
                &(int(i64::MIN as i128, i64::MAX as i128)? as i64).to_le_bytes(),
            ),
            // A value that does not fit the type (1e999 as f64, 1e39 as f32) parses as an
            // infinity, and "inf" or "NaN" as themselves: none has a correlation, so each is an
            // error naming the cell rather than a silent infinity.
            DType::F32 => {
                let v: f32 = s.parse().map_err(|_| bad("a number (f32)".into()))?;
                if !v.is_finite() {
                    return Err(bad(format!(
                        "a finite number that fits f32 (magnitude up to {:e})",
                        f32::MAX
                    )));
                }
                out.extend_from_slice(&v.to_le_bytes());
            }
            DType::F64 => {
                let v: f64 = s.parse().map_err(|_| bad("a number (f64)".into()))?;
                if !v.is_finite() {
                    return Err(bad(format!(
                        "a finite number that fits f64 (magnitude up to {:e})",
                        f64::MAX
                    )));
                }
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        Ok(())
    }
}

impl Sink {
    /// Names the column of a CSV cell error once the header is known (the header and the bad
    /// cell may arrive in the same chunk, before the names reach the sink).
    fn name_column(&self, err: Error) -> Error {
        match (err, &self.names) {
            (
                Error::BadValue {
                    what,
                    location,
                    value,
                    expected,
                },
                Some(names),
            ) => {
                let location = match location.rsplit_once(", column #") {
                    Some((row, col)) => {
                        match col.parse::<usize>().ok().and_then(|c| names.get(c)) {
                            Some(name) => format!("{row}, column {name:?}"),
                            None => location,
                        }
                    }
                    None => location,
                };
                Error::BadValue {
                    what,
                    location,
                    value,
                    expected,
                }
            }
            (err, _) => err,
        }
    }
}

impl RecordSink for Sink {
    fn fixed(&mut self, records: &[u8]) -> Result<()> {
        self.push(records)
    }

    fn value(&mut self, column: usize, value: &[u8]) -> Result<()> {
        let w = self.dtype.width();
        let mut row = std::mem::take(&mut self.row);
        if row.len() < (column + 1) * w {
            row.resize((column + 1) * w, 0);
        }
        let mut item = Vec::with_capacity(w);
        let result = self.parse(column, value, &mut item);
        if result.is_ok() {
            row[column * w..(column + 1) * w].copy_from_slice(&item);
            self.row_items = self.row_items.max(column + 1);
        }
        self.row = row;
        result
    }

    fn end_row(&mut self) -> Result<()> {
        let items = self.row_items;
        if self.acc.is_none() && self.collect.is_none() {
            self.init(self.m.unwrap_or(items))?;
        }
        let m = self.m.unwrap_or(items);
        let w = self.dtype.width();
        let result = if items == m {
            let row = std::mem::take(&mut self.row);
            let r = self.push(&row[..m * w]);
            self.row = row;
            r
        } else {
            Err(Error::RaggedRow {
                row: self.csv_rows + 1 + self.has_header as u64,
                fields: items,
                needed: m,
            })
        };
        self.row_items = 0;
        self.csv_rows += 1;
        result
    }
}

impl Engine for Corr {
    type Output = Statistics;

    fn update(&mut self, chunk: &[u8]) -> Result<()> {
        let result = self.deframer.feed(chunk, &mut self.sink);
        self.capture_names()?;
        result.map_err(|e| self.sink.name_column(e))
    }

    fn finish(&mut self) -> Result<Statistics> {
        let closed = self.close_input().map_err(|e| self.sink.name_column(e));
        let stats = self.sink.stats.take();
        let collect = self.sink.collect.take();
        let fresh = Corr::with_isa_cap(self.config.clone(), self.sink.cap)?;
        let names = self.sink.names.clone();
        *self = fresh;
        if let (Some(names), Layout::Rows { .. }) = (names, &self.config.layout) {
            self.set_names(names)?;
        }
        closed?;
        let stats = stats.ok_or_else(|| {
            Error::State(
                "the input holds no rows (and no CSV header): there is nothing to correlate".into(),
            )
        })?;
        match collect {
            Some(collect) => {
                let names = stats.names().to_vec();
                let ranks = collect.ranks(&names)?;
                correlate_ranks(ranks, names, self.config.kernel, self.sink.cap)
            }
            None => Ok(stats),
        }
    }
}

impl Lane for Corr {
    fn framing(&self) -> &Framing {
        self.deframer.framing()
    }

    fn fork(&self) -> Self {
        let mut lane = Corr::with_isa_cap(self.config.clone(), self.sink.cap)
            .expect("a valid configuration forks");
        lane.sink.names = self.sink.names.clone();
        if let Some(stats) = &mut lane.sink.stats {
            if let Some(names) = &lane.sink.names {
                let _ = stats.set_names(names.clone());
            }
        }
        lane
    }

    fn close_input(&mut self) -> Result<()> {
        self.capture_names()?;
        let result = self.deframer.close(&mut self.sink);
        self.sink.csv_rows = 0;
        self.sink.row_items = 0;
        let closed = self.sink.close();
        result.and(closed)
    }

    fn merge(&mut self, other: &Self) -> Result<()> {
        if self.config.dtype != other.config.dtype || self.config.method != other.config.method {
            return Err(Error::Incompatible(
                "corr engines configured differently".into(),
            ));
        }
        if self.deframer.pending() != 0 || other.deframer.pending() != 0 {
            return Err(Error::State(
                "merge needs both lanes closed (a partial row is pending)".into(),
            ));
        }
        let Some(other_stats) = &other.sink.stats else {
            return Ok(());
        };
        if self.sink.stats.is_none() {
            let m = other_stats.streams();
            self.sink.names = Some(other_stats.names().to_vec());
            self.sink.init(m)?;
        }
        match (&mut self.sink.collect, &other.sink.collect) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, None) => match &mut self.sink.stats {
                Some(stats) => stats.merge(other_stats),
                None => Ok(()),
            },
            _ => Err(Error::Incompatible(
                "corr engines configured differently".into(),
            )),
        }
    }
}

/// Spearman's pass two, after ranking (`Collector::ranks`): the exact Pearson statistics of
/// the doubled ranks, with `kernel` at most at level `cap`.
fn correlate_ranks(
    ranks: Vec<Vec<u64>>,
    names: Vec<String>,
    kernel: Kernel,
    cap: Level,
) -> Result<Statistics> {
    let m = ranks.len();
    let n = ranks.first().map_or(0, |r| r.len());
    let (dtype, w) = if 2 * (n as u64) + 2 <= u32::MAX as u64 {
        (DType::U32, 4)
    } else {
        (DType::U64, 8)
    };
    let mut config = CorrConfig::rows(dtype, m);
    config.kernel = kernel;
    let mut engine = Corr::with_isa_cap(config, cap)?;
    engine.set_names(names)?;
    const BLOCK: usize = 4096;
    let mut buf = Vec::with_capacity(BLOCK * m * w);
    let mut r0 = 0;
    while r0 < n {
        let rows = BLOCK.min(n - r0);
        buf.clear();
        for r in r0..r0 + rows {
            for col in &ranks {
                if w == 4 {
                    buf.extend_from_slice(&(col[r] as u32).to_le_bytes());
                } else {
                    buf.extend_from_slice(&col[r].to_le_bytes());
                }
            }
        }
        engine.update(&buf)?;
        r0 += rows;
    }
    engine.close_input()?;
    let mut stats = engine.finish()?;
    stats.set_kind(Kind::SpearmanRanks);
    Ok(stats)
}
