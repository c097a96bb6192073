//! # inpath-flight
//!
//! inpath's query engine for clients on other machines: an Arrow Flight SQL server over an
//! [`inpath_query::SqlSession`] (with or without offload), built on the `arrow-flight`
//! crate's Flight SQL service and tonic's gRPC. Any Flight SQL client works: ADBC's
//! `adbc-driver-flightsql`, `pyarrow.flight`, the Flight SQL JDBC driver, and the Spark
//! connector under `connectors/spark/`.
//!
//! - [`service`]: statements and prepared statements (their results streamed as Arrow
//!   record batches, never gathered), the catalog calls, SqlInfo, and two actions:
//!   `inpath.splits` (a table's page ranges, [`splits`]) and `inpath.status`.
//! - [`auth`]: client certificates and tokens (`inpath-net`'s token files), checked on every
//!   call.
//! - [`conn`]: the accepted connections, plain or TLS (`inpath-net`'s configuration).
//!
//! Statements only read: DDL, DML (`COPY ... TO`, `INSERT`) and `SET` are refused. At most
//! `max_statements` run at once; a client that goes away stops its statement.
//!
//! ```no_run
//! use inpath_flight::{serve, ServeOptions};
//! use std::sync::Arc;
//!
//! let session = inpath_query::SqlSession::open("tables".as_ref(), &Default::default(), 2)?;
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! serve(Arc::new(session), listener, ServeOptions::default(), std::future::pending())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod conn;
pub mod service;
pub mod splits;

use arrow_flight::flight_service_server::FlightServiceServer;
use inpath_net::{Limiter, Role, ServerTls};
use inpath_query::SqlSession;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use auth::Auth;
pub use service::{Counters, FlightSql};

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener or the runtime.
    #[error("query serve: {0}")]
    Io(#[from] std::io::Error),
    /// gRPC's transport.
    #[error("query serve: gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// How the server runs.
#[derive(Clone)]
pub struct ServeOptions {
    /// Statements streaming at once (1 to 1024).
    pub max_statements: usize,
    /// How long a statement beyond them waits for one to end.
    pub queue_wait: Duration,
    /// TLS, if any.
    pub tls: Option<Arc<ServerTls>>,
    /// Who may call.
    pub auth: Auth,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_statements: 8,
            queue_wait: Duration::from_secs(60),
            tls: None,
            auth: Auth {
                tokens: None,
                certs: false,
                cert_role: Role::Read,
                limiter: Arc::new(Limiter::default()),
            },
        }
    }
}

/// Serves `session` over Flight SQL on `listener` until `shutdown` completes (then lets the
/// calls in flight finish). The gRPC side runs on two threads of its own; statements run on
/// the session's threads.
pub fn serve(
    session: Arc<SqlSession>,
    listener: std::net::TcpListener,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    // The session's own runtime must not be dropped inside this one's (tokio refuses): the
    // last reference is this one, dropped after the server's runtime ends.
    let keep = session.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("inpath-flight-io")
        .enable_all()
        .build()?;
    let served = runtime.block_on(async move {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let accepted = conn::accept(listener, options.tls.clone());
        let incoming = futures::stream::unfold(accepted, |mut rx| async move {
            rx.recv().await.map(|c| (c, rx))
        });
        let service = FlightSql::new(session, options.max_statements, options.queue_wait);
        let auth = options.auth.clone();
        let server = FlightServiceServer::new(service)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let svc =
            tonic::service::interceptor::InterceptedService::new(server, move |r| auth.check(r));
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .serve_with_incoming_shutdown(svc, incoming, shutdown)
            .await?;
        Ok(())
    });
    drop(runtime);
    drop(keep);
    served
}
