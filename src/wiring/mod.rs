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
