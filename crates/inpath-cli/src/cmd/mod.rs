//! One module per engine command.
pub mod demo;
pub mod sketch;
pub mod wire;
