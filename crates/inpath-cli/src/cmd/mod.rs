//! One module per engine command.
pub mod cache;
pub mod codec;
pub mod corr;
pub mod demo;
pub mod query;
pub mod query_serve;
pub mod query_session;
pub mod seal;
pub mod sketch;
pub mod store;
pub mod tls;
pub mod wire;
