//! What the protocol modules share: the result of one [`Step`] and the line length limit. A
//! leaf: `text` and `meta` both import it, and `meta` needs nothing from `text`.

/// Longest request line accepted (a get with many keys fits); longer ones close the connection.
pub const MAX_LINE: usize = 64 * 1024;

/// Reply bytes a multiget may gather before it pauses so the connection writes them out.
pub const OUT_HIGH: usize = 256 * 1024;

/// What one step did.
pub enum Step {
    /// Not a whole request yet: read more.
    NeedMore,
    /// Consumed this many bytes.
    Done(usize),
    /// Consumed this many bytes and the next `swallow` input bytes are to be discarded.
    Swallow(usize, usize),
    /// Close the connection after sending what is in the output.
    Close,
    /// Consumed nothing: a multiget's reply so far passed [`OUT_HIGH`]; write the output, then
    /// step the same input again (the keys already answered are skipped, see `step`).
    Pause,
}
