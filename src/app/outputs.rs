//! The outputs, started: the tick loop that publishes each snapshot's bodies, and the push
//! outputs with their leadership.

use super::*;

/// Makes a snapshot every `interval` (every 200 ms until the first ready one) and publishes it.
pub(super) async fn tick_loop(
    store: Arc<Store>,
    tx: watch::Sender<Arc<Published>>,
    interval: Duration,
    usage_source: &'static str,
    watcher_opts: WatcherConfig,
    after_tick: Option<fn()>,
    cancel: CancellationToken,
) {
    let mut ready = false;
    loop {
        let wait = if ready {
            interval
        } else {
            interval.min(Duration::from_millis(200))
        };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        let started = Instant::now();
        // Off the async workers: at 5,000 nodes this is ~100 ms of CPU, and scrapes, watch
        // events and pushes should not wait behind it.
        let tick_store = store.clone();
        // The renderers carry over from tick to tick: only what changed is written again.
        let renderers = tx.borrow().renderers().clone();
        let made = tokio::task::spawn_blocking(move || {
            let snapshot = Arc::new(tick_store.snapshot(SystemTime::now()));
            Published::render_next(&renderers, snapshot, usage_source, watcher_opts)
        })
        .await;
        let published = match made {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "making the snapshot failed; keeping the previous one");
                continue;
            }
        };
        if published.ready && !ready {
            ready = true;
            tracing::info!(
                nodes = published.snapshot.nodes.len(),
                "ready: first complete snapshot"
            );
        }
        let (tick, nodes) = (published.snapshot.tick, published.snapshot.nodes.len());
        drop(tx.send_replace(Arc::new(published)));
        let took = started.elapsed();
        store.record_tick(took);
        // Spawned and not yet finished (tokio's stable runtime metric): what a leak of tasks
        // would make grow (the soak in docs/reliability.md watches it).
        store.record_alive_tasks(
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks() as u64,
        );
        // Off by default; `--log-level info,kube_prober::app=debug` shows when each tick's
        // bodies were served and what they cost (benches count ticks by it).
        tracing::debug!(tick, nodes, took_ms = took.as_millis() as u64, "tick made");
        if let Some(f) = after_tick {
            let _ = tokio::task::spawn_blocking(f).await;
        }
    }
}

/// What the sinks need to know about this instance.
pub(super) struct SinkContext<'a> {
    pub(super) node_name: &'a str,
    pub(super) cluster_name: &'a str,
    pub(super) identity: &'a Identity,
    pub(super) kube_client: Option<&'a kube::Client>,
}

/// The running push outputs and the leader elector.
pub(super) struct Sinks {
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) elector: Option<Elector>,
}

/// The Lease elector's cancel token and task.
pub(super) type Elector = (CancellationToken, JoinHandle<()>);

impl Sinks {
    pub(super) async fn shutdown(self) {
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some((cancel, task)) = self.elector {
            cancel.cancel();
            let _ = task.await;
        }
    }
}

/// Starts each configured push output on its own ticker and, in the cluster role, the Lease
/// elector that decides which replica pushes cluster-level series.
pub(super) async fn spawn_sinks(
    cfg: &Config,
    role: Role,
    ctx: &SinkContext<'_>,
    published: &watch::Receiver<Arc<Published>>,
    store: Arc<Store>,
    cancel: &CancellationToken,
) -> Result<Sinks> {
    let sc = &cfg.sinks;
    let mut sinks = Sinks {
        tasks: Vec::new(),
        elector: None,
    };
    if sc.kinds.is_empty() {
        if sc.leader.enabled == Some(true) {
            tracing::warn!("--leader-elect has no effect without a --sink");
        }
        return Ok(sinks);
    }
    let schedule = SinkSchedule {
        interval: sc.interval,
        timeout: sc.timeout,
        final_push: cfg.shutdown_timeout.min(sc.timeout),
    };
    // This replica's name in the Lease and in `service.instance.id`.
    let instance_id = match &sc.leader.identity {
        Some(i) => i.clone(),
        None => format!("{}_{}", local_hostname()?, std::process::id()),
    };
    // Build every sink first: a bad setting stops the start before anything runs.
    let (gcm, otlp) = build_sinks(sc, role, ctx, &instance_id).await?;
    let leadership = leadership(cfg, role, ctx, instance_id, &store, &mut sinks)?;
    let provider: Arc<dyn Provider> = store;
    if let Some(o) = otlp {
        let t = push::spawn(
            o,
            schedule,
            published,
            provider.clone(),
            &leadership,
            cancel,
        );
        sinks.tasks.push(t);
    }
    if let Some(g) = gcm {
        let t = push::spawn(
            g,
            schedule,
            published,
            provider.clone(),
            &leadership,
            cancel,
        );
        sinks.tasks.push(t);
    }
    tracing::info!(
        sinks = %sc.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(","),
        interval = ?sc.interval,
        "push outputs started"
    );
    Ok(sinks)
}

/// Each push output of `--sink`, built by its own constructor from its config and what the
/// wiring knows of this instance.
async fn build_sinks(
    sc: &SinksConfig,
    role: Role,
    ctx: &SinkContext<'_>,
    instance_id: &str,
) -> Result<(Option<Arc<gcm::GcmSink>>, Option<Arc<otlp::OtlpSink>>)> {
    let start = PushStart {
        role: role.as_str(),
        node_name: ctx.node_name,
        cluster_name: ctx.cluster_name,
        project: ctx.identity.project.as_deref(),
        location: ctx.identity.location.as_deref(),
        instance_id,
    };
    let (mut gcm, mut otlp) = (None, None);
    for kind in &sc.kinds {
        match (kind, &sc.otlp) {
            (SinkKind::Gcm, _) => gcm = Some(gcm::start::start(&sc.gcm, &start).await?),
            (SinkKind::Otlp, Some(config)) => otlp = Some(otlp::start::start(config, &start)?),
            // Resolved whenever `--sink otlp` is given (`Config::sinks`).
            (SinkKind::Otlp, None) => {}
        }
    }
    Ok((gcm, otlp))
}

/// Whether this replica may push cluster-level series: Lease election in the cluster role
/// (unless turned off), nothing to elect in the others.
pub(super) fn leadership(
    cfg: &Config,
    role: Role,
    ctx: &SinkContext<'_>,
    instance_id: String,
    store: &Arc<Store>,
    sinks: &mut Sinks,
) -> Result<Leadership> {
    Ok(match (role, cfg.sinks.leader.enabled, ctx.kube_client) {
        (Role::Cluster, None | Some(true), Some(client)) => {
            let (leading, elector) = start_election(cfg, client, instance_id, store)?;
            sinks.elector = Some(elector);
            Some(leading)
        }
        (Role::Cluster, Some(false), _) => {
            tracing::info!("leader election off: this replica pushes everything");
            None
        }
        (_, Some(true), _) => {
            tracing::warn!(
                role = role.as_str(),
                "--leader-elect applies to the cluster role only; ignored"
            );
            None
        }
        _ => None,
    })
}

/// Starts the Lease elector, with the leadership mirrored into the hub.
pub(super) fn start_election(
    cfg: &Config,
    client: &kube::Client,
    instance_id: String,
    store: &Arc<Store>,
) -> Result<(tokio::sync::watch::Receiver<bool>, Elector)> {
    let lc = cfg.sinks.leader.lease(
        cfg.scope.shard.index(),
        client.default_namespace(),
        instance_id,
    )?;
    tracing::info!(
        lease = %format!("{}/{}", lc.namespace, lc.name),
        identity = %lc.identity,
        "leader election on: only the Lease holder pushes cluster-level series"
    );
    let elector_cancel = CancellationToken::new();
    let lease = format!("{}/{}", lc.namespace, lc.name);
    let elector = leader::start(client.clone(), lc, elector_cancel.clone());
    // Leadership on /metrics (kube_prober_leader), from every change the elector makes.
    let mut leading = elector.leading.clone();
    let recorder = store.clone();
    let mirror = tokio::spawn(async move {
        loop {
            let now = *leading.borrow_and_update();
            recorder.sink().record_leadership(&lease, now);
            if leading.changed().await.is_err() {
                break;
            }
        }
    });
    let task = tokio::spawn(async move {
        let _ = elector.task.await;
        let _ = mirror.await;
    });
    Ok((elector.leading, (elector_cancel, task)))
}
