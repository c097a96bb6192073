//! SQL over column tables: Apache DataFusion as the host engine, with the scan of
//! [`crate::scan`] as its table provider and, with offload, the rule of [`crate::rule`].
//!
//! [`SqlSession`] registers every table of a directory under its directory name and runs
//! statements on its own thread pool; [`ScanStats`] counts pages pruned, unselected and read.
//!
//! One deliberate departure from DataFusion's defaults: `avg` over a decimal column returns a
//! double computed from the exact values (as DuckDB does), not a decimal truncated to four
//! more digits, so averages agree with DuckDB to ~1e-15 relative (see [`AvgDecimalAsDouble`]).

use crate::rule::{Decision, DeviceExec, Limits, OffloadRule};
use crate::scan::{ColumnScanExec, ColumnTable, ScanCounters, ScanStats};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::expr_rewriter::FunctionRewrite;
use datafusion::logical_expr::registry::FunctionRegistry;
use datafusion::logical_expr::{cast, Expr, ExprSchemable};
use datafusion::prelude::{SessionConfig, SessionContext};
use inpath_offload::{Device, DeviceStats, LocalDevice, ProcessDevice, TaskGraph};
use inpath_seal::KeyRing;
use inpath_table::error::{Error, Result};
use inpath_table::reader::open_table_dirs;
use std::path::Path;
use std::sync::Arc;

type DfResult<T> = datafusion::common::Result<T>;

/// `avg(x)` over a decimal `x` becomes `avg(CAST(x AS DOUBLE))`: DuckDB's result type, and
/// within ~1e-15 relative of the exact mean, where DataFusion's decimal average truncates to
/// the input's scale + 4 (an error near 1e-8 relative on TPC-H Q1).
#[derive(Debug)]
pub struct AvgDecimalAsDouble;

impl FunctionRewrite for AvgDecimalAsDouble {
    fn name(&self) -> &str {
        "avg_decimal_as_double"
    }

    fn rewrite(
        &self,
        expr: Expr,
        schema: &DFSchema,
        _config: &ConfigOptions,
    ) -> DfResult<Transformed<Expr>> {
        let Expr::AggregateFunction(AggregateFunction { func, mut params }) = expr else {
            return Ok(Transformed::no(expr));
        };
        let decimal = func.name() == "avg"
            && params.args.len() == 1
            && matches!(
                params.args[0].get_type(schema),
                Ok(DataType::Decimal128(..) | DataType::Decimal256(..))
            );
        if !decimal {
            return Ok(Transformed::no(Expr::AggregateFunction(
                AggregateFunction { func, params },
            )));
        }
        let arg = params.args.remove(0);
        params.args.push(cast(arg, DataType::Float64));
        Ok(Transformed::yes(Expr::AggregateFunction(
            AggregateFunction { func, params },
        )))
    }
}

/// A SQL session over the column tables of a directory, with its own thread pool.
pub struct SqlSession {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    counters: Arc<ScanCounters>,
    tables: Vec<String>,
    readers: Vec<(String, Arc<inpath_table::reader::TableReader>)>,
    offload: Option<Arc<OffloadRule>>,
}

/// How a session offloads work to a device (see [`crate::rule`] and `inpath-offload`).
#[derive(Clone, Debug, PartialEq)]
pub struct OffloadOptions {
    /// Device memory in bytes; `None`: 16 MiB per TPC-H SF 1 worth of rows (8.66 M rows over
    /// all tables: AQUOMAN's 16 GB per TB), at least 40 MiB, and at least 128 bytes per row
    /// of a page and 1 MiB more per lane (one decoded page and its registers).
    pub memory: Option<u64>,
    /// Where the device spills what outgrows its memory (none: the system's temporary
    /// directory); sealed as the tables are.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Device lanes; `None`: the session's threads.
    pub lanes: Option<usize>,
    /// Hardware limits the tasks must fit ([`Limits::LIFTED`] by default).
    pub limits: Limits,
    /// Run the device in a process of its own ([`ProcessDevice`]): the program and arguments
    /// that serve the same tables over a pipe (`inpath query serve-device DIR`), to which
    /// `--lanes N --memory BYTES` are added. `None`: the device runs in this process.
    pub device_command: Option<Vec<std::ffi::OsString>>,
}

impl Default for OffloadOptions {
    fn default() -> Self {
        OffloadOptions {
            memory: None,
            lanes: None,
            limits: Limits::LIFTED,
            device_command: None,
            spill_dir: None,
        }
    }
}

/// How the host engine (DataFusion) may use memory and disk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostOptions {
    /// The most memory the host's operators (hash tables, sorts, buffered rows) hold, in
    /// bytes; beyond it sorts and group-bys spill, and without offload, when a table is larger
    /// than a quarter of it, joins are sort-merge joins (which spill) instead of hash joins
    /// (whose build side cannot). `None`: half of the machine's memory.
    pub memory_limit: Option<u64>,
    /// Where the host spills (none: the system's temporary directory).
    pub spill_dir: Option<std::path::PathBuf>,
    /// Sort-merge joins (`Some(true)`) or hash joins (`Some(false)`) without offload; `None`:
    /// sort-merge when a table is larger than a quarter of the memory limit.
    pub sort_merge: Option<bool>,
}

impl HostOptions {
    /// The memory limit in effect: the one given, else half of the machine's memory (8 GiB
    /// where it cannot be read).
    pub fn limit(&self) -> u64 {
        self.memory_limit.unwrap_or_else(|| {
            std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|m| {
                    m.lines()
                        .find_map(|l| l.strip_prefix("MemTotal:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                })
                .map_or(8 << 30, |kib| kib * 1024 / 2)
        })
    }
}

/// Opens every table under `dir` (see [`inpath_table::table_dirs`]), each under its
/// directory's name.
fn open_tables(
    dir: &Path,
    keys: &KeyRing,
    counters: &Arc<ScanCounters>,
) -> Result<Vec<(String, ColumnTable)>> {
    Ok(open_table_dirs(dir, keys)?
        .into_iter()
        .map(|(name, reader)| (name, ColumnTable::new(reader, counters.clone())))
        .collect())
}

/// What offload did to one statement's plan.
#[derive(Clone, Debug)]
pub struct OffloadExplain {
    /// The physical plan, with `DeviceExec` where the device runs a task.
    pub plan: String,
    /// `full` (every table read runs on the device), `partial` or `host`.
    pub class: &'static str,
    /// The task graphs the device runs.
    pub graphs: Vec<TaskGraph>,
    /// Per aggregate the rule looked at: offloaded or why not.
    pub decisions: Vec<Decision>,
    /// Scans left on the host.
    pub host_scans: usize,
    /// Per graph: how the device would split it into key-range passes should the rows it
    /// holds outgrow the memory (none: it would decline, and the host run the plan).
    pub passes: Vec<Option<inpath_offload::PassesPlan>>,
    /// Per graph: the graph as the device runs it, its own rewrites applied (semi-join
    /// reductions; a device in its own process reports the graph as it was sent).
    pub device_graphs: Vec<TaskGraph>,
    /// The semi-join reductions the device adds, over all graphs: `nation restricts
    /// supplier.s_nationkey` (the small table whose filtered keys restrict a column of the
    /// table named second where it is read).
    pub reductions: Vec<String>,
}

impl std::fmt::Debug for SqlSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlSession")
            .field("tables", &self.tables)
            .finish()
    }
}

/// A statement's result: its schema (also when no row came back) and its batches.
#[derive(Clone, Debug)]
pub struct QueryResult {
    /// The columns.
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    /// Rows in the result.
    pub fn row_count(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

impl SqlSession {
    /// A context with `threads` partitions, the offload `rule` if any, and the host's memory
    /// bounded as `host` says; `sort_merge`: equi-joins as sort-merge joins, which spill.
    fn new_context(
        threads: usize,
        rule: Option<Arc<OffloadRule>>,
        host: &HostOptions,
        sort_merge: bool,
    ) -> Result<SessionContext> {
        if threads == 0 || threads > 1024 {
            return Err(Error::parameter("threads", threads, "1 to 1024"));
        }
        let mut config = SessionConfig::new()
            .with_target_partitions(threads)
            .with_information_schema(true);
        let limit = host.limit();
        // What a sort keeps back to merge its spilled runs: DataFusion's 10 MiB, or a
        // sixteenth of a smaller limit.
        let reserve = usize::try_from(limit / 16).unwrap_or(usize::MAX);
        let e = &mut config.options_mut().execution;
        e.sort_spill_reservation_bytes = e.sort_spill_reservation_bytes.min(reserve);
        if sort_merge {
            // Equi-joins by sort-merge joins, which spill; a hash join only for a build side
            // of at most a sixteenth of the memory (collected whole, about 32 bytes a row).
            let o = &mut config.options_mut().optimizer;
            o.prefer_hash_join = false;
            o.hash_join_single_partition_threshold =
                usize::try_from(limit / 16).unwrap_or(usize::MAX);
            o.hash_join_single_partition_threshold_rows =
                usize::try_from(limit / 16 / 32).unwrap_or(usize::MAX);
        }
        if limit < (1 << 20) {
            return Err(Error::parameter(
                "host memory limit",
                limit,
                "at least 1 MiB (1048576 bytes)",
            ));
        }
        let mut disk = datafusion::execution::disk_manager::DiskManagerBuilder::default();
        if let Some(dir) = &host.spill_dir {
            disk = disk.with_mode(
                datafusion::execution::disk_manager::DiskManagerMode::Directories(
                    vec![dir.clone()],
                ),
            );
        }
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            // The largest consumers are named when the pool runs out.
            .with_memory_pool(Arc::new(
                datafusion::execution::memory_pool::TrackConsumersPool::new(
                    datafusion::execution::memory_pool::FairSpillPool::new(
                        usize::try_from(limit).unwrap_or(usize::MAX),
                    ),
                    std::num::NonZeroUsize::new(5).expect("5 is not zero"),
                ),
            ))
            .with_disk_manager_builder(disk)
            .build_arc()
            .map_err(sql_error)?;
        let mut state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features();
        if let Some(rule) = rule {
            state = state.with_physical_optimizer_rule(rule);
        }
        let mut ctx = SessionContext::new_with_state(state.build());
        ctx.register_function_rewrite(Arc::new(AvgDecimalAsDouble))
            .map_err(sql_error)?;
        Ok(ctx)
    }

    fn runtime(threads: usize, dir: &Path) -> Result<tokio::runtime::Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("inpath-query")
            .enable_all()
            .build()
            .map_err(|e| Error::io(dir, e))
    }

    /// A session over the Parquet files in `dir` (each `NAME.parquet` as table NAME), with
    /// the same settings as [`open`](Self::open): DataFusion-on-Parquet, the benchmark's peer.
    /// Its [`stats`](Self::stats) stay zero.
    pub fn open_parquet(dir: &Path, threads: usize) -> Result<SqlSession> {
        let ctx = SqlSession::new_context(threads, None, &HostOptions::default(), false)?;
        let runtime = SqlSession::runtime(threads, dir)?;
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::NoTables {
                path: dir.to_path_buf(),
            });
        }
        let mut tables = Vec::new();
        for file in files {
            let name = file
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let path = file.to_string_lossy().into_owned();
            runtime
                .block_on(ctx.register_parquet(
                    &name,
                    &path,
                    datafusion::prelude::ParquetReadOptions::default(),
                ))
                .map_err(sql_error)?;
            tables.push(name);
        }
        Ok(SqlSession {
            ctx,
            runtime,
            counters: Arc::new(ScanCounters::default()),
            tables,
            readers: Vec::new(),
            offload: None,
        })
    }

    /// Opens every table under `dir` (see [`inpath_table::table_dirs`]), each registered under its
    /// directory's name, with `threads` worker threads and as many scan partitions.
    pub fn open(dir: &Path, keys: &KeyRing, threads: usize) -> Result<SqlSession> {
        SqlSession::open_with(dir, keys, threads, None)
    }

    /// As [`open`](Self::open); with `offload`, sub-plans the device can run are handed to a
    /// [`LocalDevice`] over the same tables.
    pub fn open_with(
        dir: &Path,
        keys: &KeyRing,
        threads: usize,
        offload: Option<OffloadOptions>,
    ) -> Result<SqlSession> {
        SqlSession::open_host(dir, keys, threads, offload, &HostOptions::default())
    }

    /// As [`open_with`](Self::open_with), the host's memory and spilling as `host` says.
    pub fn open_host(
        dir: &Path,
        keys: &KeyRing,
        threads: usize,
        offload: Option<OffloadOptions>,
        host: &HostOptions,
    ) -> Result<SqlSession> {
        let counters = Arc::new(ScanCounters::default());
        let opened = open_tables(dir, keys, &counters)?;
        let tables = opened.iter().map(|(name, _)| name.clone()).collect();
        let rule = match offload {
            None => None,
            Some(o) => {
                let rows: u64 = opened.iter().map(|(_, t)| t.reader().row_count()).sum();
                let lanes = o.lanes.unwrap_or(threads);
                let memory = o.memory.unwrap_or_else(|| {
                    let per_sf = inpath_offload::DEFAULT_MEMORY_PER_SF as f64;
                    let floor_sf = inpath_offload::DEFAULT_MEMORY_FLOOR;
                    // Each lane holds a decoded page of the task's columns (16 bytes per
                    // decimal) and its registers: 128 bytes a row and 1 MiB more.
                    let page_rows = opened
                        .iter()
                        .map(|(_, t)| t.reader().rows_per_page() as u64)
                        .max()
                        .unwrap_or(0);
                    let floor = (lanes as u64).saturating_mul(page_rows * 128 + (1 << 20));
                    (((rows as f64 / inpath_table::tpch::SF1_ROWS as f64) * per_sf) as u64)
                        .max(floor)
                        .max(floor_sf)
                });
                let device: Arc<dyn Device> = match o.device_command {
                    None => {
                        let readers = opened
                            .iter()
                            .map(|(name, t)| (name.clone(), t.reader.clone()))
                            .collect();
                        Arc::new(
                            LocalDevice::new(readers, lanes, memory)?
                                .with_spill_dir(o.spill_dir.clone()),
                        )
                    }
                    Some(argv) => {
                        let (program, args) = argv.split_first().ok_or_else(|| {
                            Error::parameter("device command", "empty", "a program to run")
                        })?;
                        let mut command = std::process::Command::new(program);
                        command.args(args);
                        command.arg("--lanes").arg(lanes.to_string());
                        command.arg("--memory").arg(memory.to_string());
                        if let Some(dir) = &o.spill_dir {
                            command.arg("--spill-dir").arg(dir);
                        }
                        Arc::new(ProcessDevice::spawn(command)?)
                    }
                };
                Some(Arc::new(OffloadRule::new(device, o.limits)))
            }
        };
        // Without offload, a table larger than a quarter of the host's memory makes joins
        // sort-merge joins (a hash join's build side cannot spill).
        let largest = opened
            .iter()
            .map(|(_, t)| t.reader().bytes())
            .max()
            .unwrap_or(0);
        let sort_merge = rule.is_none() && host.sort_merge.unwrap_or(largest > host.limit() / 4);
        let ctx = SqlSession::new_context(threads, rule.clone(), host, sort_merge)?;
        let readers = opened
            .iter()
            .map(|(name, t)| (name.clone(), t.reader.clone()))
            .collect();
        for (name, table) in opened {
            ctx.register_table(
                datafusion::common::TableReference::bare(name),
                Arc::new(table),
            )
            .map_err(sql_error)?;
        }
        let runtime = SqlSession::runtime(threads, dir)?;
        Ok(SqlSession {
            ctx,
            runtime,
            counters,
            tables,
            readers,
            offload: rule,
        })
    }

    /// What the offload device did since the session opened or the last
    /// [`reset_stats`](Self::reset_stats) (`None` without offload).
    pub fn device_stats(&self) -> Option<DeviceStats> {
        self.offload.as_ref().map(|r| r.device().stats())
    }

    /// Whether the device's lanes run in this process, their CPU time counted in its own
    /// (`None` without offload).
    pub fn device_in_host_process(&self) -> Option<bool> {
        self.offload.as_ref().map(|r| r.device().in_host_process())
    }

    /// The device's memory budget in bytes (`None` without offload).
    pub fn device_memory(&self) -> Option<u64> {
        self.offload.as_ref().map(|r| r.memory_budget())
    }

    /// Plans a statement and says what offload made of it: its class, the task graphs, and
    /// why each aggregate that stayed on the host did.
    pub fn explain_offload(&self, text: &str) -> Result<OffloadExplain> {
        let rule = self.offload.as_ref().ok_or_else(|| Error::Offload {
            detail: "the session was opened without offload".into(),
        })?;
        rule.take_decisions();
        let plan = self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            frame.create_physical_plan().await.map_err(sql_error)
        })?;
        let decisions = rule.take_decisions();
        let mut graphs = Vec::new();
        let mut host_scans = 0;
        let _ = plan.apply(|node| {
            if let Some(d) = node.downcast_ref::<DeviceExec>() {
                graphs.push(d.graph().clone());
            }
            if node.is::<ColumnScanExec>() {
                host_scans += 1;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let class = match (graphs.is_empty(), host_scans) {
            (true, _) => "host",
            (false, 0) => "full",
            (false, _) => "partial",
        };
        let text = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        let passes = graphs
            .iter()
            .map(|g| rule.device().passes_plan(g))
            .collect();
        let (mut device_graphs, mut reductions) = (Vec::new(), Vec::new());
        for g in &graphs {
            let d = rule.device().device_graph(g);
            device_graphs.push(d.graph);
            reductions.extend(d.reductions);
        }
        Ok(OffloadExplain {
            plan: text,
            class,
            graphs,
            decisions,
            host_scans,
            passes,
            device_graphs,
            reductions,
        })
    }

    /// The registered table names.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The column table registered as `name` (`None` for a Parquet session's tables).
    pub fn reader(&self, name: &str) -> Option<&inpath_table::reader::TableReader> {
        self.readers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.as_ref())
    }

    /// Runs `future` to completion on the session's threads (the calling thread waits):
    /// how a server drives [`plan_query`](Self::plan_query) and the stream of its plan from a
    /// thread of its own.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Plans a statement that only reads: a query (`SELECT`, `WITH`, `VALUES`, `EXPLAIN`),
    /// never DDL (`CREATE`, `DROP`), DML (`INSERT`, `COPY ... TO`) or `SET`, which are refused
    /// with the reason; what servers run for their clients. Its physical plan, whose
    /// [`schema`](datafusion::physical_plan::ExecutionPlan::schema) is the result's.
    ///
    /// The future is boxed: a crate that awaits an `async fn` compiles its state machine, and
    /// with it DataFusion's SQL planner, again (inpath-flight did: 907,000 lines of LLVM IR
    /// and a minute of the build; 122,000 with the box); behind the box it is compiled once,
    /// here.
    pub fn plan_query<'a>(&'a self, text: &'a str) -> PlanFuture<'a> {
        Box::pin(async move {
            let options = datafusion::execution::context::SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_dml(false)
                .with_allow_statements(false);
            let frame = self
                .ctx
                .sql_with_options(text, options)
                .await
                .map_err(sql_error)?;
            frame.create_physical_plan().await.map_err(sql_error)
        })
    }

    /// The batches of a plan from [`plan_query`](Self::plan_query) as they come, never
    /// gathered: dropping the stream stops the statement.
    pub fn execute_stream(
        &self,
        plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
    ) -> Result<datafusion::physical_plan::SendableRecordBatchStream> {
        datafusion::physical_plan::execute_stream(plan, self.ctx.task_ctx()).map_err(sql_error)
    }

    /// The DataFusion context (to register more tables or functions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Runs one statement to completion.
    pub fn sql(&self, text: &str) -> Result<QueryResult> {
        self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            // The physical plan's schema, not the DataFrame's: analyzer rewrites (avg of a
            // decimal as a double) change result types after the statement is parsed.
            let plan = frame.create_physical_plan().await.map_err(sql_error)?;
            let schema = plan.schema();
            let batches = datafusion::physical_plan::collect(plan, self.ctx.task_ctx())
                .await
                .map_err(sql_error)?;
            Ok(QueryResult { schema, batches })
        })
    }

    /// The physical plan of a statement, as text (`EXPLAIN`'s).
    pub fn explain(&self, text: &str) -> Result<String> {
        self.runtime.block_on(async {
            let frame = self.ctx.sql(text).await.map_err(sql_error)?;
            let plan = frame.create_physical_plan().await.map_err(sql_error)?;
            let text = datafusion::physical_plan::displayable(plan.as_ref())
                .indent(true)
                .to_string();
            Ok(text)
        })
    }

    /// What the scans did since the session opened or the last [`reset_stats`](Self::reset_stats).
    pub fn stats(&self) -> ScanStats {
        self.counters.snapshot()
    }

    /// Sets the scan counters to zero.
    pub fn reset_stats(&self) {
        self.counters.reset();
        if let Some(rule) = &self.offload {
            rule.device().reset_stats();
        }
    }
}

/// Runs `text` to completion on a DataFusion context of the caller's (plain DataFusion: none of
/// this crate's tables or rules unless the caller registered them), on `runtime`: the
/// reference that tests and benchmarks compare a session's answers with. Not `async`, so that
/// DataFusion's planner, behind `SessionContext::sql`'s future, is compiled here and not again
/// in every crate that calls it.
pub fn collect_sql(
    ctx: &SessionContext,
    runtime: &tokio::runtime::Runtime,
    text: &str,
) -> datafusion::error::Result<Vec<RecordBatch>> {
    runtime.block_on(async { ctx.sql(text).await?.collect().await })
}

/// What [`SqlSession::plan_query`] returns: the statement's physical plan, once planned.
pub type PlanFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>>>
            + Send
            + 'a,
    >,
>;

/// A DataFusion error as ours; errors from our own pages come back with their table, column
/// and page.
pub fn sql_error(e: DataFusionError) -> Error {
    match e.find_root() {
        DataFusionError::External(inner) => Error::Sql {
            detail: inner.to_string(),
        },
        _ => Error::Sql {
            detail: e.strip_backtrace(),
        },
    }
}
