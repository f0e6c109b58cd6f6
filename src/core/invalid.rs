//! The one error of the pure core: input that is not acceptable — an annotation a pod author
//! wrote, a flag an operator passed, a record another writer left. It carries the sentence a
//! user reads (the Warning Event, the log line, clap's message) and nothing to retry: bad input
//! stays bad until someone edits it. Kept apart from the edges' errors (`crate::ports::ApiError`
//! and friends), which carry what a retry decision needs.

use std::fmt;

/// Why an input was refused, in words for the person who wrote it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Invalid(String);

impl Invalid {
    pub fn new(reason: impl Into<String>) -> Self {
        Invalid(reason.into())
    }

    /// The same refusal, with where it was found in front (`annotation reloadlet.io/x: …`).
    pub fn context(self, place: impl fmt::Display) -> Self {
        Invalid(format!("{place}: {}", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// It reads as its sentence: `e.contains("reloadlet.io/drain")`.
impl std::ops::Deref for Invalid {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for Invalid {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<String> for Invalid {
    fn from(reason: String) -> Self {
        Invalid(reason)
    }
}

impl From<&str> for Invalid {
    fn from(reason: &str) -> Self {
        Invalid(reason.to_owned())
    }
}

/// `Err(Invalid)` from a `format!`-style message.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::core::invalid::Invalid::new(format!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_the_sentence_it_carries_and_context_goes_in_front() {
        let e = Invalid::new("not a duration").context("annotation reloadlet.io/drain");
        assert_eq!(
            e.to_string(),
            "annotation reloadlet.io/drain: not a duration"
        );
        assert_eq!(e.as_str(), e.to_string());
        let boxed: Box<dyn std::error::Error> = Box::new(Invalid::from("x"));
        assert_eq!(boxed.to_string(), "x");
    }
}
