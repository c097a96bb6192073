//! What the protocol modules share: the result of one [`Step`] and the line length limit. A
//! leaf: `text` and `meta` both import it, and `meta` needs nothing from `text`.

/// Longest request line accepted (a get with many keys fits); longer ones close the connection.
pub const MAX_LINE: usize = 64 * 1024;

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
}
