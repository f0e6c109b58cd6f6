//! The OS edge that finds a container's main process through `/proc` and signals it.
//!
//! The main process is the one in the container's cgroup whose parent is not (the
//! runtime shim or CRI-O conmon is its parent); see node-facts.md §5. Signals go through
//! a pidfd after a re-check, so a reused PID never gets a signal meant for someone else.
//!
//! **PID namespace:** PIDs read from the proc root are signalled through `pidfd_open`,
//! which takes PIDs of the *agent's* PID namespace. The proc root must therefore be a
//! procfs of that namespace: run the agent with `hostPID: true` and use `/proc` (a host
//! `/proc` bind-mounted into a non-hostPID container would name the wrong processes).

pub mod cgroup;
mod pidfd;
mod proc_fs;
mod scan;
#[cfg(test)]
mod tests;

pub use proc_fs::ProcFs;
