//! Lease-based leader election for the `cluster` role's replicas: only the holder of a
//! coordination.k8s.io/v1 Lease pushes cluster-level series; every replica keeps serving
//! `/metrics` and `/watcher`.
//!
//! The protocol is client-go's `leaderelection` on a `Lease` lock (kube-runtime 5 ships no
//! elector), written against [`Api<Lease>`]:
//! - every `retry_period` a follower reads the Lease. It takes it when there is none (create; a
//!   409 means someone else won the race), when the record already names us, when the record has
//!   no holder (released), or when the record has not changed for its `leaseDurationSeconds`
//!   **as observed here**: the clock starts when this process last saw the record change, never
//!   from the server's `renewTime`, so clock skew between machines plays no part;
//! - a takeover bumps `leaseTransitions` and sets `acquireTime`; every write is a PUT carrying
//!   the `resourceVersion` it read, so of two writers racing only one succeeds (409 Conflict);
//! - the leader renews every `retry_period` with a PUT on its cached copy; a 409 re-reads the
//!   Lease and it stays leader only if the record still names it;
//! - leadership (`true`) is announced only after a successful write, and ends (`false`, at once)
//!   when another holder is seen, when the Lease is gone, or when no renewal *sent* in the last
//!   `renew_deadline` has succeeded — checked on a timer, not after a request returns, so a hung
//!   request cannot keep us leading;
//! - on cancel a leader says `false`, then releases the Lease (no holder, `leaseDurationSeconds:
//!   1`, as client-go's `ReleaseOnCancel`) within [`RELEASE_BOUND`], so another replica takes
//!   over within one `retry_period` instead of a lease duration.
//!
//! Why two instances never lead at once: the old leader's last successful renewal was *sent* at
//! `t`, so it committed at or after `t`, and every other replica saw that record at or after the
//! commit. A replica takes over only after seeing no change for the record's lease duration and
//! then winning a conditional write on that very version, so no earlier than `t +
//! lease_duration`; the old leader stepped down by `t + renew_deadline` (or lost the write race
//! and stepped down on seeing the new holder). The margin `lease_duration - renew_deadline`
//! (5 s by default) absorbs clock-rate differences and the time a push takes to notice `false`
//! (the push runner in [`crate::outputs::push`] aborts a cluster-level push on that change).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::shared::error::{Error, Result};

/// The longest a release of the Lease on shutdown may take (also capped at `renew_deadline`).
pub const RELEASE_BOUND: Duration = Duration::from_secs(2);

/// Which Lease to compete for, as whom, and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity as written to `holderIdentity` (the pod name); unique per replica.
    pub identity: String,
    /// How long followers wait, after last seeing the record change, before taking over; written
    /// as `leaseDurationSeconds` (rounded up to whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often followers try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's default lease duration.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// client-go's default renew deadline.
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// client-go's default retry period.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// A config with client-go's default timings (15 s / 10 s / 2 s).
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> LeaseConfig {
        LeaseConfig {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        }
    }

    /// Names non-empty, `0 < retry_period < renew_deadline < lease_duration`, and the lease
    /// duration fits `leaseDurationSeconds`.
    pub fn validate(&self) -> Result<()> {
        fn bad(option: &'static str, value: String, reason: &str) -> Result<()> {
            Err(Error::Config {
                option,
                value,
                reason: reason.to_string(),
            })
        }
        let fmt = |d: Duration| humantime::format_duration(d).to_string();
        for (option, value) in [
            ("--leader-elect-lease-name", &self.name),
            ("--leader-elect-namespace", &self.namespace),
            ("--leader-elect-identity", &self.identity),
        ] {
            if value.trim().is_empty() {
                return bad(option, value.clone(), "must not be empty");
            }
        }
        if self.retry_period.is_zero() {
            return bad(
                "--leader-elect-retry-period",
                fmt(self.retry_period),
                "must be greater than zero",
            );
        }
        if self.renew_deadline <= self.retry_period {
            return bad(
                "--leader-elect-renew-deadline",
                fmt(self.renew_deadline),
                &format!(
                    "must be longer than the retry period ({})",
                    fmt(self.retry_period)
                ),
            );
        }
        if self.lease_duration <= self.renew_deadline {
            return bad(
                "--leader-elect-lease-duration",
                fmt(self.lease_duration),
                &format!(
                    "must be longer than the renew deadline ({})",
                    fmt(self.renew_deadline)
                ),
            );
        }
        if self.lease_duration > Duration::from_secs(i32::MAX as u64) {
            return bad(
                "--leader-elect-lease-duration",
                fmt(self.lease_duration),
                "is too long for leaseDurationSeconds",
            );
        }
        Ok(())
    }

    /// `spec.leaseDurationSeconds` as written: the lease duration rounded up to whole seconds.
    pub fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX).max(1)
    }
}

/// What an elector knows, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderStatus {
    /// Whether this instance leads (the same as the `bool` channel).
    pub leading: bool,
    /// `holderIdentity` of the last Lease record this instance read or wrote; `None` when the
    /// Lease has no holder or has not been read yet.
    pub holder: Option<String>,
    /// `leaseTransitions` of that record.
    pub lease_transitions: i32,
    /// When `leading` last changed (or the elector started). Taken before `true` is sent and
    /// after `false` is sent, so `[since true, since false]` covers the time the `bool` said
    /// `true`.
    pub since: std::time::Instant,
    /// How many times `leading` has changed in this process.
    pub changes: u64,
}

/// A running elector: its channels and its task.
#[derive(Debug)]
pub struct Elector {
    /// `true` while this instance leads; `false` at once when it stops (also when the task ends,
    /// panics or is aborted).
    pub leading: watch::Receiver<bool>,
    /// Holder, transitions and timing, for metrics.
    pub status: watch::Receiver<LeaderStatus>,
    /// Ends after `cancel` and the release of the Lease (bounded by [`RELEASE_BOUND`]).
    pub task: JoinHandle<()>,
}

/// Starts electing; see [`start`]. The receiver is [`crate::outputs::push::Leadership`]'s.
pub fn spawn(
    client: kube::Client,
    cfg: LeaseConfig,
    cancel: CancellationToken,
) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let elector = start(client, cfg, cancel);
    (elector.leading, elector.task)
}

/// Starts electing in a task of its own until `cancel`. Call [`LeaseConfig::validate`] first: an
/// invalid config is logged and the task ends at once, never leading.
pub fn start(client: kube::Client, cfg: LeaseConfig, cancel: CancellationToken) -> Elector {
    let (leading_tx, leading) = watch::channel(false);
    let (status_tx, status) = watch::channel(LeaderStatus {
        leading: false,
        holder: None,
        lease_transitions: 0,
        since: std::time::Instant::now(),
        changes: 0,
    });
    let signals = Signals {
        leading: leading_tx,
        status: status_tx,
    };
    let task = tokio::spawn(async move {
        let lease = format!("{}/{}", cfg.namespace, cfg.name);
        if let Err(e) = cfg.validate() {
            tracing::error!(%lease, error = %e, "leader election not started");
            return;
        }
        let api = Api::namespaced(client, &cfg.namespace);
        let runner = Runner {
            api,
            cfg,
            lease,
            observed: None,
            signals,
        };
        runner.run(cancel).await;
    });
    Elector {
        leading,
        status,
        task,
    }
}

/// The senders; dropping them (task end, panic, abort) says `false`.
struct Signals {
    leading: watch::Sender<bool>,
    status: watch::Sender<LeaderStatus>,
}

impl Signals {
    fn set_leading(&self, leading: bool) {
        if *self.leading.borrow() == leading {
            return;
        }
        let stamp = |s: &mut LeaderStatus| {
            s.leading = leading;
            s.since = std::time::Instant::now();
            s.changes += 1;
        };
        if leading {
            self.status.send_modify(stamp);
            self.leading.send_replace(true);
        } else {
            self.leading.send_replace(false);
            self.status.send_modify(stamp);
        }
    }

    fn set_record(&self, holder: Option<&str>, transitions: i32) {
        self.status.send_if_modified(|s| {
            let changed = s.holder.as_deref() != holder || s.lease_transitions != transitions;
            s.holder = holder.map(str::to_string);
            s.lease_transitions = transitions;
            changed
        });
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.set_leading(false);
    }
}

/// The last record seen and when it last changed (local clock).
struct Observed {
    lease: Lease,
    changed_at: Instant,
}

enum Acquire {
    /// We hold the Lease; the winning write was sent at `sent`.
    Won {
        sent: Instant,
        previous: Option<String>,
    },
    /// Someone else holds a live Lease.
    Held,
    /// A write lost to someone else's (409) or the Lease vanished; re-read next time.
    Raced,
}

enum Renewal {
    Renewed,
    /// 409, and the re-read record still names us: not renewed, still leading until the deadline.
    StillOurs,
    /// The record names someone else, or the Lease is gone.
    Lost(String),
}

enum Step<T> {
    /// With the shutdown deadline when one was already set.
    Cancelled(Option<Instant>),
    Deadline,
    Done(T),
}

struct Runner {
    api: Api<Lease>,
    cfg: LeaseConfig,
    /// `namespace/name`, for logs.
    lease: String,
    observed: Option<Observed>,
    signals: Signals,
}

fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn transitions_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
}

/// How long a record stays valid after it was seen to change: its `leaseDurationSeconds`, or
/// `fallback` when that is missing or not positive.
fn record_duration(lease: &Lease, fallback: Duration) -> Duration {
    match lease.spec.as_ref().and_then(|s| s.lease_duration_seconds) {
        Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs().into()),
        _ => fallback,
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// `current` claimed by `identity` at `now`: a renewal when the record already names us, else a
/// takeover (`leaseTransitions` + 1, `acquireTime` = now). Everything else is kept.
fn claimed(mut current: Lease, identity: &str, duration_secs: i32, now: Timestamp) -> Lease {
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    let ours = spec.holder_identity.as_deref() == Some(identity);
    if !ours {
        spec.holder_identity = Some(identity.to_string());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        spec.acquire_time = Some(MicroTime(now));
    }
    if spec.acquire_time.is_none() {
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.lease_duration_seconds = Some(duration_secs);
    spec.renew_time = Some(MicroTime(now));
    current
}

/// A new Lease held by `cfg.identity`.
fn fresh(cfg: &LeaseConfig, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(cfg.name.clone()),
            namespace: Some(cfg.namespace.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(cfg.identity.clone()),
            lease_duration_seconds: Some(cfg.lease_duration_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// `current` given up: no holder and a one-second duration (client-go's release); transitions
/// kept.
fn released(mut current: Lease, now: Timestamp) -> Lease {
    let spec = current.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    current
}

impl Runner {
    fn ours(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| holder_of(&o.lease) == Some(self.cfg.identity.as_str()))
    }

    /// Remembers `lease` as the latest record; restarts the expiry clock when its spec changed.
    fn observe(&mut self, lease: Lease) {
        let now = Instant::now();
        let (changed, old_holder) = match &self.observed {
            Some(o) => (
                o.lease.spec != lease.spec,
                holder_of(&o.lease).map(str::to_string),
            ),
            None => (true, None),
        };
        let holder = holder_of(&lease).map(str::to_string);
        if (self.observed.is_none() || holder != old_holder)
            && holder.as_deref() != Some(self.cfg.identity.as_str())
        {
            tracing::info!(
                lease = %self.lease,
                identity = %self.cfg.identity,
                holder = holder.as_deref().unwrap_or(""),
                "Lease holder observed"
            );
        }
        self.signals
            .set_record(holder.as_deref(), transitions_of(&lease));
        let changed_at = match &self.observed {
            Some(o) if !changed => o.changed_at,
            _ => now,
        };
        self.observed = Some(Observed { lease, changed_at });
    }

    /// Whether the observed record has gone unchanged for its lease duration.
    fn expired(&self, now: Instant) -> bool {
        self.observed.as_ref().is_none_or(|o| {
            now.saturating_duration_since(o.changed_at)
                >= record_duration(&o.lease, self.cfg.lease_duration)
        })
    }

    /// One follower attempt: read, then create, take over or renew when allowed.
    async fn try_acquire(&mut self) -> kube::Result<Acquire> {
        let pp = PostParams::default();
        let Some(current) = self.api.get_opt(&self.cfg.name).await? else {
            let sent = Instant::now();
            return match self
                .api
                .create(&pp, &fresh(&self.cfg, Timestamp::now()))
                .await
            {
                Ok(created) => {
                    self.observe(created);
                    Ok(Acquire::Won {
                        sent,
                        previous: None,
                    })
                }
                Err(e) if is_status(&e, 409) => {
                    tracing::debug!(lease = %self.lease, identity = %self.cfg.identity, "another candidate created the Lease first");
                    Ok(Acquire::Raced)
                }
                Err(e) => Err(e),
            };
        };
        self.observe(current.clone());
        let previous = holder_of(&current).map(str::to_string);
        let ours = previous.as_deref() == Some(self.cfg.identity.as_str());
        if previous.is_some() && !ours && !self.expired(Instant::now()) {
            return Ok(Acquire::Held);
        }
        let body = claimed(
            current,
            &self.cfg.identity,
            self.cfg.lease_duration_seconds(),
            Timestamp::now(),
        );
        let sent = Instant::now();
        match self.api.replace(&self.cfg.name, &pp, &body).await {
            Ok(written) => {
                self.observe(written);
                Ok(Acquire::Won { sent, previous })
            }
            Err(e) if is_status(&e, 409) || is_status(&e, 404) => {
                tracing::debug!(lease = %self.lease, identity = %self.cfg.identity, error = %e, "lost the race for the Lease");
                Ok(Acquire::Raced)
            }
            Err(e) => Err(e),
        }
    }

    /// One renewal by the leader: a PUT on the cached copy; a 409 re-reads.
    async fn renew(&mut self) -> kube::Result<Renewal> {
        let Some(observed) = &self.observed else {
            return Ok(Renewal::Lost("the Lease is unknown".into()));
        };
        if !self.ours() {
            let holder = holder_of(&observed.lease).unwrap_or("").to_string();
            return Ok(Renewal::Lost(format!("the Lease is held by '{holder}'")));
        }
        let body = claimed(
            observed.lease.clone(),
            &self.cfg.identity,
            self.cfg.lease_duration_seconds(),
            Timestamp::now(),
        );
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &body)
            .await
        {
            Ok(written) => {
                self.observe(written);
                Ok(Renewal::Renewed)
            }
            Err(e) if is_status(&e, 409) => {
                tracing::info!(lease = %self.lease, identity = %self.cfg.identity, "Lease renewal conflicted; re-reading");
                match self.api.get_opt(&self.cfg.name).await? {
                    None => Ok(Renewal::Lost("the Lease was deleted".into())),
                    Some(current) => {
                        self.observe(current);
                        if self.ours() {
                            Ok(Renewal::StillOurs)
                        } else {
                            let holder = self
                                .observed
                                .as_ref()
                                .and_then(|o| holder_of(&o.lease))
                                .unwrap_or("")
                                .to_string();
                            Ok(Renewal::Lost(format!("the Lease is held by '{holder}'")))
                        }
                    }
                }
            }
            Err(e) if is_status(&e, 404) => Ok(Renewal::Lost("the Lease was deleted".into())),
            Err(e) => Err(e),
        }
    }

    /// The shutdown deadline for a cancel seen now: [`RELEASE_BOUND`], at most `renew_deadline`.
    fn release_deadline(&self) -> Instant {
        Instant::now() + RELEASE_BOUND.min(self.cfg.renew_deadline)
    }

    /// Gives the Lease up if the last record names us, by `until`.
    async fn release(&mut self, until: Instant) {
        match tokio::time::timeout_at(until, self.release_once()).await {
            Ok(Ok(true)) => tracing::info!(
                lease = %self.lease,
                identity = %self.cfg.identity,
                "Lease released"
            ),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                lease = %self.lease,
                identity = %self.cfg.identity,
                error = %e,
                "Lease release failed; others take over when it expires"
            ),
            Err(_) => tracing::warn!(
                lease = %self.lease,
                identity = %self.cfg.identity,
                "Lease release timed out; others take over when it expires"
            ),
        }
    }

    async fn release_once(&mut self) -> kube::Result<bool> {
        for _ in 0..3 {
            let Some(observed) = &self.observed else {
                return Ok(false);
            };
            if !self.ours() {
                return Ok(false);
            }
            let body = released(observed.lease.clone(), Timestamp::now());
            match self
                .api
                .replace(&self.cfg.name, &PostParams::default(), &body)
                .await
            {
                Ok(written) => {
                    self.observe(written);
                    return Ok(true);
                }
                Err(e) if is_status(&e, 409) => match self.api.get_opt(&self.cfg.name).await? {
                    Some(current) => self.observe(current),
                    None => return Ok(false),
                },
                Err(e) if is_status(&e, 404) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    fn step_down(&self, reason: &str, shutting_down: bool) {
        self.signals.set_leading(false);
        let holder = self
            .observed
            .as_ref()
            .and_then(|o| holder_of(&o.lease))
            .unwrap_or("");
        if shutting_down {
            tracing::info!(lease = %self.lease, identity = %self.cfg.identity, holder, reason, "leadership given up");
        } else {
            tracing::warn!(lease = %self.lease, identity = %self.cfg.identity, holder, reason, "leadership lost");
        }
    }

    async fn run(mut self, cancel: CancellationToken) {
        self.elect(&cancel).await;
        tracing::info!(lease = %self.lease, identity = %self.cfg.identity, "leader election stopped");
    }

    /// Follows and leads until `cancel`; returns after the release.
    async fn elect(&mut self, cancel: &CancellationToken) {
        tracing::info!(
            lease = %self.lease,
            identity = %self.cfg.identity,
            lease_duration = ?self.cfg.lease_duration,
            renew_deadline = ?self.cfg.renew_deadline,
            retry_period = ?self.cfg.retry_period,
            "leader election started"
        );
        loop {
            let Some((last_ok, previous)) = self.follow(cancel).await else {
                return;
            };
            if Instant::now() < last_ok + self.cfg.renew_deadline {
                self.signals.set_leading(true);
                tracing::info!(
                    lease = %self.lease,
                    identity = %self.cfg.identity,
                    previous_holder = previous.as_deref().unwrap_or(""),
                    lease_transitions = self.observed.as_ref().map_or(0, |o| transitions_of(&o.lease)),
                    "leadership acquired"
                );
                let Some(reason) = self.lead(cancel, last_ok).await else {
                    return;
                };
                self.step_down(&reason, false);
            } else {
                tracing::warn!(lease = %self.lease, identity = %self.cfg.identity, "Lease written too late to lead on it; retrying");
            }
            if !self.wait_retry(cancel).await {
                return;
            }
        }
    }

    /// Waits one retry period; on `cancel` releases the Lease and returns false.
    async fn wait_retry(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => {
                self.release(self.release_deadline()).await;
                false
            }
            _ = tokio::time::sleep(self.cfg.retry_period) => true,
        }
    }

    /// Follows until one of our writes makes us the holder: when it was sent and the previous
    /// holder. `None` on `cancel`, after the release.
    async fn follow(&mut self, cancel: &CancellationToken) -> Option<(Instant, Option<String>)> {
        let mut failures = 0u32;
        loop {
            match self.acquire_step(cancel).await {
                Step::Done(Ok(Ok(Acquire::Won { sent, previous }))) => {
                    return Some((sent, previous));
                }
                Step::Done(Ok(Ok(Acquire::Held | Acquire::Raced))) => failures = 0,
                Step::Done(Ok(Err(e))) => {
                    failures += 1;
                    tracing::warn!(lease = %self.lease, identity = %self.cfg.identity, failures, error = %e, "could not read or write the leader Lease");
                }
                Step::Done(Err(_)) => {
                    failures += 1;
                    tracing::warn!(lease = %self.lease, identity = %self.cfg.identity, failures, timeout = ?self.cfg.renew_deadline, "leader Lease request timed out");
                }
                Step::Cancelled(until) => {
                    let until = until.unwrap_or_else(|| self.release_deadline());
                    self.release(until).await;
                    return None;
                }
                Step::Deadline => {}
            }
            if !self.wait_retry(cancel).await {
                return None;
            }
        }
    }

    /// One attempt to acquire, bounded by the renew deadline. On `cancel` a write may be on
    /// its way: it is let land (bounded) so that the release knows whether the Lease is ours.
    async fn acquire_step(
        &mut self,
        cancel: &CancellationToken,
    ) -> Step<std::result::Result<kube::Result<Acquire>, tokio::time::error::Elapsed>> {
        let release_bound = RELEASE_BOUND.min(self.cfg.renew_deadline);
        let attempt = tokio::time::timeout(self.cfg.renew_deadline, self.try_acquire());
        tokio::pin!(attempt);
        tokio::select! {
            r = &mut attempt => Step::Done(r),
            _ = cancel.cancelled() => {
                let until = Instant::now() + release_bound;
                let _ = tokio::time::timeout_at(until, attempt).await;
                Step::Cancelled(Some(until))
            }
        }
    }

    /// Leads until a renewal deadline passes or someone else holds the Lease: the reason.
    /// `None` on `cancel`, after stepping down and the release.
    async fn lead(&mut self, cancel: &CancellationToken, mut last_ok: Instant) -> Option<String> {
        let retry = self.cfg.retry_period;
        let mut next = last_ok + retry;
        loop {
            let deadline = last_ok + self.cfg.renew_deadline;
            tokio::select! {
                _ = cancel.cancelled() => {
                    self.step_down("shutting down", true);
                    self.release(self.release_deadline()).await;
                    return None;
                }
                _ = tokio::time::sleep_until(next.min(deadline)) => {}
            }
            if Instant::now() >= deadline {
                return Some(format!(
                    "no successful renewal within the renew deadline ({:?})",
                    self.cfg.renew_deadline
                ));
            }
            let sent = Instant::now();
            next = sent + retry;
            let step = tokio::select! {
                _ = cancel.cancelled() => Step::Cancelled(None),
                _ = tokio::time::sleep_until(deadline) => Step::Deadline,
                r = self.renew() => Step::Done(r),
            };
            match step {
                Step::Cancelled(_) => {
                    self.step_down("shutting down", true);
                    self.release(self.release_deadline()).await;
                    return None;
                }
                Step::Deadline => {
                    return Some(format!(
                        "no successful renewal within the renew deadline ({:?}); a renewal is still in flight",
                        self.cfg.renew_deadline
                    ));
                }
                Step::Done(Ok(Renewal::Renewed)) => last_ok = sent,
                Step::Done(Ok(Renewal::StillOurs)) => {}
                Step::Done(Ok(Renewal::Lost(why))) => return Some(why),
                Step::Done(Err(e)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tracing::warn!(lease = %self.lease, identity = %self.cfg.identity, error = %e, ?left, "Lease renewal failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LeaseConfig {
        LeaseConfig::new("kube-prober", "kube-system", "pod-a")
    }

    #[test]
    fn defaults_are_valid_and_client_go_like() {
        let c = cfg();
        assert!(c.validate().is_ok());
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert_eq!(c.lease_duration_seconds(), 15);
    }

    #[test]
    fn validate_rejects_bad_values() {
        let option = |c: LeaseConfig| match c.validate() {
            Err(Error::Config { option, .. }) => option,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(
            option(LeaseConfig {
                name: String::new(),
                ..cfg()
            }),
            "--leader-elect-lease-name"
        );
        assert_eq!(
            option(LeaseConfig {
                namespace: " ".into(),
                ..cfg()
            }),
            "--leader-elect-namespace"
        );
        assert_eq!(
            option(LeaseConfig {
                identity: String::new(),
                ..cfg()
            }),
            "--leader-elect-identity"
        );
        assert_eq!(
            option(LeaseConfig {
                renew_deadline: Duration::from_secs(15),
                ..cfg()
            }),
            "--leader-elect-lease-duration"
        );
        assert_eq!(
            option(LeaseConfig {
                retry_period: Duration::from_secs(10),
                ..cfg()
            }),
            "--leader-elect-renew-deadline"
        );
        assert_eq!(
            option(LeaseConfig {
                retry_period: Duration::ZERO,
                ..cfg()
            }),
            "--leader-elect-retry-period"
        );
        assert!(
            LeaseConfig {
                lease_duration: Duration::from_secs(u64::MAX / 2),
                ..cfg()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn lease_seconds_round_up() {
        let c = LeaseConfig {
            lease_duration: Duration::from_millis(1500),
            renew_deadline: Duration::from_secs(1),
            retry_period: Duration::from_millis(200),
            ..cfg()
        };
        assert!(c.validate().is_ok());
        assert_eq!(c.lease_duration_seconds(), 2);
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn takeover_bumps_transitions_and_sets_acquire_time() {
        let old = claimed(fresh(&cfg(), at(100)), "pod-b", 15, at(100));
        let spec = old.spec.clone().unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
        assert_eq!(spec.lease_transitions, Some(1));

        let taken = claimed(old, "pod-c", 7, at(200));
        let spec = taken.spec.unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("pod-c"));
        assert_eq!(spec.lease_transitions, Some(2));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(200))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(200))));
        assert_eq!(spec.lease_duration_seconds, Some(7));
    }

    #[test]
    fn renewal_keeps_acquire_time_and_transitions() {
        let mine = fresh(&cfg(), at(100));
        let renewed = claimed(mine, "pod-a", 15, at(130));
        let spec = renewed.spec.unwrap_or_default();
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(100))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(130))));
    }

    #[test]
    fn release_clears_the_holder_and_shortens_the_lease() {
        let mine = claimed(fresh(&cfg(), at(100)), "pod-b", 15, at(100));
        let gone = released(mine, at(140));
        assert_eq!(holder_of(&gone), None);
        let spec = gone.spec.unwrap_or_default();
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn record_duration_falls_back_when_missing() {
        let mut l = fresh(&cfg(), at(1));
        assert_eq!(
            record_duration(&l, Duration::from_secs(3)),
            Duration::from_secs(15)
        );
        if let Some(s) = l.spec.as_mut() {
            s.lease_duration_seconds = Some(0);
        }
        assert_eq!(
            record_duration(&l, Duration::from_secs(3)),
            Duration::from_secs(3)
        );
        if let Some(s) = l.spec.as_mut() {
            s.holder_identity = Some(String::new());
        }
        assert_eq!(holder_of(&l), None);
    }
}
