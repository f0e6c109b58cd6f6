//! Fuzzes the `/proc/<pid>/status` parser and the signal decision.
#![no_main]

// Each target uses one of the shared checks.
#[allow(dead_code)]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::proc_status(data));
