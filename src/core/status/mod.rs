//! `reloadlet status` (issue #46), the pure part: which pods consume a ConfigMap or Secret and
//! how ([`consumers`]), the data version both the agent (seeing files) and the API side (seeing
//! objects) agree on ([`data_version`]), when an object's data was last written at the latest
//! ([`data_written`]), the record whoever acts on a pod leaves on it ([`applied`]), and the state of one consumer for the object's current data ([`state`]).
//! No I/O: the CLI (`crate::wiring::status`) reads pods and object metadata and calls these.

pub mod applied;
pub mod consumers;
pub mod data_version;
pub mod data_written;
pub mod state;
