//! Transforms: the hook for engines that *change* the bytes in transit (the `seal` engine:
//! compress then encrypt in pages on one relay, decrypt then decompress on another, so two
//! unmodified endpoints talk over a protected link).
//!
//! # Status
//! The hook is wired into the relay's data path ([`crate::ServerConfig::transforms`], one per
//! direction) and tested with a test-only transform, but **no transform ships yet**: `--seal` /
//! `--unseal` need the `seal` engine, which lives on another branch. Adding it is:
//! 1. a `SealTransform` / `UnsealTransform` implementing [`Transform`] over the seal engine's
//!    streaming codec (pages in, sealed records out; `finish` flushes the last partial page);
//! 2. a [`TransformFactory`] for each, parsed from `--seal KEYFILE[:options]`;
//! 3. two CLI flags in `inpath wire relay` that push `(Direction::C2s, seal)` and
//!    `(Direction::S2c, unseal)` (or the reverse on the far relay) onto `transforms`.
//!
//! # Calling rules
//! - [`Transform::push`] gets every byte read from one side, in order, in chunks of any size,
//!   and appends what should be written onward to `out` (possibly nothing yet: a page is
//!   still filling).
//! - [`Transform::finish`] is called once when that side closes cleanly (before the half-close
//!   is passed on) and appends the rest. It is not called when the connection is cut (reset,
//!   shutdown): the far side then sees a reset, never a short but valid-looking stream.
//! - An error from either ends the connection with outcome `transform_error` (for example a
//!   sealed record that fails authentication).
//! - Taps see the clear side: the input of a transform whose [`Transform::taps_see_output`] is
//!   false (seal), its output otherwise (unseal).
//! - Memory: `out` may hold one page more than the input chunk; transforms must not buffer
//!   unboundedly.

use std::sync::Arc;

/// A byte transform on one direction of a relayed connection.
pub trait Transform: Send {
    /// Transforms the next chunk; appends the output to `out`.
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String>;
    /// The input ended cleanly: appends whatever is still held back.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), String>;
    /// Whether taps on this direction see the output (unsealing) rather than the input
    /// (sealing).
    fn taps_see_output(&self) -> bool;
}

/// Makes one [`Transform`] per connection.
pub trait TransformFactory: Send + Sync {
    /// A name for logs (`seal`, `unseal`).
    fn name(&self) -> &str;
    /// A fresh transform.
    fn make(&self) -> Box<dyn Transform>;
}

/// Shorthand for a shared factory.
pub type SharedTransform = Arc<dyn TransformFactory>;
