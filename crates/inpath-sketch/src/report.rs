//! The sketch summary as JSON: one schema for the CLI (`--json`), the Python package
//! (`Sketch.summary()`) and the wire taps. Documented in docs/sketch.md.

use crate::{Extremes, Sketch, Summary};
use serde_json::json;

fn extremes_json(sketch: &Sketch) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    match sketch.extremes() {
        Extremes::Int(Some((min, max))) => (json!(min), json!(max), json!(sketch.count())),
        Extremes::Int(None) => (json!(null), json!(null), json!(0)),
        Extremes::Numeric {
            range: Some((min, max)),
            numeric,
        } => (json!(min), json!(max), json!(numeric)),
        Extremes::Numeric {
            range: None,
            numeric,
        } => (json!(null), json!(null), json!(numeric)),
    }
}

/// A number, or null when it is not known (NaN: the sketch it needs is not kept).
fn finite(x: f64) -> serde_json::Value {
    if x.is_nan() {
        serde_json::Value::Null
    } else {
        json!(x)
    }
}

/// The summary as JSON (the schema is documented in docs/sketch.md).
pub fn summary_json(sketch: &Sketch, summary: &Summary) -> serde_json::Value {
    let p = sketch.params();
    let (min, max, numeric) = extremes_json(sketch);
    json!({
        "count": summary.count,
        "min": min,
        "max": max,
        "numeric_values": numeric,
        "cardinality": summary.cardinality,
        "cardinality_std_error": summary.cardinality_std_error,
        "estimator": summary.estimator.name(),
        "f2": summary.f2,
        "f2_rows": summary.f2_rows,
        "count_min": summary.count_min.as_ref().map(|cm| json!({
            "error_bound": cm.error_bound,
            "confidence": cm.confidence,
            "collision_load": finite(cm.collision_load),
            "typical_relative_error": finite(cm.typical_relative_error),
            "trustworthy": cm.trustworthy,
        })),
        "sketches": p.parts().names(),
        "params": {
            "item_kind": sketch.kind().name(),
            "hash": p.hash.name(),
            "hash_algorithm": p.hash.algorithm(),
            "seed": p.seed,
            "hll_p": p.hll_p,
            "cm_rows": p.cm_rows,
            "cm_p": p.cm_p,
            "agms_rows": p.agms_rows,
            "agms_p": p.agms_p,
        },
    })
}
