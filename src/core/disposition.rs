//! Whether a process would do anything with a signal, read from `/proc/<pid>/status`
//! before sending it (pure: parsing and the decision, no I/O).
//!
//! What the kernel does with a signal sent to a process (Linux `kernel/signal.c`):
//! - `sig_ignored`: a signal in the target's `blocked` **or** `real_blocked` set is never
//!   dropped at send time: it stays pending until the process takes it (signalfd,
//!   `sigwaitinfo`) or unblocks it.
//! - otherwise `sig_task_ignored` drops it when the handler is `SIG_IGN`, when the handler
//!   is `SIG_DFL` and the default action is to ignore (`sig_kernel_ignore`: SIGWINCH among
//!   ours), and when the handler is `SIG_DFL` and the process carries `SIGNAL_UNKILLABLE`,
//!   which `copy_process` (`kernel/fork.c`) sets on the child reaper of a PID namespace — PID 1
//!   of a container — so only SIGKILL/SIGSTOP from an ancestor namespace (`force`) pass.
//!   `kill(2)` and `pidfd_send_signal(2)` return 0 either way.
//! - a signal not dropped whose handler is `SIG_DFL` takes its default action: SIGHUP,
//!   SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2 terminate the process (`sig_fatal` in
//!   `complete_signal`).
//!
//! `/proc/<pid>/status` (`fs/proc/array.c`, `task_sig` and `render_sigset_t`) prints
//! `SigBlk` (the thread's `blocked`), `SigIgn` and `SigCgt` (handlers that are `SIG_IGN` /
//! neither `SIG_IGN` nor `SIG_DFL`) as 16 hex digits, bit `signo - 1`; `NSpid`
//! (`task_state`) lists the PID in each PID namespace from the reader's down to the task's
//! own, so its last value is `1` for PID 1 of a container. While a thread sleeps in
//! `sigtimedwait`/`sigwaitinfo`/`sigwait`, `do_sigtimedwait` moves the waited signals out of
//! `blocked` into `real_blocked`, which `/proc` does not print: such a waiter looks as if it
//! had neither a handler nor a mask. That is how tini and dumb-init wait, hence the list of
//! known forwarding inits below.

use crate::core::model::ReloadSignal;
use std::fmt;

/// `comm` of init processes known to wait for every signal and forward it to their child,
/// read from each project's source:
/// - tini (krallin/tini, `src/tini.c`): blocks every signal (`configure_signals`, SIGTTIN and
///   SIGTTOU set to `SIG_IGN`), then loops on `sigtimedwait` with a 1 s timeout in
///   `wait_and_forward_signal` and `kill`s the child with what it got. Debian installs
///   `/usr/bin/tini` and `/usr/bin/tini-static`; Docker's `--init` ships it as `docker-init`.
/// - dumb-init (Yelp/dumb-init, `dumb-init.c` `main`): `sigprocmask(SIG_BLOCK)` of a full
///   set and a no-op handler bound to every signal (so it shows as "caught" anyway), then
///   `sigwait` in a loop; `handle_signal` forwards to the child's process group.
/// - catatonit (openSUSE/catatonit, `catatonit.c` `init_signalfd`): a `signalfd` on a full,
///   blocked set; it shows as "blocked" anyway, listed for completeness (podman's `--init`).
///
/// `comm` is the executable's basename cut to 15 bytes (`TASK_COMM_LEN`).
pub const KNOWN_FORWARDING_INITS: [&str; 5] = [
    "tini",
    "tini-static",
    "docker-init",
    "dumb-init",
    "catatonit",
];

/// What `/proc/<pid>/status` says about a process's signals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SignalStatus {
    /// `Name:` (the `comm`), unescaped as the kernel prints it.
    pub name: String,
    pub blocked: u64,
    pub ignored: u64,
    pub caught: u64,
    /// The PID in the process's own PID namespace (last `NSpid` value); `None` when the
    /// kernel does not print `NSpid` (before Linux 4.1).
    pub ns_pid: Option<i32>,
}

impl SignalStatus {
    /// Parses the text of `/proc/<pid>/status`. `None` when a mask line is missing or is not
    /// hex (not a status file).
    pub fn parse(text: &str) -> Option<Self> {
        let mut status = SignalStatus::default();
        let (mut blk, mut ign, mut cgt) = (None, None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "Name" => status.name = value.to_owned(),
                "SigBlk" => blk = u64::from_str_radix(value, 16).ok(),
                "SigIgn" => ign = u64::from_str_radix(value, 16).ok(),
                "SigCgt" => cgt = u64::from_str_radix(value, 16).ok(),
                "NSpid" => {
                    status.ns_pid = value.split_whitespace().last().and_then(|p| p.parse().ok())
                }
                _ => {}
            }
        }
        status.blocked = blk?;
        status.ignored = ign?;
        status.caught = cgt?;
        Some(status)
    }

    /// Parses the text of `/proc/<pid>/stat`: the same masks in decimal, for the signals
    /// 1–31 only (kernel `fs/proc/array.c`, `do_task_stat`: fields 32–34 `blocked`,
    /// `sigignore`, `sigcatch` print `sig[0] & 0x7fffffff`; proc(5) lists them), which holds
    /// every [`ReloadSignal`]. The kernel builds this file with less work than `status`
    /// (measured here: 3.7 µs against 8.5 µs a read), which is why a kept process is re-read
    /// through it right before each signal. `comm` is the text between the first `(` and the
    /// last `)` (it may hold both); `stat` has no `NSpid`, so `ns_pid` comes from the caller
    /// (it never changes for a process). `None`: not a stat line.
    pub fn parse_stat(text: &str, ns_pid: Option<i32>) -> Option<Self> {
        debug_assert!(ReloadSignal::ALL.iter().all(|s| s.number() <= 31));
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let name = text.get(open + 1..close)?;
        // Field 3 (`state`) is the first after the comm: fields 32..=34 are 29..=31 here.
        let mut fields = text.get(close + 1..)?.split_ascii_whitespace().skip(29);
        let mut next = || fields.next()?.parse::<u64>().ok();
        let (blocked, ignored, caught) = (next()?, next()?, next()?);
        Some(SignalStatus {
            name: name.to_owned(),
            blocked,
            ignored,
            caught,
            ns_pid,
        })
    }

    fn has(mask: u64, signal: ReloadSignal) -> bool {
        mask & (1u64 << (signal.number() - 1)) != 0
    }

    /// PID 1 of its PID namespace (`SIGNAL_UNKILLABLE`): an unhandled signal is dropped.
    pub fn is_namespace_init(&self) -> bool {
        self.ns_pid == Some(1)
    }

    pub fn is_known_init(&self) -> bool {
        KNOWN_FORWARDING_INITS.contains(&self.name.as_str())
    }
}

pub use crate::core::model::SignalCheck;

/// How a process handles a signal it will get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// A handler is installed (`SigCgt`).
    Caught,
    /// Blocked (`SigBlk`): stays pending for signalfd/`sigwaitinfo`, or until unblocked.
    Blocked,
    /// A known signal-forwarding init that waits for it in `sigtimedwait`.
    ForwardingInit,
    /// `reloadlet.io/signal-check: "off"`: not looked at.
    Unchecked,
}

/// Why a signal is sent although nothing seems to handle it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unhandled {
    /// Default disposition on PID 1 of its namespace: the kernel drops it (unless waited for).
    NamespaceInit,
    /// Default disposition whose default action is to ignore (SIGWINCH).
    DefaultIgnore,
}

/// Why a signal is not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withheld {
    /// `SIG_IGN`: the kernel would drop it.
    Ignored,
    /// Default disposition, not PID 1 of its namespace: the default action kills it.
    WouldTerminate,
}

/// The decision for one process and one signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it: the process handles it. Event `Signaled`.
    Send(Handled),
    /// Send it (harmless), but it is most likely dropped. Warning `SignalNotHandled`.
    SendUnhandled(Unhandled),
    /// Do not send it. Warning `SignalNotHandled`.
    Withhold(Withheld),
}

impl Verdict {
    pub fn sends(self) -> bool {
        !matches!(self, Verdict::Withhold(_))
    }

    /// The process does something with the signal (`Signaled`, not `SignalNotHandled`).
    pub fn handled(self) -> bool {
        matches!(self, Verdict::Send(_))
    }
}

/// The default action of `signal` is to ignore it (`sig_kernel_ignore`).
fn ignored_by_default(signal: ReloadSignal) -> bool {
    matches!(signal, ReloadSignal::Winch)
}

/// Decides whether to send `signal` to the process `status` describes (see the module docs).
pub fn decide(status: &SignalStatus, signal: ReloadSignal, check: SignalCheck) -> Verdict {
    if check == SignalCheck::Off {
        return Verdict::Send(Handled::Unchecked);
    }
    if SignalStatus::has(status.caught, signal) {
        return Verdict::Send(Handled::Caught);
    }
    if SignalStatus::has(status.blocked, signal) {
        return Verdict::Send(Handled::Blocked);
    }
    if SignalStatus::has(status.ignored, signal) {
        return Verdict::Withhold(Withheld::Ignored);
    }
    // Default disposition, not blocked (or blocked only inside sigtimedwait).
    if status.is_known_init() {
        return Verdict::Send(Handled::ForwardingInit);
    }
    if ignored_by_default(signal) {
        return Verdict::SendUnhandled(Unhandled::DefaultIgnore);
    }
    if status.is_namespace_init() {
        return Verdict::SendUnhandled(Unhandled::NamespaceInit);
    }
    Verdict::Withhold(Withheld::WouldTerminate)
}

/// One line, for logs, Events and `explain`: what happens to `signal` at this process.
/// `pid` is the PID in the agent's namespace.
pub fn describe(status: &SignalStatus, pid: i32, signal: ReloadSignal, verdict: Verdict) -> String {
    let who = ProcessName { status, pid };
    match verdict {
        Verdict::Send(Handled::Caught) => format!("{who} has a handler for {signal}"),
        Verdict::Send(Handled::Blocked) => {
            format!("{who} blocks {signal} and takes it when it is ready (signalfd, sigwaitinfo, or on unblock)")
        }
        Verdict::Send(Handled::ForwardingInit) => {
            format!("{who} is a signal-forwarding init: it waits for {signal} and passes it to its child")
        }
        Verdict::Send(Handled::Unchecked) => {
            format!("{who}: not checked (reloadlet.io/signal-check: \"off\")")
        }
        Verdict::SendUnhandled(Unhandled::NamespaceInit) => format!(
            "pid 1 ({}) has no handler for {signal}: the kernel drops it unless the process waits for it (host pid {pid})",
            status.name
        ),
        Verdict::SendUnhandled(Unhandled::DefaultIgnore) => format!(
            "{who} has no handler for {signal}, whose default action is to ignore it: the kernel drops it unless the process waits for it"
        ),
        Verdict::Withhold(Withheld::Ignored) => {
            format!("{who} ignores {signal}: the kernel would drop it")
        }
        Verdict::Withhold(Withheld::WouldTerminate) => format!(
            "{who} has no handler for {signal} and is not PID 1 of its PID namespace: {signal} would terminate the process"
        ),
    }
}

/// `process nginx (pid 4242)`, or `pid 1 (nginx) (host pid 4242)` for a namespace init.
struct ProcessName<'a> {
    status: &'a SignalStatus,
    pid: i32,
}

impl fmt::Display for ProcessName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.status.is_namespace_init() && self.pid != 1 {
            write!(f, "pid 1 ({}) (host pid {})", self.status.name, self.pid)
        } else {
            write!(f, "process {} (pid {})", self.status.name, self.pid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUP: u64 = 1 << 0;
    const USR1: u64 = 1 << 9;
    const TERM: u64 = 1 << 14;

    fn status(
        name: &str,
        blocked: u64,
        ignored: u64,
        caught: u64,
        ns_pid: Option<i32>,
    ) -> SignalStatus {
        SignalStatus {
            name: name.into(),
            blocked,
            ignored,
            caught,
            ns_pid,
        }
    }

    #[test]
    fn parses_the_kernel_status_format() {
        let text = "Name:\tnginx: master\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
                    Pid:\t4242\nPPid:\t4200\nNSpid:\t4242\t7\t1\nSigQ:\t0/63445\n\
                    SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n\
                    SigBlk:\t0000000000000001\nSigIgn:\t0000000000001000\n\
                    SigCgt:\t0000000180004a07\nCapInh:\t0000000000000000\n";
        assert_eq!(
            SignalStatus::parse(text),
            Some(status("nginx: master", 1, 0x1000, 0x1_8000_4a07, Some(1)))
        );
        let no_nspid = "Name:\tsleep\nSigBlk:\t0\nSigIgn:\t0\nSigCgt:\t0\n";
        assert_eq!(
            SignalStatus::parse(no_nspid),
            Some(status("sleep", 0, 0, 0, None))
        );
        assert_eq!(
            SignalStatus::parse("Name:\tx\nSigBlk:\tzz\nSigIgn:\t0\nSigCgt:\t0\n"),
            None
        );
        assert_eq!(SignalStatus::parse(""), None);
        assert_eq!(SignalStatus::parse("garbage\n\0\n:::"), None);
    }

    #[test]
    fn the_main_threads_stat_shows_the_masks_of_the_process() {
        // What the kept path reads (`/proc/<pid>/task/<pid>/stat`) against the process-wide
        // file, for a shell with a handler (HUP) and an ignored signal (USR1).
        use std::os::unix::process::CommandExt;
        let mut sh = std::process::Command::new("sh");
        sh.args(["-c", "trap 'echo hup' HUP; trap '' USR1; sleep 30 & wait"]);
        // A non-interactive shell cannot trap a signal ignored on entry (POSIX `trap`): under
        // `nohup` the test's own SIGHUP is ignored, so the child starts with defaults.
        // SAFETY: only async-signal-safe calls (signal(2)) between fork and exec.
        unsafe {
            sh.pre_exec(|| {
                for sig in [libc::SIGHUP, libc::SIGUSR1, libc::SIGINT, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut child = sh.spawn().unwrap();
        let pid = child.id();
        let read = |path: String| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let text = std::fs::read_to_string(&path).unwrap();
                let masks = SignalStatus::parse_stat(&text, None).unwrap();
                // The shell sets its traps after it starts: wait for them.
                let both = masks.caught & 1 != 0 && masks.ignored & (1 << (libc::SIGUSR1 - 1)) != 0;
                if both || std::time::Instant::now() > deadline {
                    return masks;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        let process = read(format!("/proc/{pid}/stat"));
        let main_thread = read(format!("/proc/{pid}/task/{pid}/stat"));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(process, main_thread);
        assert!(
            SignalStatus::has(process.caught, ReloadSignal::Hup),
            "{process:?}"
        );
        assert!(
            SignalStatus::has(process.ignored, ReloadSignal::Usr1),
            "{process:?}"
        );
    }

    #[test]
    fn parses_the_kernel_stat_format_like_status() {
        // A child at rest (not this process: other tests change its threads' masks meanwhile):
        // both files say the same about signals 1–31.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let proc_dir = format!("/proc/{}", child.id());
        let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap();
        let full = std::fs::read_to_string(format!("{proc_dir}/status")).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        let full = SignalStatus::parse(&full).unwrap();
        let low = 0x7fff_ffff;
        let from_stat = SignalStatus::parse_stat(&stat, full.ns_pid).unwrap();
        assert_eq!(from_stat.blocked, full.blocked & low);
        assert_eq!(from_stat.ignored, full.ignored & low);
        assert_eq!(from_stat.caught, full.caught & low);
        assert_eq!(from_stat.name, full.name);
        // A comm with spaces and parentheses; the masks of an nginx master.
        let line = "4242 (nginx: (master)) S 4200 4242 4242 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 \
                    0 100 1000 200 18446744073709551615 1 1 0 0 0 0 1 4096 2147502599 0 0 0 17 \
                    1 0 0 0 0 0";
        assert_eq!(
            SignalStatus::parse_stat(line, Some(1)),
            Some(status("nginx: (master)", 1, 0x1000, 0x8000_4a07, Some(1)))
        );
        assert_eq!(SignalStatus::parse_stat("", None), None);
        assert_eq!(SignalStatus::parse_stat("1 (x) S 1 2", None), None);
        assert_eq!(SignalStatus::parse_stat("garbage", None), None);
    }

    #[test]
    fn decision_table() {
        use Handled::*;
        use ReloadSignal::{Hup, Term, Usr1, Winch};
        use Verdict::*;
        let pid1 = Some(1);
        let child = Some(7);
        let on = SignalCheck::On;
        let cases: Vec<(SignalStatus, ReloadSignal, SignalCheck, Verdict)> = vec![
            // A handler wins, whatever else is set.
            (status("nginx", 0, 0, HUP, pid1), Hup, on, Send(Caught)),
            (status("nginx", 0, 0, HUP, child), Hup, on, Send(Caught)),
            (status("app", HUP, 0, HUP, child), Hup, on, Send(Caught)),
            // Blocked: signalfd, or sigwaitinfo between two waits; blocked beats ignored.
            (status("app", HUP, 0, 0, child), Hup, on, Send(Blocked)),
            (status("app", HUP, HUP, 0, child), Hup, on, Send(Blocked)),
            (
                status("app", USR1 | TERM, 0, 0, pid1),
                Term,
                on,
                Send(Blocked),
            ),
            // Ignored: never sent, PID 1 or not.
            (
                status("app", 0, HUP, 0, pid1),
                Hup,
                on,
                Withhold(Withheld::Ignored),
            ),
            (
                status("app", 0, HUP, 0, child),
                Hup,
                on,
                Withhold(Withheld::Ignored),
            ),
            // Default disposition, PID 1: sent (the kernel drops it), but not handled.
            (
                status("sleep", 0, 0, 0, pid1),
                Hup,
                on,
                SendUnhandled(Unhandled::NamespaceInit),
            ),
            // ... unless it is a known forwarding init waiting in sigtimedwait.
            (status("tini", 0, 0, 0, pid1), Hup, on, Send(ForwardingInit)),
            (
                status("dumb-init", 0, 0, 0, pid1),
                Usr1,
                on,
                Send(ForwardingInit),
            ),
            (
                status("catatonit", 0, 0, 0, pid1),
                Hup,
                on,
                Send(ForwardingInit),
            ),
            // Default, not PID 1 (shared PID namespace): it would die; never sent.
            (
                status("sleep", 0, 0, 0, child),
                Hup,
                on,
                Withhold(Withheld::WouldTerminate),
            ),
            (
                status("sleep", 0, 0, HUP, child),
                Term,
                on,
                Withhold(Withheld::WouldTerminate),
            ),
            // The known-init rule holds for an init that is not PID 1.
            (
                status("tini", 0, 0, 0, child),
                Hup,
                on,
                Send(ForwardingInit),
            ),
            // A name that merely contains a known init's is not one.
            (
                status("tini-wrapper", 0, 0, 0, child),
                Hup,
                on,
                Withhold(Withheld::WouldTerminate),
            ),
            // No NSpid (old kernel): cannot tell PID 1, assume the worst.
            (
                status("sleep", 0, 0, 0, None),
                Hup,
                on,
                Withhold(Withheld::WouldTerminate),
            ),
            // SIGWINCH's default action is to ignore it: harmless, not handled.
            (
                status("sleep", 0, 0, 0, child),
                Winch,
                on,
                SendUnhandled(Unhandled::DefaultIgnore),
            ),
            (
                status("sleep", 0, 0, 0, pid1),
                Winch,
                on,
                SendUnhandled(Unhandled::DefaultIgnore),
            ),
            // signal-check off sends regardless.
            (
                status("sleep", 0, 0, 0, child),
                Hup,
                SignalCheck::Off,
                Send(Unchecked),
            ),
            (
                status("app", 0, HUP, 0, child),
                Hup,
                SignalCheck::Off,
                Send(Unchecked),
            ),
        ];
        for (status, signal, check, want) in cases {
            let got = decide(&status, signal, check);
            assert_eq!(got, want, "{status:?} {signal} {check:?}");
            assert_eq!(got.sends(), !matches!(want, Withhold(_)));
        }
    }

    #[test]
    fn descriptions_name_the_process_and_the_fate_of_the_signal() {
        let sleep1 = status("sleep", 0, 0, 0, Some(1));
        let v = decide(&sleep1, ReloadSignal::Hup, SignalCheck::On);
        assert_eq!(
            describe(&sleep1, 4242, ReloadSignal::Hup, v),
            "pid 1 (sleep) has no handler for SIGHUP: the kernel drops it unless the process waits for it (host pid 4242)"
        );
        let shared = status("sleep", 0, 0, 0, Some(7));
        let v = decide(&shared, ReloadSignal::Hup, SignalCheck::On);
        assert_eq!(
            describe(&shared, 4242, ReloadSignal::Hup, v),
            "process sleep (pid 4242) has no handler for SIGHUP and is not PID 1 of its PID namespace: SIGHUP would terminate the process"
        );
        let ign = status("app", 0, HUP, 0, Some(1));
        let v = decide(&ign, ReloadSignal::Hup, SignalCheck::On);
        assert_eq!(
            describe(&ign, 4242, ReloadSignal::Hup, v),
            "pid 1 (app) (host pid 4242) ignores SIGHUP: the kernel would drop it"
        );
    }
}
