//! `inpath sketch`.
use clap::Args;

/// Arguments of `inpath sketch`.
#[derive(Args)]
pub struct SketchArgs {}

/// Runs the command.
pub fn run(_args: SketchArgs) -> anyhow::Result<()> {
    anyhow::bail!("sketch: being written")
}
