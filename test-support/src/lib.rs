//! What every test of the workspace shares, and nothing else: [`wait`], how a test waits
//! for something (poll with a deadline, never a bare sleep, never a timed assertion) and
//! how it says it could not run. The unit tests in `src/`, the integration tests in
//! `tests/` and nodesim's tests use it alike; `bench-support` is the benchmarks' own.

pub mod wait;
