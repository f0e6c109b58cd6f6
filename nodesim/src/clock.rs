//! Wall-clock time as a `jiff` timestamp (k8s-openapi's time type), and `CLOCK_MONOTONIC`.

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

/// `CLOCK_MONOTONIC` in nanoseconds (what `sigrecorder` writes at signal receipt).
pub fn monotonic_ns() -> i128 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128
}
