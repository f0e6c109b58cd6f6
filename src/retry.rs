//! One way to wait before trying again. Every retry in reloadlet takes its delays from a
//! [`Backoff`] (the policy: first delay, cap, how many, jitter, what a `Retry-After` does, a
//! deadline) and waits through a [`Retries`]: a signal while its container restarts, an
//! eviction a PodDisruptionBudget refuses, a pod's reload request, a webhook notification.
//! The API watches ([`crate::k8s::api_backoff`]) and the state writer thread
//! ([`crate::agent::state_writer`]) take the same [`Delays`] (kube's `StreamBackoff` and a
//! blocking `recv_timeout` do their waiting).
//!
//! The doubling, the cap and the additive jitter are backon's `ExponentialBuilder`. Its
//! `Retryable` runner is not used: the retried work is not one future to call again. A
//! signal's first attempt runs on the agent's hot thread before any retry exists; the next
//! delay of an eviction depends on what the API server said (its `Retry-After`, or "start
//! over at the cap" after an error that is not a refusal); a reload request gives up when a
//! retry would start after a deadline; a stop that has come makes a failure final, one that
//! comes during a wait drops the retry; and each loop logs and reports between attempts.
//! So the policy is a value, its delays a pure iterator (table-tested below), and the
//! waiting one small type, [`Retries`]. Its [`Retries::run`] is the one retry loop of every
//! effect whose attempt can say, by itself, "done" or "again, after this long at the
//! earliest", or "again, at the cap from now on" ([`Attempt`]): the workload patch, the
//! restart's pod writes, a signal's retries, a restart's stop, a reload request, a read of a
//! consumed object, a notification, an eviction. (A structural block of an eviction leaves
//! the loop: it waits on the PodDisruptionBudgets, which end its wait when they change, and
//! then the same [`Retries`] runs again.)

use backon::{BackoffBuilder, ExponentialBuilder};
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How each delay is randomised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    None,
    /// backon's: adds a random 0–100 % of the delay (it only lengthens; N nodes spread out).
    Lengthen,
    /// ±20 %, applied last (after a `Retry-After`), so that pods (and nodes) refused
    /// together do not retry in lock step.
    Spread,
}

/// What the server's `Retry-After` does to the next delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Not looked at.
    Ignored,
    /// It replaces ours (the Eviction API's 429): the server knows when the budget allows.
    Obeyed,
    /// It lengthens ours, but never past the cap (a webhook's rate limit, e.g. Slack's).
    Lengthens,
}

/// A retry policy: delays doubling from `first` up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    /// Retries after the first attempt (`None`: no limit).
    pub retries: Option<usize>,
    pub jitter: Jitter,
    pub retry_after: RetryAfter,
    /// No retry starts later than this after the first attempt (`None`: no deadline).
    pub give_up_after: Option<Duration>,
}

impl Backoff {
    /// Doubling from `first` up to `max`, without end, no jitter, no deadline.
    pub const fn doubling(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            retries: None,
            jitter: Jitter::None,
            retry_after: RetryAfter::Ignored,
            give_up_after: None,
        }
    }

    pub const fn retries(mut self, n: usize) -> Self {
        self.retries = Some(n);
        self
    }

    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    pub const fn retry_after(mut self, rule: RetryAfter) -> Self {
        self.retry_after = rule;
        self
    }

    pub const fn give_up_after(mut self, deadline: Duration) -> Self {
        self.give_up_after = Some(deadline);
        self
    }

    /// The delays of this policy, from the first.
    pub fn delays(&self) -> Delays {
        Delays {
            policy: *self,
            inner: self.from(self.first),
        }
    }

    fn from(&self, first: Duration) -> backon::ExponentialBackoff {
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(first)
            .with_max_delay(self.max)
            .with_factor(2.0);
        builder = match self.retries {
            Some(n) => builder.with_max_times(n),
            None => builder.without_max_times(),
        };
        if self.jitter == Jitter::Lengthen {
            builder = builder.with_jitter();
        }
        builder.build()
    }
}

/// The delay sequence of a [`Backoff`] (pure: no clock, no sleeping).
pub struct Delays {
    policy: Backoff,
    inner: backon::ExponentialBackoff,
}

impl Delays {
    /// Starts over at the first delay (the work made progress).
    pub fn reset(&mut self) {
        self.inner = self.policy.from(self.policy.first);
    }

    /// Every later delay is the cap (an error that will not clear soon).
    pub fn hold_at_cap(&mut self) {
        self.inner = self.policy.from(self.policy.max);
    }

    /// The next delay, with the server's `retry_after` applied as the policy says, then
    /// spread; `None` once the retries are used up.
    pub fn next_after(&mut self, retry_after: Option<Duration>) -> Option<Duration> {
        let ours = self.inner.next()?;
        let delay = match (self.policy.retry_after, retry_after) {
            (RetryAfter::Obeyed, Some(theirs)) => theirs,
            (RetryAfter::Lengthens, Some(theirs)) => theirs.min(self.policy.max).max(ours),
            _ => ours,
        };
        Some(match self.policy.jitter {
            Jitter::Spread => spread(delay),
            Jitter::None | Jitter::Lengthen => delay,
        })
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.next_after(None)
    }
}

/// ±20 %.
pub fn spread(d: Duration) -> Duration {
    // Without the kernel's random source (it cannot fail on Linux ≥ 3.17) no jitter.
    let r = getrandom::u32().unwrap_or(u32::MAX / 2);
    let factor = 0.8 + 0.4 * (f64::from(r) / f64::from(u32::MAX));
    d.mul_f64(factor)
}

/// What one attempt of [`Retries::run`] came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt<T, E> {
    /// Over: no retry, whatever the result says.
    Done(T),
    /// Failed in a way that may pass: tried again after the policy's next delay
    /// (`Some(d)`: the server asked for at least `d`, a `Retry-After`).
    Again(E, Option<Duration>),
    /// Failed in a way that will not pass soon (not a refusal: an error, no answer): tried
    /// again after the cap, and every later delay is the cap too ([`Retries::hold_at_cap`]).
    AgainAtCap(E),
}

/// How [`Retries::run`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended<T, E> {
    /// An attempt was [`Attempt::Done`].
    Done(T),
    /// The policy gave up (retries used up, a retry would start past the deadline, or
    /// stopped before a wait began): the last attempt's error.
    GaveUp(E),
    /// Stopped during a wait: the last attempt's error; the retry is dropped.
    Stopped(E),
}

/// Paces one piece of work's retries: the delays of its [`Backoff`], its deadline (counted
/// from the retries's creation: create it before the first attempt) and its stop.
pub struct Retries {
    delays: Delays,
    started: tokio::time::Instant,
    stop: Option<CancellationToken>,
}

impl Retries {
    pub fn new(policy: &Backoff) -> Self {
        Self {
            delays: policy.delays(),
            started: tokio::time::Instant::now(),
            stop: None,
        }
    }

    /// Once `stop` is cancelled a failure is final ([`Retries::next`] gives up) and a wait
    /// in progress ends ([`Retries::wait`] returns `false`).
    pub fn stopped_by(mut self, stop: CancellationToken) -> Self {
        self.stop = Some(stop);
        self
    }

    /// How long to wait before the next attempt (`retry_after`: the server's wish), or
    /// `None`: give up (retries used up, a retry would start past the deadline, stopping).
    pub fn next(&mut self, retry_after: Option<Duration>) -> Option<Duration> {
        if self
            .stop
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return None;
        }
        let delay = self.delays.next_after(retry_after)?;
        match self.delays.policy.give_up_after {
            Some(limit) if self.elapsed() + delay > limit => None,
            _ => Some(delay),
        }
    }

    /// See [`Delays::hold_at_cap`].
    pub fn hold_at_cap(&mut self) {
        self.delays.hold_at_cap();
    }

    /// Since the retries was created.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Calls `attempt` until it is [`Attempt::Done`], or the policy gives up on an
    /// [`Attempt::Again`] (retries used up, past the deadline, stopped), or a stop ends a wait.
    /// Each retry is announced to `on_retry` (the caller's log line, its metric) with the
    /// error and the delay, before the wait.
    pub async fn run<T, E, Fut>(
        &mut self,
        mut attempt: impl FnMut() -> Fut,
        mut on_retry: impl FnMut(&E, Duration),
    ) -> Ended<T, E>
    where
        Fut: Future<Output = Attempt<T, E>>,
    {
        loop {
            let (error, retry_after) = match attempt().await {
                Attempt::Done(done) => return Ended::Done(done),
                Attempt::Again(error, retry_after) => (error, retry_after),
                Attempt::AgainAtCap(error) => {
                    self.hold_at_cap();
                    (error, None)
                }
            };
            let Some(delay) = self.next(retry_after) else {
                return Ended::GaveUp(error);
            };
            on_retry(&error, delay);
            if !self.wait(delay).await {
                return Ended::Stopped(error);
            }
        }
    }

    /// Waits `delay`; `false` when stopped meanwhile.
    pub async fn wait(&self, delay: Duration) -> bool {
        match &self.stop {
            None => {
                tokio::time::sleep(delay).await;
                true
            }
            Some(stop) => tokio::select! {
                _ = tokio::time::sleep(delay) => true,
                _ = stop.cancelled() => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn taken(policy: Backoff, n: usize) -> Vec<Duration> {
        policy.delays().take(n).collect()
    }

    #[test]
    fn delay_sequences() {
        let table: [(&str, Backoff, usize, Vec<Duration>); 4] = [
            (
                "signal: 0.5 s doubling, four retries",
                Backoff::doubling(ms(500), s(60)).retries(4),
                10,
                vec![ms(500), s(1), s(2), s(4)],
            ),
            (
                "state file: 1 s doubling to 60 s, no end",
                Backoff::doubling(s(1), s(60)),
                9,
                vec![s(1), s(2), s(4), s(8), s(16), s(32), s(60), s(60), s(60)],
            ),
            (
                "reload request: 1 s doubling to 30 s",
                Backoff::doubling(s(1), s(30)),
                7,
                vec![s(1), s(2), s(4), s(8), s(16), s(30), s(30)],
            ),
            (
                "no retries",
                Backoff::doubling(s(1), s(30)).retries(0),
                3,
                vec![],
            ),
        ];
        for (what, policy, n, want) in table {
            assert_eq!(taken(policy, n), want, "{what}");
        }
    }

    #[test]
    fn retry_after_is_obeyed_lengthens_or_is_ignored() {
        let base = Backoff::doubling(s(5), s(120));
        let table = [
            (RetryAfter::Ignored, Some(s(42)), s(5)),
            (RetryAfter::Obeyed, Some(s(42)), s(42)),
            (RetryAfter::Obeyed, Some(s(1)), s(1)),
            (RetryAfter::Obeyed, None, s(5)),
            (RetryAfter::Lengthens, Some(s(42)), s(42)),
            (RetryAfter::Lengthens, Some(s(1)), s(5)),
            (RetryAfter::Lengthens, Some(s(900)), s(120)),
        ];
        for (rule, theirs, want) in table {
            let mut d = base.retry_after(rule).delays();
            assert_eq!(d.next_after(theirs), Some(want), "{rule:?} {theirs:?}");
        }
    }

    #[test]
    fn reset_and_hold_at_cap() {
        let mut d = Backoff::doubling(s(5), s(120)).delays();
        assert_eq!((d.next(), d.next()), (Some(s(5)), Some(s(10))));
        d.hold_at_cap();
        assert_eq!((d.next(), d.next()), (Some(s(120)), Some(s(120))));
        d.reset();
        assert_eq!(d.next(), Some(s(5)));
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        for _ in 0..1000 {
            let j = spread(s(10));
            assert!(j >= s(8) && j <= s(12), "{j:?}");
        }
        let spread_out: Vec<_> = taken(Backoff::doubling(s(10), s(10)).jitter(Jitter::Spread), 50);
        assert!(spread_out.iter().all(|j| *j >= s(8) && *j <= s(12)));
        let lengthened = taken(Backoff::doubling(s(1), s(150)).jitter(Jitter::Lengthen), 20);
        for (i, d) in lengthened.iter().enumerate() {
            let plain = s(1 << i.min(30)).min(s(150));
            assert!(*d >= plain && *d <= 2 * plain, "{i}: {d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pacer_waits_each_delay_then_gives_up() {
        let policy = Backoff::doubling(ms(500), s(60)).retries(4);
        let mut retries = Retries::new(&policy).stopped_by(CancellationToken::new());
        let start = tokio::time::Instant::now();
        let mut at = Vec::new();
        while let Some(delay) = retries.next(None) {
            assert!(retries.wait(delay).await);
            at.push(start.elapsed().as_millis());
        }
        assert_eq!(at, [500, 1500, 3500, 7500]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_retry_starts_past_the_deadline() {
        let policy = Backoff::doubling(s(1), s(30)).give_up_after(s(60));
        let mut retries = Retries::new(&policy);
        let mut waited = Vec::new();
        while let Some(delay) = retries.next(None) {
            assert!(retries.wait(delay).await);
            waited.push(delay.as_secs());
        }
        // 1+2+4+8+16 = 31 s; 31 + 30 > 60.
        assert_eq!(waited, [1, 2, 4, 8, 16]);
        assert_eq!(retries.elapsed(), s(31));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_a_wait_and_makes_the_next_failure_final() {
        let stop = CancellationToken::new();
        let mut retries = Retries::new(&Backoff::doubling(s(1), s(30))).stopped_by(stop.clone());
        let delay = retries.next(None).unwrap();
        let cancel = async {
            tokio::time::sleep(ms(300)).await;
            stop.cancel();
        };
        let (waited, ()) = tokio::join!(retries.wait(delay), cancel);
        assert!(!waited);
        assert_eq!(retries.elapsed(), ms(300));
        assert_eq!(retries.next(None), None);
    }

    /// Runs `script`'s attempts (the `n`th call's answer) through `policy` on the paused
    /// clock: how it ended, the calls, the retries announced, and the time it took.
    async fn scripted(
        policy: &Backoff,
        script: impl Fn(u32) -> Attempt<&'static str, u32>,
    ) -> (
        Ended<&'static str, u32>,
        u32,
        Vec<(u32, Duration)>,
        Duration,
    ) {
        let mut retries = Retries::new(policy);
        let start = tokio::time::Instant::now();
        let calls = std::cell::Cell::new(0u32);
        let mut announced = Vec::new();
        let ended = retries
            .run(
                || {
                    calls.set(calls.get() + 1);
                    let answer = script(calls.get());
                    async { answer }
                },
                |error, delay| announced.push((*error, delay)),
            )
            .await;
        (ended, calls.get(), announced, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn run_tries_again_until_done_waiting_each_delay_and_a_servers_wish() {
        let policy = Backoff::doubling(ms(100), s(10))
            .retries(5)
            .retry_after(RetryAfter::Obeyed);
        let (ended, calls, announced, took) = scripted(&policy, |n| match n {
            1 => Attempt::Again(n, None),
            // The server asks for 2 s: more than the policy's 200 ms.
            2 => Attempt::Again(n, Some(s(2))),
            _ => Attempt::Done("done"),
        })
        .await;
        assert_eq!(ended, Ended::Done("done"));
        assert_eq!(calls, 3);
        assert_eq!(announced, [(1, ms(100)), (2, s(2))]);
        assert_eq!(took, ms(2100), "each announced delay was waited");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_that_will_not_pass_soon_moves_this_and_every_later_delay_to_the_cap() {
        let policy = Backoff::doubling(ms(100), s(10));
        let (ended, calls, announced, took) = scripted(&policy, |n| match n {
            1 => Attempt::Again(n, None),
            2 => Attempt::AgainAtCap(n),
            // A refusal again: the delays stay at the cap.
            3 => Attempt::Again(n, None),
            _ => Attempt::Done("done"),
        })
        .await;
        assert_eq!(ended, Ended::Done("done"));
        assert_eq!(calls, 4);
        assert_eq!(announced, [(1, ms(100)), (2, s(10)), (3, s(10))]);
        assert_eq!(took, ms(20_100));
    }

    #[tokio::test(start_paused = true)]
    async fn run_ends_with_the_last_error_when_the_policy_gives_up_or_a_stop_ends_a_wait() {
        let calls = std::cell::Cell::new(0u32);
        let failing = || async {
            calls.set(calls.get() + 1);
            Attempt::<(), _>::Again(calls.get(), None)
        };
        let policy = Backoff::doubling(ms(100), s(10)).retries(2);
        let ended = Retries::new(&policy).run(failing, |_, _| {}).await;
        assert_eq!(ended, Ended::GaveUp(3), "the first call and 2 retries");

        // A stop during the first wait: no second call.
        calls.set(0);
        let stop = CancellationToken::new();
        let mut retries = Retries::new(&policy).stopped_by(stop.clone());
        let cancel = async {
            tokio::time::sleep(ms(30)).await;
            stop.cancel();
        };
        let (ended, ()) = tokio::join!(retries.run(failing, |_, _| {}), cancel);
        assert_eq!(ended, Ended::Stopped(1));
        assert_eq!(calls.get(), 1);

        // Stopped before: the failure is final at once, and nothing is announced.
        calls.set(0);
        let ended = Retries::new(&policy)
            .stopped_by(stop)
            .run(failing, |_, _| panic!("no retry after a stop"))
            .await;
        assert_eq!(ended, Ended::GaveUp(1));
    }
}
