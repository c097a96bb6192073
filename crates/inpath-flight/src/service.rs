//! The Flight SQL service: statements, prepared statements (without parameters), the catalog
//! calls, SqlInfo, and the actions `inpath.splits` and `inpath.status`.
//!
//! Tickets and prepared-statement handles hold the statement's text itself: the server keeps
//! nothing between a client's `GetFlightInfo` and its `DoGet`, so any number of clients (or a
//! Spark task retried on another executor) can fetch a ticket again, and a client that never
//! comes back leaves nothing behind.
//!
//! Each statement runs on a thread of its own driving the session's runtime; its batches pass
//! to the gRPC stream through a channel of two batches, so a slow client slows the statement
//! rather than letting it gather its result in memory, and a client that goes away (the
//! stream dropped) stops it: the next send fails, the plan is dropped with its operators and
//! memory.

use crate::splits;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt,
    SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest,
    HandshakeResponse, IpcMessage, SchemaAsIpc, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, StreamExt};
use inpath_query::SqlSession;
use prost::Message;
use serde::Deserialize;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::{Request, Response, Status, Streaming};

type DoGetStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::FlightData, Status>> + Send>>;
type ActionStream = Pin<Box<dyn Stream<Item = Result<arrow_flight::Result, Status>> + Send>>;

/// The action that splits a table into page ranges ([`splits`]).
pub const SPLITS_ACTION: &str = "inpath.splits";
/// The action that reports what the server is doing (JSON).
pub const STATUS_ACTION: &str = "inpath.status";

/// What the server has done, for `inpath.status`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Statements streaming now.
    pub running: AtomicU64,
    /// Statements started.
    pub started: AtomicU64,
    /// Statements that ended because their client went away.
    pub abandoned: AtomicU64,
    /// Statements that failed.
    pub failed: AtomicU64,
    /// Rows sent.
    pub rows: AtomicU64,
    /// Batches sent.
    pub batches: AtomicU64,
    /// Bytes of Arrow IPC sent (the FlightData messages' headers and bodies).
    pub bytes: AtomicU64,
}

/// The Flight SQL service over one session.
pub struct FlightSql {
    session: Arc<SqlSession>,
    slots: Arc<Semaphore>,
    max_statements: usize,
    queue_wait: Duration,
    counters: Arc<Counters>,
    sql_info: Arc<SqlInfoData>,
    catalog: String,
    schema: String,
}

impl FlightSql {
    /// A service over `session` running at most `max_statements` statements at once; a
    /// statement beyond them waits up to `queue_wait` for one to end, then fails with
    /// `RESOURCE_EXHAUSTED`.
    pub fn new(session: Arc<SqlSession>, max_statements: usize, queue_wait: Duration) -> Self {
        let mut info = SqlInfoDataBuilder::new();
        info.append(SqlInfo::FlightSqlServerName, "inpath");
        info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        info.append(SqlInfo::FlightSqlServerArrowVersion, "59");
        info.append(SqlInfo::FlightSqlServerReadOnly, true);
        info.append(SqlInfo::FlightSqlServerSql, true);
        info.append(SqlInfo::FlightSqlServerSubstrait, false);
        info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        info.append(SqlInfo::FlightSqlServerCancel, false);
        info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        let sql_info = Arc::new(info.build().expect("the SqlInfo values have their types"));
        let options = session.context().state().config().options().catalog.clone();
        FlightSql {
            session,
            slots: Arc::new(Semaphore::new(max_statements)),
            max_statements,
            queue_wait,
            counters: Arc::new(Counters::default()),
            sql_info,
            catalog: options.default_catalog,
            schema: options.default_schema,
        }
    }

    /// The counters.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Runs `f` with the session on a thread of its own (the session's runtime cannot be
    /// entered from the server's).
    async fn on_session<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SqlSession) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let (tx, rx) = oneshot::channel();
        let session = self.session.clone();
        std::thread::Builder::new()
            .name("inpath-flight".into())
            .spawn(move || {
                let _ = tx.send(f(&session));
            })
            .map_err(|e| Status::internal(format!("cannot start a thread: {e}")))?;
        rx.await
            .map_err(|_| Status::internal("the statement's thread ended without an answer"))
    }

    /// The result schema of a statement (as sent: dictionaries decoded).
    async fn schema_of(&self, sql: String) -> Result<SchemaRef, Status> {
        self.on_session(move |s| {
            s.block_on(s.plan_query(&sql))
                .map(|plan| plain_schema(&plan.schema()))
                .map_err(query_status)
        })
        .await?
    }

    /// A statement's FlightInfo: its schema and one endpoint whose ticket holds the text.
    async fn statement_info(
        &self,
        sql: String,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = self.schema_of(sql.clone()).await?;
        let ticket = TicketStatementQuery {
            statement_handle: sql.into_bytes().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Streams a statement's batches (see the module's notes).
    async fn stream(&self, sql: String) -> Result<Response<DoGetStream>, Status> {
        let permit =
            match tokio::time::timeout(self.queue_wait, self.slots.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => {
                    return Err(Status::resource_exhausted(format!(
                        "the server runs {} statements at once (--max-statements) and none ended \
                     within {} s; try again later",
                        self.max_statements,
                        self.queue_wait.as_secs()
                    )))
                }
            };
        let (schema_tx, schema_rx) = oneshot::channel::<Result<SchemaRef, Status>>();
        let (tx, rx) = mpsc::channel::<Result<RecordBatch, FlightError>>(2);
        let session = self.session.clone();
        let counters = self.counters.clone();
        std::thread::Builder::new()
            .name("inpath-flight-statement".into())
            .spawn(move || {
                let _permit = permit;
                counters.started.fetch_add(1, Ordering::Relaxed);
                counters.running.fetch_add(1, Ordering::Relaxed);
                let c = counters.clone();
                let _running = Guard(move || {
                    c.running.fetch_sub(1, Ordering::Relaxed);
                });
                session.block_on(async {
                    let plan = match session.plan_query(&sql).await {
                        Ok(p) => p,
                        Err(e) => {
                            counters.failed.fetch_add(1, Ordering::Relaxed);
                            let _ = schema_tx.send(Err(query_status(e)));
                            return;
                        }
                    };
                    let schema = plain_schema(&plan.schema());
                    let mut batches = match session.execute_stream(plan) {
                        Ok(s) => s,
                        Err(e) => {
                            counters.failed.fetch_add(1, Ordering::Relaxed);
                            let _ = schema_tx.send(Err(query_status(e)));
                            return;
                        }
                    };
                    if schema_tx.send(Ok(schema.clone())).is_err() {
                        counters.abandoned.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    while let Some(batch) = batches.next().await {
                        let item = match batch {
                            Ok(b) => plain_batch(b, &schema),
                            Err(e) => Err(FlightError::Tonic(Box::new(query_status(
                                inpath_query::sql::sql_error(e),
                            )))),
                        };
                        let failed = item.is_err();
                        let rows = item.as_ref().map_or(0, |b| b.num_rows() as u64);
                        if tx.send(item).await.is_err() {
                            counters.abandoned.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        if failed {
                            counters.failed.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        counters.rows.fetch_add(rows, Ordering::Relaxed);
                        counters.batches.fetch_add(1, Ordering::Relaxed);
                    }
                });
            })
            .map_err(|e| Status::internal(format!("cannot start a thread: {e}")))?;
        let schema = schema_rx
            .await
            .map_err(|_| Status::internal("the statement's thread ended without a schema"))??;
        let batches =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        let sent = self.counters.clone();
        let data = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map(move |d| {
                if let Ok(d) = &d {
                    let n = d.data_header.len() + d.data_body.len();
                    sent.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                d.map_err(Status::from)
            });
        Ok(Response::new(Box::pin(data)))
    }

    fn sql_of(handle: &[u8]) -> Result<String, Status> {
        String::from_utf8(handle.to_vec())
            .map_err(|_| Status::invalid_argument("the statement handle is not UTF-8 text"))
    }

    fn tables_with_schemas(&self) -> Vec<(String, SchemaRef)> {
        self.session
            .tables()
            .iter()
            .filter_map(|name| {
                let schema = match self.session.reader(name) {
                    Some(r) => r.schema(),
                    None => return None,
                };
                Some((name.clone(), plain_schema(&schema)))
            })
            .collect()
    }
}

/// Runs its closure when dropped.
struct Guard<F: FnMut()>(F);

impl<F: FnMut()> Drop for Guard<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// A query error as a status: the statement's fault (`INVALID_ARGUMENT`) or the server's
/// (`INTERNAL`), with the message.
fn query_status(e: inpath_query::Error) -> Status {
    match e {
        inpath_query::Error::Sql { detail } => Status::invalid_argument(detail),
        other => Status::internal(other.to_string()),
    }
}

/// The schema with dictionary-coded columns as their values' type: what clients get (Spark's
/// Arrow columns and many drivers read no dictionaries).
pub fn plain_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, values) => {
                f.as_ref().clone().with_data_type((**values).clone())
            }
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

fn plain_batch(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, FlightError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c.clone())
            } else {
                datafusion::arrow::compute::cast(c, f.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(FlightError::Arrow)?;
    RecordBatch::try_new(schema.clone(), columns).map_err(FlightError::Arrow)
}

/// One batch as a DoGet stream.
fn one_batch(batch: RecordBatch) -> DoGetStream {
    let schema = batch.schema();
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map(|d| d.map_err(Status::from));
    Box::pin(data)
}

/// A metadata command's FlightInfo: its schema and the command itself as the ticket.
fn command_info(
    command: impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(command.as_any().encode_to_vec()));
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(endpoint)
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

fn arrow_status(e: datafusion::arrow::error::ArrowError) -> Status {
    Status::internal(e.to_string())
}

/// The body of `inpath.splits`.
#[derive(Deserialize)]
struct SplitsRequest {
    table: String,
    #[serde(default = "one")]
    parts: usize,
}

fn one() -> usize {
    1
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        // The credential was checked before this call (crate::auth); a basic one's password
        // is the token, handed back as the bearer token the client then sends on every call.
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::auth::token_of);
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(futures::stream::once(async { Ok(reply) })));
        if let Some(token) = token {
            if let Ok(v) = format!("Bearer {token}").parse() {
                response.metadata_mut().insert("authorization", v);
            }
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.statement_info(query.query, request.into_inner()).await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let sql = Self::sql_of(&query.prepared_statement_handle)?;
        self.statement_info(sql, request.into_inner()).await
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.stream(Self::sql_of(&ticket.statement_handle)?).await
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.stream(Self::sql_of(&query.prepared_statement_handle)?)
            .await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let schema = self.schema_of(query.query.clone()).await?;
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &IpcWriteOptions::default())
            .try_into()
            .map_err(arrow_status)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: query.query.into_bytes().into(),
            dataset_schema,
            parameter_schema: Default::default(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // The handle is the statement's text: nothing is held to free.
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        _query: CommandPreparedStatementQuery,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        Err(Status::unimplemented(
            "inpath query serve takes no statement parameters: write the values into the \
             statement",
        ))
    }

    async fn do_put_statement_update(
        &self,
        _ticket: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(Status::permission_denied(
            "inpath query serve is read-only: it runs queries, never statements that change \
             tables or files",
        ))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(&self.catalog);
        Ok(Response::new(one_batch(
            builder.build().map_err(Status::from)?,
        )))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append(&self.catalog, &self.schema);
        Ok(Response::new(one_batch(
            builder.build().map_err(Status::from)?,
        )))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        for (name, schema) in self.tables_with_schemas() {
            builder
                .append(&self.catalog, &self.schema, &name, "TABLE", &schema)
                .map_err(Status::from)?;
        }
        Ok(Response::new(one_batch(
            builder.build().map_err(Status::from)?,
        )))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let mut builder = query.into_builder();
        builder.append("TABLE");
        Ok(Response::new(one_batch(
            builder.build().map_err(Status::from)?,
        )))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        command_info(query, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let batch = query
            .into_builder(&self.sql_info)
            .build()
            .map_err(Status::from)?;
        Ok(Response::new(one_batch(batch)))
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(Status::unimplemented(format!(
            "inpath query serve does not serve {} (it serves statements, prepared statements \
             without parameters, catalogs, schemas, tables, table types and SqlInfo)",
            message.type_url
        )))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![
            Ok(ActionType {
                r#type: SPLITS_ACTION.into(),
                description: "A table's page-range splits: body {\"table\": NAME, \"parts\": N}; \
                              answers JSON (docs/FORMATS.md)"
                    .into(),
            }),
            Ok(ActionType {
                r#type: STATUS_ACTION.into(),
                description: "Statements running and sent, as JSON".into(),
            }),
        ])
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        let body: Vec<u8> = match action.r#type.as_str() {
            SPLITS_ACTION => {
                let req: SplitsRequest = serde_json::from_slice(&action.body).map_err(|e| {
                    Status::invalid_argument(format!(
                        "{SPLITS_ACTION}: the body must be JSON {{\"table\": NAME, \"parts\": N}}: {e}"
                    ))
                })?;
                let reader = self.session.reader(&req.table).ok_or_else(|| {
                    Status::not_found(format!(
                        "table {:?} is not on this server (it holds: {})",
                        req.table,
                        self.session.tables().join(", ")
                    ))
                })?;
                let splits = splits::splits(reader, req.parts)
                    .map_err(|e| Status::invalid_argument(format!("{SPLITS_ACTION}: {e}")))?;
                serde_json::to_vec(&splits).map_err(|e| Status::internal(e.to_string()))?
            }
            STATUS_ACTION => {
                let c = &self.counters;
                serde_json::to_vec(&serde_json::json!({
                    "running": c.running.load(Ordering::Relaxed),
                    "started": c.started.load(Ordering::Relaxed),
                    "abandoned": c.abandoned.load(Ordering::Relaxed),
                    "failed": c.failed.load(Ordering::Relaxed),
                    "rows": c.rows.load(Ordering::Relaxed),
                    "batches": c.batches.load(Ordering::Relaxed),
                    "bytes": c.bytes.load(Ordering::Relaxed),
                    "max_statements": self.max_statements,
                    "tables": self.session.tables(),
                }))
                .map_err(|e| Status::internal(e.to_string()))?
            }
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown action {other:?}: the Flight SQL actions, {SPLITS_ACTION} and \
                     {STATUS_ACTION}"
                )))
            }
        };
        let result = arrow_flight::Result { body: body.into() };
        let stream: ActionStream = Box::pin(futures::stream::once(async { Ok(result) }));
        Ok(Response::new(stream))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
