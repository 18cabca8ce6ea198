//! Metric descriptors (gke-prober's listmd): listing those under the prefix, and deleting
//! them with their data.

use gcloud_sdk::google::monitoring::v3::{
    DeleteMetricDescriptorRequest, ListMetricDescriptorsRequest,
};

use super::client::{GcmClient, connect};
use super::{GcmClientConfig, config_error, validate_prefix};
use crate::shared::error::{Cause, Error, GrpcFailure, Result};

fn rpc_error(what: &str, failure: GrpcFailure) -> Error {
    Error::http(format!("Cloud Monitoring {what}"), Cause::Grpc(failure))
}

/// Metric descriptor types of this project under `workload.googleapis.com/<prefix>/`.
pub async fn list_descriptors(
    cfg: &GcmClientConfig,
    project: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    let mut client = connect(cfg).await?;
    list_with(&mut client, project, prefix).await
}

async fn list_with(client: &mut GcmClient, project: &str, prefix: &str) -> Result<Vec<String>> {
    validate_prefix("--prefix", prefix)?;
    if project.is_empty() {
        return Err(config_error("gcm project", "", "must not be empty"));
    }
    // The trailing '/' matters: `kube-prober` must not match `kube-prober-old/...`
    // (gke-prober's listmd compared without it).
    let want = format!("workload.googleapis.com/{prefix}/");
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let req = ListMetricDescriptorsRequest {
            name: format!("projects/{project}"),
            filter: format!("metric.type = starts_with(\"{want}\")"),
            page_size: 500,
            page_token: page_token.clone(),
            active_only: false,
        };
        let resp = client
            .list_metric_descriptors(req)
            .await
            .map_err(|s| rpc_error("ListMetricDescriptors", GrpcFailure::new(s)))?
            .into_inner();
        out.extend(
            resp.metric_descriptors
                .into_iter()
                .map(|d| d.r#type)
                .filter(|t| t.starts_with(&want)),
        );
        if resp.next_page_token.is_empty() || resp.next_page_token == page_token {
            break;
        }
        page_token = resp.next_page_token;
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Deletes the descriptors [`list_descriptors`] finds (and with them their data); returns the
/// deleted types. Stops at the first failure, naming what was deleted before it.
pub async fn delete_descriptors(
    cfg: &GcmClientConfig,
    project: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    let mut client = connect(cfg).await?;
    let types = list_with(&mut client, project, prefix).await?;
    let mut deleted = Vec::with_capacity(types.len());
    for t in types {
        let req = DeleteMetricDescriptorRequest {
            name: format!("projects/{project}/metricDescriptors/{t}"),
        };
        if let Err(s) = client.delete_metric_descriptor(req).await {
            let failure = GrpcFailure::new(s).after(deleted);
            return Err(rpc_error(&format!("DeleteMetricDescriptor {t}"), failure));
        }
        deleted.push(t);
    }
    Ok(deleted)
}
