//! inpath-net's suite: one test binary, a module per concern (CONTRIBUTING.md). Every
//! certificate is made here at run time; every socket is on loopback.

mod common;
mod http;
mod limit;
mod policy;
mod tls;
mod tokens;
