//! Notifications: tell humans (Slack, Teams, Google Chat, any webhook) what reloadlet did
//! or failed to do. Used the same way by the node agent and the controller:
//!
//! ```text
//! executor outcome ──> Notification (event) ──> Notifier::notify (never blocks)
//!   ──> --notify-on filter ──> dedupe (5 min per source object and reason)
//!   ──> render per format, tenant text quoted as data (quote)
//!   ──> bounded queue per webhook (drop oldest)
//!   ──> Poster (5 s per attempt, 3 retries with backoff)
//! ```
//!
//! Webhook URLs are credentials: they live in [`SecretUrl`], whose `Debug` and `Display`
//! show only the scheme and host.

pub mod config;
pub mod dedupe;
pub mod event;
pub mod format;
pub mod http_poster;
pub mod metrics;
pub mod poster;
pub mod quote;
pub mod secret_url;
pub mod sender;

pub use config::{NotifyArgs, NotifySettings};
pub use event::{Notification, NotifyOn};
pub use format::{Format, Payload};
pub use http_poster::HttpPoster;
pub use metrics::NotifyMetrics;
pub use poster::{FakePoster, PostError, PostResponse, Poster};
pub use secret_url::SecretUrl;
pub use sender::{Notifier, Submitted};
