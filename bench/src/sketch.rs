//! Sketch engine timings (being written).
use crate::timing::Measurement;

/// Arguments of `inpath-bench sketch`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the sketch timings.
pub fn run(_args: Args) -> anyhow::Result<Vec<Measurement>> {
    Ok(Vec::new())
}
