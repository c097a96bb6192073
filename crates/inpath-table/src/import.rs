//! Import of Parquet and CSV files into column tables: Parquet through the `parquet` crate's
//! Arrow reader, CSV through `arrow-csv` with its schema inferred from the first
//! [`CSV_INFER_ROWS`] rows (what a SQL engine's `read_csv` does), types narrowed to what the
//! format stores.

use crate::error::{Error, Result};
use crate::format::LogicalType;
use crate::writer::{TableSummary, TableWriter, WriteOptions};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader};
use arrow_cast::{cast_with_options, CastOptions};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use std::fs::File;
use std::io::{BufReader, Seek};
use std::path::Path;
use std::sync::Arc;

/// Rows of a CSV file read to infer its columns' types (the rest must parse as those types).
pub const CSV_INFER_ROWS: usize = 1000;

/// Rows a batch while importing.
const IMPORT_BATCH_ROWS: usize = 8192;

/// The type a column of Arrow type `t` is stored as, or `None` when the format cannot hold it.
/// Small integers widen to Int32 and UInt32 to Int64 (bit-packing stores them narrow anyway),
/// Float16/32 widen to Float64, Date64 becomes Date32 (whole days), UInt64 becomes Int64 (a
/// value above 2^63 − 1 is an error at import, never a wrapped number), dictionary-encoded
/// columns are stored by their values.
pub fn stored_type(t: &DataType) -> Option<DataType> {
    use DataType::*;
    let stored = match t {
        Int8 | Int16 | UInt8 | UInt16 => Int32,
        UInt32 | UInt64 => Int64,
        Float16 | Float32 => Float64,
        Date64 => Date32,
        LargeUtf8 | Utf8View => Utf8,
        Decimal32(p, s) | Decimal64(p, s) => Decimal128(*p, *s),
        // Dictionary-encoded columns are stored by their values (the format keeps its own
        // dictionary for low-cardinality strings).
        Dictionary(_, values) => return stored_type(values),
        other => other.clone(),
    };
    LogicalType::from_arrow(&stored).map(|_| stored)
}

/// The file's format, from its extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportFormat {
    /// Apache Parquet.
    Parquet,
    /// CSV with a header row.
    Csv,
}

impl ImportFormat {
    /// The format a path's extension names (`.parquet`, `.csv`, case-insensitive).
    pub fn of(path: &Path) -> Option<ImportFormat> {
        let ext = path.extension()?.to_string_lossy().to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(ImportFormat::Parquet),
            "csv" => Some(ImportFormat::Csv),
            _ => None,
        }
    }
}

/// Imports `file` (Parquet or CSV with a header row, by extension) as the column table `dir`.
/// Every column's type is checked before anything is written: an unsupported type names the
/// column and the type. Returns the written table's summary; on any error nothing is left
/// at `dir`.
pub fn import_file(file: &Path, dir: &Path, options: WriteOptions) -> Result<TableSummary> {
    let table = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let format = ImportFormat::of(file).ok_or_else(|| {
        Error::parameter(
            "input file",
            file.display(),
            "a .parquet or .csv file (by its extension)",
        )
    })?;
    if !file.is_file() {
        return Err(Error::io(
            file,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    let open = || File::open(file).map_err(|e| Error::io(file, e));
    let arrow = |e: ArrowError| Error::Arrow {
        table: table.clone(),
        detail: format!("{}: {e}", file.display()),
    };
    let reader: Box<dyn RecordBatchReader> = match format {
        ImportFormat::Parquet => Box::new(
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open()?)
                .and_then(|b| b.with_batch_size(IMPORT_BATCH_ROWS).build())
                .map_err(|e| Error::Arrow {
                    table: table.clone(),
                    detail: format!("{}: {e}", file.display()),
                })?,
        ),
        ImportFormat::Csv => {
            let mut f = open()?;
            let csv = arrow_csv::reader::Format::default().with_header(true);
            let (schema, _) = csv
                .infer_schema(BufReader::new(&mut f), Some(CSV_INFER_ROWS))
                .map_err(arrow)?;
            f.rewind().map_err(|e| Error::io(file, e))?;
            Box::new(
                arrow_csv::ReaderBuilder::new(Arc::new(schema))
                    .with_format(csv)
                    .with_batch_size(IMPORT_BATCH_ROWS)
                    .build(BufReader::new(f))
                    .map_err(arrow)?,
            )
        }
    };
    let source: SchemaRef = reader.schema();
    let mut fields = Vec::new();
    for f in source.fields() {
        let stored = stored_type(f.data_type()).ok_or_else(|| Error::UnsupportedType {
            table: table.clone(),
            column: f.name().clone(),
            data_type: f.data_type().to_string(),
        })?;
        fields.push(Field::new(f.name(), stored, f.is_nullable()));
    }
    let schema = Arc::new(Schema::new(fields));
    let mut writer = TableWriter::create(dir, schema.clone(), options)?;
    let cast_options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let mut rows_before = 0u64;
    for batch in reader {
        let batch = batch.map_err(arrow)?;
        if format == ImportFormat::Csv {
            check_finite(&batch, rows_before, &table)?;
        }
        rows_before += batch.num_rows() as u64;
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        for (i, field) in schema.fields().iter().enumerate() {
            let column = batch.column(i);
            columns.push(if column.data_type() == field.data_type() {
                column.clone()
            } else {
                cast_with_options(column, field.data_type(), &cast_options).map_err(|e| {
                    Error::Arrow {
                        table: table.clone(),
                        detail: format!("column {}: {e}", field.name()),
                    }
                })?
            });
        }
        let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| Error::Arrow {
            table: table.clone(),
            detail: e.to_string(),
        })?;
        writer.write(&batch)?;
    }
    writer.finish()
}

/// CSV floats that parse to infinity or NaN (an overflow such as `1e999`, or the words `inf`
/// and `NaN`) are refused with their row and column: a text value that does not fit Float64 is
/// a mistake in the data, not a number to store.
fn check_finite(batch: &RecordBatch, rows_before: u64, table: &str) -> Result<()> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Float64Type};
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let bad = match column.data_type() {
            DataType::Float64 => column
                .as_primitive::<Float64Type>()
                .iter()
                .position(|v| v.is_some_and(|v| !v.is_finite())),
            DataType::Float32 => column
                .as_primitive::<Float32Type>()
                .iter()
                .position(|v| v.is_some_and(|v| !v.is_finite())),
            _ => None,
        };
        if let Some(at) = bad {
            return Err(Error::BadValue {
                table: table.to_string(),
                row: rows_before + at as u64 + 1,
                column: field.name().clone(),
                problem: format!(
                    "the value is not a finite number that fits Float64 (magnitude up to {:e}; \
                     an overflow such as 1e999, inf or NaN)",
                    f64::MAX
                ),
            });
        }
    }
    Ok(())
}
