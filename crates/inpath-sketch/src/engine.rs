//! The sketch as an inpath engine: framed input in chunks, `finish` emits the sketch and resets.

use crate::hll::Estimator;
use crate::sketch::{ItemKind, Sketch, ValueBatcher};
use crate::{Error, Params, Result};
use inpath_core::{ColumnRef, CsvSpec, Deframer, Engine, Framing, Lane, RecordSink};

/// Items per lane below which [`SketchEngine::update_on_lanes`] takes fewer lanes: 2^18 items
/// take ~2 ms to sketch, well over a lane's thread and state (~0.7 MiB at the defaults).
pub const LANE_MIN_ITEMS: usize = 1 << 18;

/// Feeds framed input into a [`Sketch`]. Implements [`Engine`] (its output is the finished
/// sketch) and [`Lane`] (lanes merge exactly, so results never depend on the thread count).
#[derive(Debug)]
pub struct SketchEngine {
    sketch: Sketch,
    deframer: Deframer,
    batcher: ValueBatcher,
    /// The selected CSV column's name, kept when the input closes (which resets the header).
    column: Option<String>,
}

impl SketchEngine {
    /// An engine for `kind` items cut by `framing`: `u32` needs `Fixed { width: 4 }`, `u64`
    /// `Fixed { width: 8 }`, byte values `Lines` or a CSV selection of exactly one column.
    pub fn new(params: Params, kind: ItemKind, framing: Framing) -> Result<Self> {
        let fits = match (&kind, &framing) {
            (ItemKind::U32, Framing::Fixed { width: 4 }) => true,
            (ItemKind::U64, Framing::Fixed { width: 8 }) => true,
            (ItemKind::Bytes, Framing::Lines) => true,
            (ItemKind::Bytes, Framing::Csv(spec)) => spec.columns.len() == 1,
            _ => false,
        };
        if !fits {
            return Err(Error::parameter(
                "input framing",
                format!("{framing:?} for {} items", kind.name()),
                "u32 items as 4-byte records, u64 as 8-byte records, byte values as lines or one CSV column",
            ));
        }
        Ok(SketchEngine {
            sketch: Sketch::new(params, kind)?,
            deframer: Deframer::new(framing)?,
            batcher: ValueBatcher::new(),
            column: None,
        })
    }

    /// An engine for little-endian `u32` items.
    pub fn u32(params: Params) -> Result<Self> {
        Self::new(params, ItemKind::U32, Framing::Fixed { width: 4 })
    }

    /// An engine for little-endian `u64` items.
    pub fn u64(params: Params) -> Result<Self> {
        Self::new(params, ItemKind::U64, Framing::Fixed { width: 8 })
    }

    /// An engine for text lines.
    pub fn lines(params: Params) -> Result<Self> {
        Self::new(params, ItemKind::Bytes, Framing::Lines)
    }

    /// An engine for one CSV column.
    pub fn csv(params: Params, column: ColumnRef, delimiter: u8, has_header: bool) -> Result<Self> {
        let spec = CsvSpec {
            columns: vec![column],
            delimiter,
            has_header,
        };
        Self::new(params, ItemKind::Bytes, Framing::Csv(spec))
    }

    /// The sketch built so far (values still waiting in a batch are not in it yet).
    pub fn sketch(&self) -> &Sketch {
        &self.sketch
    }

    /// Test hook: this engine's sketch, the sketches `finish` starts afresh and the lanes
    /// `fork` makes run the kernel at `level` (see [`Sketch::set_kernel_level`]).
    #[doc(hidden)]
    pub fn set_kernel_level(&mut self, level: Option<crate::arch::Level>) {
        self.sketch.set_kernel_level(level);
    }

    /// Adds little-endian items of `sketch`'s kind (`u32` or `u64`; `items` whole items) on up
    /// to `lanes` lanes through the shared lane driver ([`inpath_core::run_slice`]: contiguous
    /// parts on their own threads, merged), taking fewer lanes for inputs under
    /// [`LANE_MIN_ITEMS`] items a lane. The state is the same for any lane count (merge equals
    /// union). On an error `sketch` keeps what it held.
    pub fn update_on_lanes(sketch: &mut Sketch, items: &[u8], lanes: usize) -> Result<()> {
        let (framing, width) = match sketch.kind() {
            ItemKind::U32 => (Framing::Fixed { width: 4 }, 4),
            ItemKind::U64 => (Framing::Fixed { width: 8 }, 8),
            ItemKind::Bytes => {
                return Err(Error::parameter(
                    "items",
                    "fixed-width items",
                    "a u32 or u64 sketch (byte values go through update_values)",
                ))
            }
        };
        if !items.len().is_multiple_of(width) {
            return Err(Error::parameter(
                "items",
                format!("{} bytes", items.len()),
                format!("whole {width}-byte items"),
            ));
        }
        let lanes = lanes.clamp(1, (items.len() / width / LANE_MIN_ITEMS).max(1));
        let empty = sketch.empty_like();
        let mut engine = SketchEngine {
            sketch: std::mem::replace(sketch, empty),
            deframer: Deframer::new(framing)?,
            batcher: ValueBatcher::new(),
            column: None,
        };
        let result = inpath_core::run_slice(&mut engine, items, lanes);
        *sketch = engine.sketch;
        result
    }

    /// Ends the current input like [`Lane::close_input`] and returns the sketch, consuming the
    /// engine.
    pub fn into_sketch(mut self) -> Result<Sketch> {
        self.close_input()?;
        Ok(self.sketch)
    }

    /// The name of the selected CSV column, once the header was read.
    pub fn column_name(&self) -> Option<String> {
        self.deframer
            .selected_names()
            .and_then(|names| names.into_iter().next())
            .or_else(|| self.column.clone())
    }

    /// Summary shortcut for the current state.
    pub fn summary(&self, estimator: Estimator) -> crate::Summary {
        self.sketch.summary(estimator)
    }

    fn sink(&mut self) -> (&mut Deframer, Sink<'_>) {
        (
            &mut self.deframer,
            Sink {
                sketch: &mut self.sketch,
                batcher: &mut self.batcher,
            },
        )
    }
}

struct Sink<'a> {
    sketch: &'a mut Sketch,
    batcher: &'a mut ValueBatcher,
}

impl RecordSink for Sink<'_> {
    fn fixed(&mut self, records: &[u8]) -> Result<()> {
        match self.sketch.kind() {
            ItemKind::U32 => self.sketch.update_u32_le(records),
            ItemKind::U64 => self.sketch.update_u64_le(records),
            ItemKind::Bytes => unreachable!("byte values are never fixed-width records"),
        }
    }

    fn value(&mut self, _column: usize, value: &[u8]) -> Result<()> {
        self.batcher.push(self.sketch, value)
    }
}

impl Engine for SketchEngine {
    type Output = Sketch;

    fn update(&mut self, chunk: &[u8]) -> Result<()> {
        let (deframer, mut sink) = self.sink();
        deframer.feed(chunk, &mut sink)
    }

    fn finish(&mut self) -> Result<Sketch> {
        let closed = self.close_input();
        let fresh = self.sketch.empty_like();
        let sketch = std::mem::replace(&mut self.sketch, fresh);
        closed.map(|_| sketch)
    }
}

impl Lane for SketchEngine {
    fn framing(&self) -> &Framing {
        self.deframer.framing()
    }

    fn fork(&self) -> Self {
        SketchEngine {
            sketch: self.sketch.empty_like(),
            deframer: Deframer::new(self.deframer.framing().clone())
                .expect("framing was validated when this engine was made"),
            batcher: ValueBatcher::new(),
            column: self.column.clone(),
        }
    }

    fn close_input(&mut self) -> Result<()> {
        if let Some(name) = self
            .deframer
            .selected_names()
            .and_then(|n| n.into_iter().next())
        {
            self.column = Some(name);
        }
        let (deframer, mut sink) = self.sink();
        let closed = deframer.close(&mut sink);
        self.batcher.flush(&mut self.sketch)?;
        closed
    }

    fn merge(&mut self, other: &Self) -> Result<()> {
        if other.deframer.pending() > 0 || other.batcher.pending() > 0 {
            return Err(Error::State(
                "cannot merge a sketch lane that holds part of a record; close its input first"
                    .into(),
            ));
        }
        self.sketch.merge(&other.sketch)
    }
}
