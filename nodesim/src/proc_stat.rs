//! Reading `/proc/<pid>/stat` and `/proc/<pid>/task/<tid>/stat`: the fields after the
//! command name, which is in parentheses and may itself hold spaces and parentheses, so the
//! last `)` ends it (kernel `fs/proc/array.c`, `do_task_stat`: `pid (comm) state ppid pgrp …`).

use std::path::Path;

/// The fields after `(comm)`: state (field 3), parent PID (4), process group (5), …
pub fn fields_after_comm(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace())
}

/// The state letter of a stat file (`R`, `S`, `T`, `Z`, …); `None` when it cannot be read.
pub fn state(stat_file: &Path) -> Option<char> {
    let stat = std::fs::read_to_string(stat_file).ok()?;
    fields_after_comm(&stat)?.next()?.chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_start_after_a_comm_holding_spaces_and_parentheses() {
        let mut f = fields_after_comm("42 (a) b c) T 1 42").unwrap();
        assert_eq!(
            [f.next(), f.next(), f.next()],
            [Some("T"), Some("1"), Some("42")]
        );
        assert!(fields_after_comm("garbage").is_none());
    }

    #[test]
    fn the_state_of_the_reading_thread_is_running() {
        assert_eq!(state(Path::new("/proc/thread-self/stat")), Some('R'));
        assert_eq!(state(Path::new("/proc/0/stat")), None);
    }
}
