//! What the protocol modules share: the result of one [`Step`] and the line length limit. A
//! leaf: `text` and `meta` both import it, and `meta` needs nothing from `text`.

/// Longest request line held whole. A longer get/gets/gat/gats line is answered as it arrives
/// (its complete keys first, [`Step::Resume`]); any other longer line closes the connection.
pub const MAX_LINE: usize = 64 * 1024;

/// Reply bytes one step produces at most before it hands the rest of a multiget back
/// ([`Step::Resume`]): a connection's output stays bounded whatever the number of keys.
pub const OUT_CHUNK: usize = 256 * 1024;

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
    /// Part of a multiget was answered: `consumed` bytes are done, and the rest of the request
    /// continues after `prefix` (the command and its arguments, e.g. `gets `), which the caller
    /// writes into the last `prefix.len()` consumed bytes (never more than `consumed`) before
    /// the next step.
    Resume { consumed: usize, prefix: Vec<u8> },
}
