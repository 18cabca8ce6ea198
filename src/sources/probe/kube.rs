//! Probes through the Kubernetes API: metrics-server answers with items; the API server's
//! `/readyz` says ok.

use super::{Failure, Probe};
use crate::k8s::stream_list::{ListError, NODE_METRICS_PATH, Reading, list_items};

/// The first NodeMetrics item is read only to be counted: past this it counts as there.
const ITEM_BYTES: usize = 1 << 20;

/// A streamed LIST's failure as a probe failure: what kube's error says, or `bad_body` for an
/// answer that is not a list.
fn list_failure(e: ListError) -> Failure {
    match e {
        ListError::Kube { error, .. } => kube_failure(error),
        ListError::Parse(cause) => Failure::new("bad_body", cause.to_string()),
    }
}

fn kube_failure(e: kube::Error) -> Failure {
    if let Some(t) = crate::shared::limit::find_too_large(&e) {
        return Failure::new("too_large", t.to_string());
    }
    match &e {
        kube::Error::Api(s) => Failure::new(format!("status_{}", s.code), e.to_string()),
        _ => Failure::new("error", e.to_string()),
    }
}

/// `metrics.k8s.io` answers a NodeMetrics list with at least one item.
#[derive(Clone)]
pub struct MetricsServerProbe {
    client: kube::Client,
}

impl MetricsServerProbe {
    pub fn new(client: kube::Client) -> Self {
        MetricsServerProbe { client }
    }
}

impl Probe for MetricsServerProbe {
    fn name(&self) -> &str {
        "metrics_server"
    }

    fn target(&self) -> &str {
        "metrics.k8s.io/v1beta1/nodes"
    }

    async fn check(&self) -> Result<(), Failure> {
        // metrics-server ignores `limit` and answers every node: the list is read as a stream
        // and dropped after its first item, whatever the cluster's size.
        let reading = Reading {
            max_item: ITEM_BYTES,
            stop_after: Some(1),
            page: None,
        };
        let listed = list_items(&self.client, NODE_METRICS_PATH, reading, &mut |_| {})
            .await
            .map_err(list_failure)?;
        if listed.items == 0 {
            return Err(Failure::new(
                "no_items",
                "metrics-server answered with no NodeMetrics",
            ));
        }
        Ok(())
    }
}

/// The API server's `/readyz` answers `ok`.
#[derive(Clone)]
pub struct ApiServerReadyProbe {
    client: kube::Client,
}

impl ApiServerReadyProbe {
    pub fn new(client: kube::Client) -> Self {
        ApiServerReadyProbe { client }
    }
}

impl Probe for ApiServerReadyProbe {
    fn name(&self) -> &str {
        "apiserver_readyz"
    }

    fn target(&self) -> &str {
        "/readyz"
    }

    async fn check(&self) -> Result<(), Failure> {
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| Failure::new("error", e.to_string()))?;
        let text = self.client.request_text(req).await.map_err(kube_failure)?;
        if text.trim() != "ok" {
            let shown: String = text.chars().take(100).collect();
            return Err(Failure::new("bad_body", format!("/readyz said {shown:?}")));
        }
        Ok(())
    }
}
