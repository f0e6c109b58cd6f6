//! Wall-clock time as a `jiff` timestamp (k8s-openapi's time type).

use k8s_openapi::jiff::Timestamp;
use std::time::SystemTime;

/// Now, in UTC.
pub fn now() -> Timestamp {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = i128::try_from(since_epoch.as_nanos()).unwrap_or(0);
    Timestamp::from_nanosecond(nanos).unwrap_or(Timestamp::UNIX_EPOCH)
}
