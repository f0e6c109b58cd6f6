//! The leader-election loop over a [`LeaseStore`]: one read and at most one write per retry
//! period; leadership is published on a watch channel. Decisions are in [`super::lease`].

use super::lease::{next_record, released, Observer, Step};
use crate::ports::{LeaseError, LeaseStore};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct ElectionSettings {
    pub identity: String,
    /// How long a Lease not renewed stays with its holder (client-go default 15 s).
    pub lease_duration: Duration,
    /// The holder steps down when it could not renew for this long (default 10 s).
    pub renew_deadline: Duration,
    /// Between tries (default 2 s).
    pub retry_period: Duration,
}

impl ElectionSettings {
    pub fn new(identity: String) -> Self {
        Self {
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Runs until `shutdown`; then releases the Lease if held. `now_rfc3339` is the wall clock as
/// an RFC 3339 timestamp (written into `renewTime`/`acquireTime`, never compared).
pub async fn run<S: LeaseStore>(
    store: S,
    settings: ElectionSettings,
    leader: watch::Sender<bool>,
    shutdown: CancellationToken,
    now_rfc3339: fn() -> String,
) {
    let mut observer = Observer::default();
    let mut last_renewed: Option<Instant> = None;
    let mut last_error: Option<String> = None;
    loop {
        let now = Instant::now();
        let result = try_once(&store, &settings, &mut observer, now, now_rfc3339).await;
        match result {
            Ok(true) => {
                last_renewed = Some(now);
                last_error = None;
            }
            Ok(false) => {
                last_renewed = None;
                last_error = None;
            }
            Err(e) => {
                let e = e.to_string();
                if last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "leader election: cannot read or write the Lease; retrying");
                    last_error = Some(e);
                }
            }
        }
        let is_leader = last_renewed
            .is_some_and(|t| now.saturating_duration_since(t) < settings.renew_deadline);
        if !is_leader {
            last_renewed = None;
        }
        leader.send_if_modified(|current| {
            let changed = *current != is_leader;
            if changed {
                if is_leader {
                    tracing::info!(identity = %settings.identity, "became the leader");
                } else {
                    tracing::info!(identity = %settings.identity, "not the leader (anymore)");
                }
            }
            *current = is_leader;
            changed
        });
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(settings.retry_period) => {}
        }
    }
    if *leader.borrow() {
        leader.send_replace(false);
        if let Ok(Some((record, rv))) = store.get().await {
            if record.holder.as_deref() == Some(settings.identity.as_str()) {
                match store.replace(&released(&record, &now_rfc3339()), &rv).await {
                    Ok(()) => tracing::info!("released the Lease"),
                    Err(e) => tracing::warn!(error = %e, "could not release the Lease"),
                }
            }
        }
    }
}

/// One read and at most one write. `Ok(true)`: we hold the Lease now.
async fn try_once<S: LeaseStore>(
    store: &S,
    settings: &ElectionSettings,
    observer: &mut Observer,
    now: Instant,
    now_rfc3339: fn() -> String,
) -> Result<bool, LeaseError> {
    let current = store.get().await?;
    let record = current.as_ref().map(|(r, _)| r);
    let step = observer.decide(
        &settings.identity,
        current.as_ref().map(|(r, v)| (r, v.as_str())),
        now.into_std(),
    );
    let Some(next) = next_record(
        &step,
        &settings.identity,
        record,
        settings.lease_duration,
        &now_rfc3339(),
    ) else {
        return Ok(false);
    };
    let written = match (&step, &current) {
        (Step::Create, _) | (_, None) => store.create(&next).await,
        (_, Some((_, rv))) => store.replace(&next, rv).await,
    };
    match written {
        Ok(()) => Ok(true),
        // Another candidate wrote first: we follow until the next try.
        Err(LeaseError::Conflict) => Ok(false),
        Err(e @ LeaseError::Other(_)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeLeaseStore;
    use super::*;

    fn clock() -> String {
        "2026-01-01T00:00:00.000000Z".into()
    }

    async fn wait_for(rx: &mut watch::Receiver<bool>, want: bool) {
        tokio::time::timeout(Duration::from_secs(120), rx.wait_for(|v| *v == want))
            .await
            .expect("leadership did not change in time")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn one_of_two_leads_and_the_other_takes_over_after_release() {
        let store = FakeLeaseStore::default();
        let (a_tx, mut a_rx) = watch::channel(false);
        let (b_tx, b_rx) = watch::channel(false);
        let a_stop = CancellationToken::new();
        let b_stop = CancellationToken::new();
        let a = tokio::spawn(run(
            store.clone(),
            ElectionSettings::new("a".into()),
            a_tx,
            a_stop.clone(),
            clock,
        ));
        wait_for(&mut a_rx, true).await;
        let b = tokio::spawn(run(
            store.clone(),
            ElectionSettings::new("b".into()),
            b_tx,
            b_stop.clone(),
            clock,
        ));
        // A minute of renewals: b never leads while a renews.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(!*b_rx.borrow(), "two leaders");
            assert!(*a_rx.borrow());
        }
        a_stop.cancel();
        a.await.unwrap();
        let released_at = Instant::now();
        let mut b_rx = b_rx;
        wait_for(&mut b_rx, true).await;
        assert!(released_at.elapsed() <= Duration::from_secs(2));
        assert_eq!(store.holder().as_deref(), Some("b"));
        // Within one retry period (not the 15 s lease duration), and as a free Lease: a released
        // it on shutdown (a takeover from a live holder would count a transition).
        assert_eq!(store.record().unwrap().transitions, 0);
        b_stop.cancel();
        b.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_crashed_leader_is_replaced_after_the_lease_duration_only() {
        let store = FakeLeaseStore::default();
        let (a_tx, mut a_rx) = watch::channel(false);
        let a = tokio::spawn(run(
            store.clone(),
            ElectionSettings::new("a".into()),
            a_tx,
            CancellationToken::new(),
            clock,
        ));
        wait_for(&mut a_rx, true).await;
        a.abort(); // a crash: no release
        let _ = a.await;
        let started = Instant::now();
        let (b_tx, mut b_rx) = watch::channel(false);
        let b_stop = CancellationToken::new();
        let b = tokio::spawn(run(
            store.clone(),
            ElectionSettings::new("b".into()),
            b_tx,
            b_stop.clone(),
            clock,
        ));
        wait_for(&mut b_rx, true).await;
        assert!(started.elapsed() >= Duration::from_secs(15));
        assert_eq!(store.record().unwrap().transitions, 1);
        b_stop.cancel();
        b.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_steps_down_without_spinning() {
        let store = FakeLeaseStore::default();
        let (tx, mut rx) = watch::channel(false);
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            store.clone(),
            ElectionSettings::new("a".into()),
            tx,
            stop.clone(),
            clock,
        ));
        wait_for(&mut rx, true).await;
        store.set_down(true);
        let writes = store.writes();
        wait_for(&mut rx, false).await;
        store.set_down(false);
        wait_for(&mut rx, true).await;
        assert!(store.writes() > writes);
        stop.cancel();
        task.await.unwrap();
    }
}
