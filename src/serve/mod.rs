//! What reloadlet serves: liveness and readiness ([`health`]) and Prometheus metrics
//! ([`metrics`]), on one HTTP listener.

pub mod health;
pub mod metrics;
