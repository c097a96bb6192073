//! Record framing: cutting a byte stream, fed in chunks of any size, into records.
//!
//! Three framings cover the inputs inpath reads:
//! - [`Framing::Fixed`]: little-endian items of a fixed width (4 bytes for `u32`...). The
//!   input length must be a whole number of items; leftover bytes are an error, never dropped.
//! - [`Framing::Lines`]: text lines ended by `\n` (a `\r` before it is removed). A final line
//!   without a newline is still a record.
//! - [`Framing::Csv`]: selected columns of a CSV file (RFC 4180 quoting), by name or index.
//!
//! A [`Deframer`] holds the partial record between chunks and hands whole records to a
//! [`RecordSink`]. Fixed-width records are handed over in runs (a slice of many whole items) so
//! the engines' vector kernels see long arrays; variable-length records one at a time.

use crate::{error::excerpt, Error, Result};
use csv_core::{ReadFieldResult, Reader, ReaderBuilder};

/// The longest text line or CSV field any reader takes (16 MiB): a longer one is
/// [`Error::RecordTooLong`], so an input without record ends (an endless character device, a
/// binary file read as text) fails with a message instead of filling memory.
pub const MAX_RECORD: usize = 16 << 20;

/// The most fields a CSV row may have (1 Mi): a row of endless empty fields is refused like an
/// overlong one.
pub const MAX_FIELDS: usize = 1 << 20;

/// A CSV column, by header name or by 0-based index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnRef {
    /// The column whose header cell equals this name.
    Name(String),
    /// The column at this 0-based position.
    Index(usize),
}

impl ColumnRef {
    /// Reads a user's column argument: a plain number is an index unless `by_name` is set.
    pub fn parse(text: &str) -> ColumnRef {
        match text.parse::<usize>() {
            Ok(index) => ColumnRef::Index(index),
            Err(_) => ColumnRef::Name(text.to_string()),
        }
    }
}

impl std::fmt::Display for ColumnRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColumnRef::Name(name) => write!(f, "{name:?}"),
            ColumnRef::Index(index) => write!(f, "#{index}"),
        }
    }
}

/// Which CSV columns to read and how the file is laid out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvSpec {
    /// The columns to hand to the sink, in this order. Empty means every column.
    pub columns: Vec<ColumnRef>,
    /// The field delimiter (`,` by default).
    pub delimiter: u8,
    /// Whether the first row names the columns. Without a header only indices can be used.
    pub has_header: bool,
}

impl Default for CsvSpec {
    fn default() -> Self {
        CsvSpec {
            columns: Vec::new(),
            delimiter: b',',
            has_header: true,
        }
    }
}

/// How a byte stream is cut into records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Little-endian items of `width` bytes.
    Fixed {
        /// Bytes per item (1 or more).
        width: usize,
    },
    /// `\n`-terminated text lines; a trailing `\r` is removed.
    Lines,
    /// Selected CSV columns.
    Csv(CsvSpec),
}

impl Framing {
    /// Length of the longest prefix of `buf` that holds only whole records, given that `buf`
    /// starts at a record boundary; `None` when this framing cannot be split without parsing
    /// (CSV, whose quoted fields may hold newlines, and whose errors must name the right row).
    pub fn split_point(&self, buf: &[u8]) -> Option<usize> {
        match self {
            Framing::Fixed { width } => Some(buf.len() - buf.len() % width),
            Framing::Lines => Some(memchr::memrchr(b'\n', buf).map_or(0, |at| at + 1)),
            Framing::Csv(_) => None,
        }
    }
}

/// Receives whole records from a [`Deframer`].
pub trait RecordSink {
    /// A run of whole fixed-width records, concatenated: `records.len()` is a multiple of the
    /// width (and may be 0).
    fn fixed(&mut self, records: &[u8]) -> Result<()>;

    /// One variable-length value: a text line without its terminator (`column` 0) or one
    /// selected CSV field with quoting removed (`column` = its position in the selection).
    fn value(&mut self, column: usize, value: &[u8]) -> Result<()>;

    /// Called after each CSV row's selected values and after each text line.
    fn end_row(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Cuts a chunked byte stream into records and hands them to a [`RecordSink`].
#[derive(Clone, Debug)]
pub struct Deframer {
    framing: Framing,
    /// Bytes of a record that began in an earlier chunk (fixed width and lines).
    carry: Vec<u8>,
    /// Whole records handed over since the last `close` (items, lines or CSV data rows).
    records: u64,
    csv: Option<CsvState>,
}

#[derive(Clone, Debug)]
struct CsvState {
    spec: CsvSpec,
    reader: Reader,
    field: Vec<u8>,
    field_len: usize,
    /// Index of the field being read within its row.
    column: usize,
    /// 1-based row number in the file (the header is row 1 when there is one).
    row: u64,
    header: Option<Vec<String>>,
    header_cells: Vec<String>,
    /// For each file column, its position in the selection (resolved after the header).
    selection: Option<Vec<Option<usize>>>,
    /// Fields every data row must have.
    needed: usize,
    /// Whether every column is selected (the width is then fixed by the first row).
    all: bool,
}

impl Deframer {
    /// A deframer for `framing`. Fails when the framing itself is invalid (zero width).
    pub fn new(framing: Framing) -> Result<Self> {
        let csv = match &framing {
            Framing::Fixed { width } if *width == 0 => {
                return Err(Error::parameter("item width", 0, "1 byte or more"));
            }
            Framing::Csv(spec) => {
                if !spec.has_header {
                    if let Some(ColumnRef::Name(name)) = spec
                        .columns
                        .iter()
                        .find(|c| matches!(c, ColumnRef::Name(_)))
                    {
                        return Err(Error::MissingColumn {
                            column: format!("{name:?}"),
                            available: "no header row (--no-header): name columns by 0-based index"
                                .into(),
                        });
                    }
                }
                Some(CsvState::new(spec.clone()))
            }
            _ => None,
        };
        Ok(Deframer {
            framing,
            carry: Vec::new(),
            records: 0,
            csv,
        })
    }

    /// The framing this deframer applies.
    pub fn framing(&self) -> &Framing {
        &self.framing
    }

    /// Records handed to the sink since the last [`Deframer::close`].
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes held back as the start of an unfinished record.
    pub fn pending(&self) -> usize {
        match &self.csv {
            Some(csv) => csv.field_len,
            None => self.carry.len(),
        }
    }

    /// The CSV header's cells, once read (for labelling outputs).
    pub fn header(&self) -> Option<&[String]> {
        self.csv.as_ref().and_then(|csv| csv.header.as_deref())
    }

    /// The CSV columns selected, as names where a header gives them, once resolved.
    pub fn selected_names(&self) -> Option<Vec<String>> {
        let csv = self.csv.as_ref()?;
        let selection = csv.selection.as_ref()?;
        let mut names = vec![String::new(); csv.needed_selected()];
        for (file_col, pos) in selection.iter().enumerate() {
            if let Some(pos) = pos {
                names[*pos] = match &csv.header {
                    Some(header) => header.get(file_col).cloned().unwrap_or_default(),
                    None => format!("column {file_col}"),
                };
            }
        }
        Some(names)
    }

    /// Feeds the next chunk.
    pub fn feed<S: RecordSink>(&mut self, mut chunk: &[u8], sink: &mut S) -> Result<()> {
        match self.framing {
            Framing::Fixed { width } => {
                if !self.carry.is_empty() {
                    let need = (width - self.carry.len()).min(chunk.len());
                    self.carry.extend_from_slice(&chunk[..need]);
                    chunk = &chunk[need..];
                    if self.carry.len() < width {
                        return Ok(());
                    }
                    sink.fixed(&self.carry)?;
                    self.records += 1;
                    self.carry.clear();
                }
                let whole = chunk.len() - chunk.len() % width;
                if whole > 0 {
                    sink.fixed(&chunk[..whole])?;
                    self.records += (whole / width) as u64;
                }
                self.carry.extend_from_slice(&chunk[whole..]);
                Ok(())
            }
            Framing::Lines => {
                while let Some(at) = memchr::memchr(b'\n', chunk) {
                    let line = &chunk[..at];
                    chunk = &chunk[at + 1..];
                    self.records += 1;
                    if self.carry.is_empty() {
                        emit_line(line, sink)?;
                    } else {
                        self.carry.extend_from_slice(line);
                        let result = emit_line(&self.carry, sink);
                        self.carry.clear();
                        result?;
                    }
                }
                if self.carry.len() + chunk.len() > MAX_RECORD {
                    return Err(Error::RecordTooLong {
                        what: format!(
                            "line {} (after {} whole lines)",
                            self.records + 1,
                            self.records
                        ),
                        limit: MAX_RECORD,
                    });
                }
                self.carry.extend_from_slice(chunk);
                Ok(())
            }
            Framing::Csv(_) => {
                let csv = self.csv.as_mut().expect("csv state exists for CSV framing");
                let rows = csv.feed(chunk, sink)?;
                self.records += rows;
                Ok(())
            }
        }
    }

    /// Ends the input: hands over a final unterminated line or CSV row, and fails with
    /// [`Error::TrailingBytes`] if a fixed-width record is incomplete. Resets the per-stream
    /// state (a CSV header will be expected again) and the record count.
    pub fn close<S: RecordSink>(&mut self, sink: &mut S) -> Result<()> {
        let result = match self.framing {
            Framing::Fixed { width } => {
                if self.carry.is_empty() {
                    Ok(())
                } else {
                    Err(Error::TrailingBytes {
                        trailing: self.carry.len(),
                        width,
                        complete: self.records,
                    })
                }
            }
            Framing::Lines => {
                if self.carry.is_empty() {
                    Ok(())
                } else {
                    self.records += 1;
                    emit_line(&self.carry, sink)
                }
            }
            Framing::Csv(ref spec) => {
                let csv = self.csv.as_mut().expect("csv state exists for CSV framing");
                let result = csv.feed(&[], sink);
                *csv = CsvState::new(spec.clone());
                result.map(|_| ())
            }
        };
        self.carry.clear();
        self.records = 0;
        result
    }
}

fn emit_line<S: RecordSink>(line: &[u8], sink: &mut S) -> Result<()> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    sink.value(0, line)?;
    sink.end_row()
}

impl CsvState {
    fn new(spec: CsvSpec) -> Self {
        let reader = ReaderBuilder::new().delimiter(spec.delimiter).build();
        let all = spec.columns.is_empty();
        CsvState {
            spec,
            reader,
            field: vec![0; 256],
            field_len: 0,
            column: 0,
            row: 1,
            header: None,
            header_cells: Vec::new(),
            selection: None,
            needed: 0,
            all,
        }
    }

    fn needed_selected(&self) -> usize {
        self.selection
            .as_ref()
            .map_or(0, |s| s.iter().filter(|p| p.is_some()).count())
    }

    /// Parses `input` (empty = end of input); returns the number of data rows completed.
    fn feed<S: RecordSink>(&mut self, mut input: &[u8], sink: &mut S) -> Result<u64> {
        let at_end = input.is_empty();
        let mut rows = 0;
        loop {
            if input.is_empty() && !at_end {
                return Ok(rows);
            }
            let (result, nin, nout) = self
                .reader
                .read_field(input, &mut self.field[self.field_len..]);
            input = &input[nin..];
            self.field_len += nout;
            match result {
                ReadFieldResult::InputEmpty => {
                    if at_end {
                        return Ok(rows);
                    }
                }
                ReadFieldResult::OutputFull => {
                    if self.field.len() >= MAX_RECORD {
                        return Err(Error::RecordTooLong {
                            what: format!("a field of CSV row {}", self.row),
                            limit: MAX_RECORD,
                        });
                    }
                    let grown = self.field.len() * 2;
                    self.field.resize(grown, 0);
                }
                ReadFieldResult::Field { record_end } => {
                    let complete = self.on_field(record_end, sink)?;
                    self.field_len = 0;
                    if complete {
                        rows += 1;
                    }
                }
                ReadFieldResult::End => return Ok(rows),
            }
        }
    }

    /// Handles one parsed field; returns whether it completed a data row.
    fn on_field<S: RecordSink>(&mut self, record_end: bool, sink: &mut S) -> Result<bool> {
        let column = self.column;
        self.column += 1;
        if self.column > MAX_FIELDS {
            return Err(Error::RecordTooLong {
                what: format!("CSV row {} (more than {MAX_FIELDS} fields)", self.row),
                limit: MAX_RECORD,
            });
        }
        let is_header = self.spec.has_header && self.header.is_none();
        if !is_header && self.selection.is_none() && !self.all {
            self.resolve(None)?;
        }
        let value = &self.field[..self.field_len];
        if is_header {
            self.header_cells
                .push(String::from_utf8_lossy(value).into_owned());
        } else {
            if self.selection.is_none() {
                // No header and every column: the first row fixes the width at its end.
                sink.value(column, value)?;
            } else if let Some(selection) = &self.selection {
                if let Some(Some(pos)) = selection.get(column) {
                    sink.value(*pos, value)?;
                } else if self.all && column >= selection.len() {
                    return Err(Error::RaggedRow {
                        row: self.row,
                        fields: column + 1,
                        needed: self.needed,
                    });
                }
            }
        }
        if !record_end {
            return Ok(false);
        }
        let fields = self.column;
        self.column = 0;
        let row = self.row;
        self.row += 1;
        if is_header {
            let cells = std::mem::take(&mut self.header_cells);
            self.resolve(Some(&cells))?;
            self.header = Some(cells);
            return Ok(false);
        }
        if self.selection.is_none() {
            // First row without a header, all columns: the width is now known.
            self.needed = fields;
            self.selection = Some((0..fields).map(Some).collect());
        } else if fields < self.needed || (self.all && fields != self.needed) {
            return Err(Error::RaggedRow {
                row,
                fields,
                needed: self.needed,
            });
        }
        sink.end_row()?;
        Ok(true)
    }

    /// Maps the selected columns to file positions, from the header when there is one.
    fn resolve(&mut self, header: Option<&[String]>) -> Result<()> {
        if self.all {
            let width = header.map_or(0, |h| h.len());
            self.needed = width;
            self.selection = Some((0..width).map(Some).collect());
            return Ok(());
        }
        let mut positions = Vec::with_capacity(self.spec.columns.len());
        for column in &self.spec.columns {
            let index = match column {
                ColumnRef::Index(index) => {
                    if let Some(header) = header {
                        if *index >= header.len() {
                            return Err(Error::MissingColumn {
                                column: column.to_string(),
                                available: describe_header(header),
                            });
                        }
                    }
                    *index
                }
                ColumnRef::Name(name) => {
                    let header = header.unwrap_or(&[]);
                    header.iter().position(|cell| cell == name).ok_or_else(|| {
                        Error::MissingColumn {
                            column: column.to_string(),
                            available: describe_header(header),
                        }
                    })?
                }
            };
            positions.push(index);
        }
        let width = positions.iter().copied().max().map_or(0, |m| m + 1);
        let mut selection = vec![None; width];
        for (pos, index) in positions.iter().enumerate() {
            if selection[*index].is_some() {
                return Err(Error::parameter(
                    "CSV column",
                    self.spec.columns[pos].to_string(),
                    "each column may be selected once",
                ));
            }
            selection[*index] = Some(pos);
        }
        self.needed = width;
        self.selection = Some(selection);
        Ok(())
    }
}

fn describe_header(header: &[String]) -> String {
    if header.is_empty() {
        return "no columns".into();
    }
    let names: Vec<String> = header
        .iter()
        .take(12)
        .enumerate()
        .map(|(i, h)| format!("#{i} {}", excerpt(h.as_bytes())))
        .collect();
    let more = if header.len() > 12 {
        format!(" and {} more", header.len() - 12)
    } else {
        String::new()
    };
    format!("{} column(s): {}{more}", header.len(), names.join(", "))
}
