//! Each mode assembled from settings, edges and its loop: [`agent`] (the node agent, the
//! default command), [`controller`] (`reloadlet controller`), [`explain`] (`reloadlet
//! explain`), on the async runtime of [`runtime`]. `main.rs` only parses the command line
//! and runs one of them.

pub mod agent;
pub mod controller;
pub mod explain;
pub mod runtime;
pub mod status;

use tokio_util::sync::CancellationToken;

/// Cancels `token` at SIGTERM or SIGINT.
pub async fn shutdown_on_signal(token: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    token.cancel();
}

/// Why a command could not run (`main` prints it on one line and exits non-zero): what it was
/// doing, and the error underneath it kept as the source, typed, as the edge returned it.
#[derive(Debug, thiserror::Error)]
#[error("{doing}: {cause}")]
pub struct Failed {
    doing: String,
    #[source]
    cause: Box<dyn std::error::Error + Send + Sync>,
}

impl Failed {
    /// `doing` failed because of `cause`.
    pub fn because(
        doing: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Failed {
            doing: doing.into(),
            cause: cause.into(),
        }
    }
}

impl From<crate::core::invalid::Invalid> for Failed {
    fn from(invalid: crate::core::invalid::Invalid) -> Self {
        Failed::because("invalid settings", invalid)
    }
}
