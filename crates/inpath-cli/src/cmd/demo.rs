//! `inpath demo`: every engine on built-in generated data.
use clap::Args;

/// Arguments of `inpath demo`.
#[derive(Args)]
pub struct DemoArgs {}

/// Runs the demo.
pub fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo: being written")
}
