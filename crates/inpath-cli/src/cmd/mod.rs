//! One module per engine command.
pub mod corr;
pub mod demo;
pub mod sketch;
