//! Import of Parquet and CSV files into column tables (schema inferred by DataFusion, types
//! narrowed to what the format stores), and the output of query results as a text table,
//! CSV, JSON or Parquet.

use crate::error::{Error, Result};
use crate::format::LogicalType;
use crate::sql::{sql_error, QueryResult};
use crate::writer::{TableSummary, TableWriter, WriteOptions};
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use std::path::Path;
use std::sync::Arc;

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
pub fn import_file(
    file: &Path,
    dir: &Path,
    options: WriteOptions,
    threads: usize,
) -> Result<TableSummary> {
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.clamp(1, 1024))
        .enable_all()
        .build()
        .map_err(|e| Error::io(file, e))?;
    let config = SessionConfig::new().with_target_partitions(1);
    let ctx = SessionContext::new_with_config(config);
    let path = file.to_string_lossy().into_owned();
    runtime.block_on(async {
        let frame = match format {
            ImportFormat::Parquet => ctx.read_parquet(path, ParquetReadOptions::default()).await,
            ImportFormat::Csv => {
                ctx.read_csv(path, CsvReadOptions::new().has_header(true))
                    .await
            }
        }
        .map_err(sql_error)?;
        let source: SchemaRef = Arc::new(frame.schema().as_arrow().clone());
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
        let mut stream = frame.execute_stream().await.map_err(sql_error)?;
        let cast_options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(sql_error)?;
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
            let batch =
                RecordBatch::try_new(schema.clone(), columns).map_err(|e| Error::Arrow {
                    table: table.clone(),
                    detail: e.to_string(),
                })?;
            writer.write(&batch)?;
        }
        writer.finish()
    })
}

/// How a result is written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultFormat {
    /// An aligned text table with borders.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of objects, one per row.
    Json,
    /// Apache Parquet.
    Parquet,
    /// An Arrow IPC stream (what `pyarrow.ipc.open_stream` reads).
    ArrowIpc,
}

impl QueryResult {
    /// The column names joined by `separator`.
    fn column_names(&self, separator: &str) -> String {
        let names: Vec<&str> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        names.join(separator)
    }

    /// The result in `format`, as bytes.
    pub fn encode(&self, format: ResultFormat) -> Result<Vec<u8>> {
        let arrow = |e: datafusion::arrow::error::ArrowError| Error::Sql {
            detail: e.to_string(),
        };
        let mut out = Vec::new();
        match format {
            ResultFormat::Table => {
                let text = datafusion::arrow::util::pretty::pretty_format_batches(&self.batches)
                    .map_err(arrow)?;
                let text = if self.batches.is_empty() {
                    format!("{} (no rows)", self.column_names(" | "))
                } else {
                    text.to_string()
                };
                out.extend_from_slice(text.as_bytes());
                out.push(b'\n');
            }
            ResultFormat::Csv => {
                let mut w = datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                if self.batches.is_empty() {
                    drop(w);
                    out.extend_from_slice(self.column_names(",").as_bytes());
                    out.push(b'\n');
                } else {
                    for b in &self.batches {
                        w.write(b).map_err(arrow)?;
                    }
                }
            }
            ResultFormat::Json => {
                let mut w = datafusion::arrow::json::ArrayWriter::new(&mut out);
                for b in &self.batches {
                    w.write(b).map_err(arrow)?;
                }
                w.finish().map_err(arrow)?;
                if self.batches.is_empty() || out.is_empty() {
                    out = b"[]".to_vec();
                }
                out.push(b'\n');
            }
            ResultFormat::ArrowIpc => {
                let mut w =
                    datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, &self.schema)
                        .map_err(arrow)?;
                for b in &self.batches {
                    w.write(b).map_err(arrow)?;
                }
                w.finish().map_err(arrow)?;
            }
            ResultFormat::Parquet => {
                let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
                    &mut out,
                    self.schema.clone(),
                    None,
                )
                .map_err(|e| Error::Sql {
                    detail: e.to_string(),
                })?;
                for b in &self.batches {
                    w.write(b).map_err(|e| Error::Sql {
                        detail: e.to_string(),
                    })?;
                }
                w.close().map_err(|e| Error::Sql {
                    detail: e.to_string(),
                })?;
            }
        }
        Ok(out)
    }
}
