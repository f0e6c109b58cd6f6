//! Pacing (pure): when an action that is due may run — per-pod debounce, a minimum interval
//! between actions, a flap breaker and maintenance windows (docs/pacing.md). One
//! implementation for the node agent and the controller: [`PacingSpec`] is read from a pod's
//! annotations over the flags' [`PacingDefaults`], a [`Pacer`] per target holds what happened,
//! and [`Pacer::poll`] says what to do at a given time. Times are wall-clock
//! ([`jiff::Timestamp`]) so the state can be saved and a deferral outlives a restart; the
//! caller passes the time in, so tests drive every rule without waiting.

pub mod book;
pub mod clock;
pub mod pacer;
pub mod record;
pub mod spec;
pub mod window;

pub use book::{Gate, Notice, PacingBook, PacingSpecs};
pub use clock::WallClock;
pub use pacer::{ActionClass, Deferral, FlapReport, Pacer, Step};
pub use record::{PacingRecord, ENV_PACING, ROLLOUT_PACING};
pub use spec::{FlapThreshold, PacingDefaults, PacingError, PacingSpec, WindowActions};
pub use window::MaintenanceWindow;
