//! `--shard-from-statefulset`: this pod's shard is its StatefulSet ordinal, the total the
//! StatefulSet's `spec.replicas`, watched live. A change of replicas re-shards in place: the
//! next snapshot is split by the new total, with no restart and nothing to reload (every replica
//! watches every node anyway). Until the StatefulSet has been read the total is 0 and the
//! instance emits only its own self-metrics; readiness waits for that first read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::options::ShardMode;
use crate::hub::{Provider, RunOutcome};
use crate::k8s::role::Role;
use crate::model::Shard;
use crate::shared::error::{Cause, Error, Result};
use crate::sources::runner;

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

/// Starts what `mode` needs: nothing (`Off`), the fixed shard recorded (`--shard`), or the
/// StatefulSet watcher (`--shard-from-statefulset`, in `namespace`, else the client's). Sharding
/// is the cluster role's only: any other role with a shard mode is refused.
pub fn start(
    mode: &ShardMode,
    role: Role,
    client: Option<&kube::Client>,
    namespace: Option<&str>,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Option<JoinHandle<()>>> {
    if *mode != ShardMode::Off && role != Role::Cluster {
        return Err(Error::Config {
            option: "--shard",
            value: format!("{mode:?}"),
            reason: format!(
                "sharding applies to the cluster role only (this is the {} role)",
                role.as_str()
            ),
        });
    }
    match (mode, client) {
        (ShardMode::Off, _) => Ok(None),
        (ShardMode::Static(s), _) => {
            tracing::info!(shard = s.index, total = s.total, "sharded");
            provider.cluster().record_shard(Some(*s));
            Ok(None)
        }
        (
            ShardMode::StatefulSet {
                statefulset,
                ordinal,
            },
            Some(client),
        ) => {
            let namespace = namespace.unwrap_or_else(|| client.default_namespace());
            tracing::info!(%namespace, %statefulset, ordinal, "shard from the StatefulSet");
            Ok(Some(spawn(
                client.clone(),
                namespace,
                statefulset,
                *ordinal,
                provider,
                cancel.clone(),
            )))
        }
        (ShardMode::StatefulSet { .. }, None) => Err(Error::kube(
            "--shard-from-statefulset",
            Cause::message("no Kubernetes client was built"),
        )),
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
                    runner::record(provider.as_ref(), SOURCE, listing.elapsed(), RunOutcome::Ok);
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
    runner::record(
        provider,
        SOURCE,
        Duration::ZERO,
        RunOutcome::Failed {
            reason: crate::sources::cluster::watchers::watch_error_reason(e).into(),
            message: e.to_string(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use std::time::SystemTime;

    /// The role check and the modes that need no API server: `--shard` outside the cluster
    /// role is refused with the flag named, a fixed shard is recorded, no shard records
    /// nothing, and a StatefulSet shard without a client is an error, not a silent no-shard.
    #[test]
    fn start_checks_the_role_and_records_a_fixed_shard() {
        let cancel = CancellationToken::new();
        let fixed = ShardMode::Static(Shard { index: 1, total: 3 });
        let store = Arc::new(crate::hub::Store::new());
        for role in [Role::Node, Role::Host] {
            let err = start(&fixed, role, None, None, store.clone(), &cancel)
                .expect_err("refused outside the cluster role")
                .to_string();
            assert!(
                err.contains("--shard") && err.contains("cluster role only"),
                "{err}"
            );
        }
        let shard_now = || store.snapshot(SystemTime::now()).selection.shard;
        assert!(matches!(
            start(
                &ShardMode::Off,
                Role::Node,
                None,
                None,
                store.clone(),
                &cancel
            ),
            Ok(None)
        ));
        assert_eq!(shard_now(), None);
        let started = start(&fixed, Role::Cluster, None, None, store.clone(), &cancel);
        assert!(matches!(started, Ok(None)), "nothing to run");
        assert_eq!(shard_now(), Some(Shard { index: 1, total: 3 }));
        let sts = ShardMode::StatefulSet {
            statefulset: "kube-prober".into(),
            ordinal: 0,
        };
        let err = start(&sts, Role::Cluster, None, None, store.clone(), &cancel)
            .expect_err("a StatefulSet shard needs a client")
            .to_string();
        assert!(err.contains("--shard-from-statefulset"), "{err}");
    }

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
