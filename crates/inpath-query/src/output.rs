//! The output of query results: a text table, CSV, JSON, Apache Parquet or an Arrow IPC
//! stream.

use crate::sql::QueryResult;
use inpath_table::{Error, Result};

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
