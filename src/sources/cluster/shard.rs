//! `--shard-from-statefulset`: this pod's shard is its StatefulSet ordinal, the total the
//! StatefulSet's `spec.replicas`, watched live. A change of replicas re-shards in place: the
//! next snapshot is split by the new total, with no restart and nothing to reload (every replica
//! watches every node anyway). Until the StatefulSet has been read the total is 0 and the
//! instance emits only its own self-metrics; readiness waits for that first read.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::hub::{Provider, RunOutcome};
use crate::model::Shard;

/// The source name on the self-metrics.
pub const SOURCE: &str = "watch_statefulset";

/// The shard of the pod with `ordinal` in `sts`: the total is `spec.replicas` (1 when unset, the
/// API's default). An ordinal at or past the total (a pod being scaled away) owns nothing.
pub fn shard_of_statefulset(sts: &StatefulSet, ordinal: u32) -> Shard {
    let replicas = sts.spec.replicas.unwrap_or(1);
    Shard {
        index: ordinal,
        total: u32::try_from(replicas).unwrap_or(0),
    }
}

/// Watches the StatefulSet `name` in `namespace` and records this pod's shard on every change.
pub fn spawn(
    client: kube::Client,
    namespace: &str,
    name: &str,
    ordinal: u32,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    provider.source().register_watch(SOURCE, "statefulsets");
    provider.cluster().record_shard(Some(Shard {
        index: ordinal,
        total: 0,
    }));
    let api: Api<StatefulSet> = Api::namespaced(client, namespace);
    let wc = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(api, wc).default_backoff();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut listing = Instant::now();
        let mut current: Option<Shard> = None;
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => break,
                ev = stream.next() => ev,
            };
            let sts = match ev {
                None => break,
                Some(Ok(Event::Init)) => {
                    listing = Instant::now();
                    continue;
                }
                Some(Ok(Event::InitDone)) => {
                    provider.source().record_source_run(
                        SOURCE,
                        SystemTime::now(),
                        listing.elapsed(),
                        RunOutcome::Ok,
                    );
                    if current.is_none() {
                        tracing::warn!(statefulset = %name, "StatefulSet not found; emitting self-metrics only until it is");
                    }
                    continue;
                }
                Some(Ok(Event::Apply(s) | Event::InitApply(s))) => s,
                Some(Ok(Event::Delete(_))) => {
                    tracing::warn!(statefulset = %name, "StatefulSet deleted; keeping the last shard count");
                    continue;
                }
                Some(Err(e)) => {
                    record_failure(provider.as_ref(), &e);
                    continue;
                }
            };
            let shard = shard_of_statefulset(&sts, ordinal);
            if current != Some(shard) {
                tracing::info!(
                    statefulset = %name,
                    shard = shard.index,
                    total = shard.total,
                    "shard from the StatefulSet"
                );
                current = Some(shard);
                provider.cluster().record_shard(Some(shard));
            }
        }
    })
}

/// A failed watch: logged, and counted as a failed run of [`SOURCE`].
fn record_failure(provider: &dyn Provider, e: &watcher::Error) {
    tracing::warn!(source = SOURCE, error = %e, "StatefulSet watch failed; retrying");
    provider.source().record_source_run(
        SOURCE,
        SystemTime::now(),
        Duration::ZERO,
        RunOutcome::Failed {
            reason: crate::sources::cluster::watchers::watch_error_reason(SOURCE, e).into(),
            message: e.to_string(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;

    #[test]
    fn total_is_spec_replicas_defaulting_to_one() {
        let mut sts = StatefulSet::default();
        assert_eq!(shard_of_statefulset(&sts, 0), Shard { index: 0, total: 1 });
        sts.spec = StatefulSetSpec {
            replicas: Some(3),
            ..Default::default()
        };
        assert_eq!(shard_of_statefulset(&sts, 2), Shard { index: 2, total: 3 });
        sts.spec = StatefulSetSpec {
            replicas: Some(-1),
            ..Default::default()
        };
        assert_eq!(shard_of_statefulset(&sts, 0).total, 0);
    }
}
