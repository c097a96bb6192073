//! The tap specification: `NAME` or `NAME:key=value,key=value,flag`, as `--tap` takes it in
//! `inpath wire` and as `inpath store sketch|corr` take it over a handle.

use crate::contract::TapFactory;
use crate::corr::CorrTapFactory;
use crate::crc::CrcTapFactory;
use crate::error::{option_error, Result, TapError};
use crate::sketch::SketchTapFactory;
use std::sync::Arc;

/// The taps [`parse_tap`] knows.
pub const TAP_NAMES: &[&str] = &["sketch", "corr", "crc"];
/// Parses a `--tap` specification: `NAME` or `NAME:key=value,key=value,flag`.
pub fn parse_tap(spec: &str) -> Result<Arc<dyn TapFactory>> {
    let (name, options) = match spec.split_once(':') {
        Some((name, options)) => (name.trim(), options),
        None => (spec.trim(), ""),
    };
    let mut pairs = Vec::new();
    for item in options.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        };
        if pairs.iter().any(|(k, _): &(&str, _)| *k == key) {
            return Err(option_error(spec, format!("option {key:?} is given twice")));
        }
        pairs.push((key, value));
    }
    let factory: Arc<dyn TapFactory> = match name {
        "sketch" => Arc::new(SketchTapFactory::parse(spec, &pairs)?),
        "corr" => Arc::new(CorrTapFactory::parse(spec, &pairs)?),
        "crc" => {
            if let Some((key, _)) = pairs.first() {
                return Err(option_error(
                    spec,
                    format!("unknown option {key:?}: the crc tap takes no options"),
                ));
            }
            Arc::new(CrcTapFactory)
        }
        _ => {
            return Err(TapError::UnknownTap {
                name: name.to_string(),
                spec: spec.to_string(),
                available: TAP_NAMES.join(", "),
            })
        }
    };
    // Make one tap now so that every configuration error shows at start-up.
    factory.make()?;
    Ok(factory)
}

/// The tap's name: what comes before the first `:` of a specification.
pub fn tap_name(spec: &str) -> &str {
    spec.split_once(':').map_or(spec, |(name, _)| name).trim()
}
