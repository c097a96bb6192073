//! The tap policy: what a tapped direction does when its taps fall behind (`--tap-policy`).

use crate::WireError;

/// What a tapped connection direction does when its taps cannot keep up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TapPolicy {
    /// The default: the connection stops reading until the taps catch up (back-pressure), so
    /// TCP flow control slows the sender. Every byte is tapped; nothing is skipped.
    #[default]
    Exact,
    /// The connection never waits for its taps. A read that finds every buffer still with the
    /// taps is forwarded untapped; the taps are told how many bytes they missed, drop the
    /// records those bytes cut, and the job's result is marked partial. Not with
    /// [`crate::JobSplit::Message`]: a gap over a message header would lose the framing of
    /// every later message.
    Lossy,
}

impl TapPolicy {
    /// The values `--tap-policy` takes, in words.
    pub const VALID: &'static str = "exact (the default: a tap that falls behind slows the link; \
         nothing is skipped) or lossy (the link runs at its own speed; the taps skip what they \
         cannot reach)";

    /// `exact` or `lossy`.
    pub fn name(self) -> &'static str {
        match self {
            TapPolicy::Exact => "exact",
            TapPolicy::Lossy => "lossy",
        }
    }
}

impl std::str::FromStr for TapPolicy {
    type Err = WireError;

    /// `exact` or `lossy`; anything else is an error naming both.
    fn from_str(text: &str) -> Result<Self, WireError> {
        match text.trim() {
            "exact" => Ok(TapPolicy::Exact),
            "lossy" => Ok(TapPolicy::Lossy),
            other => Err(WireError::Setting {
                name: "tap-policy",
                value: other.to_string(),
                valid: TapPolicy::VALID.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_and_names_them_on_error() {
        assert_eq!("exact".parse::<TapPolicy>().unwrap(), TapPolicy::Exact);
        assert_eq!("lossy".parse::<TapPolicy>().unwrap(), TapPolicy::Lossy);
        assert_eq!(TapPolicy::default(), TapPolicy::Exact);
        let e = "fast".parse::<TapPolicy>().unwrap_err().to_string();
        assert!(e.contains("tap-policy = fast"), "{e}");
        assert!(e.contains("exact") && e.contains("lossy"), "{e}");
    }
}
