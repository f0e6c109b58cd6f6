//! What reloadlet serves: liveness and readiness ([`health`]) and Prometheus metrics
//! ([`metrics`]), on one HTTP listener; refused API requests make `/readyz` fail
//! ([`denials`]).

pub mod denials;
pub mod health;
pub mod metrics;
