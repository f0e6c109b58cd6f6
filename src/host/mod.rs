//! The node's edges: the kubelet's volume directories watched with inotify ([`inotify`]) and
//! read ([`volume_read`]), containers' processes found through /proc and cgroups and
//! signalled through pidfds ([`process`]), the agent's state file ([`state_file`]), the
//! allocator and mappings ([`memory`]) and the background threads' scheduling policy
//! and the hot thread's scheduler slice ([`sched`]). Every host path is injectable, so each is tested on a temp dir.

pub mod inotify;
pub mod memory;
pub mod process;
pub mod sched;
pub mod state_file;
pub mod volume_read;
