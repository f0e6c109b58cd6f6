//! Fuzzes `/proc/<pid>/cgroup` parsing and container path recognition.
#![no_main]

// Each target uses one of the shared checks.
#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::cgroup_paths(data));
