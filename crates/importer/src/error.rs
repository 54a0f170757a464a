//! How an import fails: worth retrying, not worth retrying, or stopped on request.

/// The end of CDI's message for an image that does not fit its claim (its
/// `ErrLargerPVCRequired`); callers can look for it to word their status.
pub const LARGER_PVC_REQUIRED: &str = "A larger PVC is required";

/// Why an import or clone did not complete. The message is the one to show the user,
/// worded as CDI words it (see each constructor's caller).
///
/// After an error the target file holds no usable image; the scratch file is gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Worth retrying with backoff: the server could not be reached, timed out, answered
    /// 5xx (or 408/429), or the body ended early.
    #[error("{0}")]
    Transient(String),
    /// Retrying the same request will fail the same way: 4xx, a bad CA, an image that
    /// qemu-img rejects, an image larger than the claim, a local I/O error.
    #[error("{0}")]
    Permanent(String),
    /// The cancellation token fired; nothing is left running.
    #[error("import cancelled")]
    Cancelled,
}

impl ImportError {
    pub fn is_transient(&self) -> bool {
        matches!(self, ImportError::Transient(_))
    }

    /// The image does not fit the claim (CDI's "A larger PVC is required").
    pub fn is_too_small(&self) -> bool {
        matches!(self, ImportError::Permanent(m) if m.ends_with(LARGER_PVC_REQUIRED))
    }

    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// CDI's wording (pkg/image/qemu.go) for an image whose virtual size exceeds the claim.
pub(crate) fn too_small(virtual_size: u64, capacity: u64) -> ImportError {
    ImportError::Permanent(format!(
        "virtual image size {virtual_size} is larger than the reported available storage {capacity}. {LARGER_PVC_REQUIRED}"
    ))
}

/// The text of an error with all its causes (reqwest's and io's Display hide them).
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_small_reads_as_cdi_and_is_recognised() {
        let e = too_small(4194304, 2097152);
        assert_eq!(
            e.to_string(),
            "virtual image size 4194304 is larger than the reported available storage 2097152. A larger PVC is required"
        );
        assert!(e.is_too_small());
        assert!(!e.is_transient());
        assert!(!ImportError::Permanent("404".into()).is_too_small());
    }
}
