//! The stream a submitted graph answers through, and its cancellation.

use super::prepare::Prepared;
use super::stats::Counters;
use crate::graph::TableTask;
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use inpath_table::error::{Error, Result};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

/// A plan whose builds are held against the device's memory until the last lane is done.
pub(super) struct PlanHold {
    pub(super) plan: Prepared,
    pub(super) counters: Arc<Counters>,
    pub(super) held: u64,
}

impl Drop for PlanHold {
    fn drop(&mut self) {
        self.counters.release(self.held);
    }
}

/// Rows coming back from a device, with a way to stop it: dropping the stream cancels the
/// graph (lanes stop at their next page).
pub struct DeviceStream {
    pub(super) rows: Receiver<Result<RecordBatch>>,
    pub(crate) cancel: Arc<AtomicBool>,
    /// Tells a device elsewhere (another process) to stop, once.
    pub(super) notify: Option<Box<dyn Fn() + Send + Sync>>,
    /// The device sent its last item: nothing is left to cancel.
    pub(super) done: bool,
}

impl DeviceStream {
    /// A stream of what arrives on `rows`; `notify` runs once when it is cancelled (or dropped
    /// before its end), to stop a device that is not in this process.
    pub(crate) fn new(
        rows: Receiver<Result<RecordBatch>>,
        notify: Option<Box<dyn Fn() + Send + Sync>>,
    ) -> DeviceStream {
        DeviceStream {
            rows,
            cancel: Arc::new(AtomicBool::new(false)),
            notify,
            done: false,
        }
    }

    /// Stops the graph; lanes finish their current page and exit.
    pub fn cancel(&self) {
        let first = !self.cancel.swap(true, Ordering::Relaxed);
        if let (true, Some(notify)) = (first, &self.notify) {
            notify();
        }
    }
}

impl Iterator for DeviceStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.rows.recv().ok();
        self.done |= item.is_none();
        item
    }
}

impl Drop for DeviceStream {
    fn drop(&mut self) {
        if !self.done {
            self.cancel();
        }
        // Unblock lanes waiting to send; they stop at their next page and exit on their own
        // (they run detached: nothing waits on them).
        while self.rows.try_recv().is_ok() {}
    }
}

/// The output schema a task declares.
pub fn output_schema(task: &TableTask) -> Result<SchemaRef> {
    let mut fields = Vec::with_capacity(task.output.fields.len());
    for (name, ty) in &task.output.fields {
        let dt = DataType::from_str(ty).map_err(|e| Error::Offload {
            detail: format!("output column {name}: type {ty:?} is not an Arrow type ({e})"),
        })?;
        fields.push(Field::new(name, dt, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}
