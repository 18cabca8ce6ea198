//! The Cloud Monitoring client: a lazily connected gRPC channel (TLS with the webpki roots, or
//! plaintext for stand-ins) with the credentials middleware.

use std::sync::Arc;
use std::time::Duration;

use gcloud_sdk::google::monitoring::v3::metric_service_client::MetricServiceClient;
use gcloud_sdk::{GoogleAuthHeaders, GoogleAuthMiddleware};
use tonic::transport::{Channel, ClientTlsConfig};

use super::{GcmClientConfig, check_endpoint, config_error};
use crate::shared::error::{BoxError, Cause, Error, Result};

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const USER_AGENT: &str = concat!("kube-prober/", env!("CARGO_PKG_VERSION"));

/// The gcloud-sdk Cloud Monitoring client, with its credentials middleware.
pub type GcmClient = MetricServiceClient<GoogleAuthMiddleware>;

fn client_error(e: impl Into<BoxError>) -> Error {
    Error::http("Cloud Monitoring client", Cause::other(e))
}

/// A Cloud Monitoring client. The connection is opened on first use, so a sink can be made
/// while the network is still coming up; credentials are resolved here (a broken key file is
/// an error now) and tokens fetched per request (the metadata server on GKE).
pub async fn connect(cfg: &GcmClientConfig) -> Result<GcmClient> {
    let endpoint = cfg.endpoint();
    let tls_name = check_endpoint(endpoint)?;
    let mut ep = Channel::from_shared(endpoint.to_string())
        .map_err(|e| config_error("gcm endpoint", endpoint, &e.to_string()))?
        .connect_timeout(cfg.connect_timeout)
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .http2_keep_alive_interval(Duration::from_secs(60))
        .keep_alive_timeout(Duration::from_secs(20));
    if let Some(name) = tls_name {
        let tls = ClientTlsConfig::new().with_webpki_roots().domain_name(name);
        ep = ep
            .tls_config(tls)
            .map_err(|e| config_error("gcm endpoint", endpoint, &format!("TLS: {e}")))?;
    }
    let channel = ep.connect_lazy();
    let headers = if cfg.anonymous {
        GoogleAuthHeaders::from(
            gcloud_sdk::google_cloud_auth::credentials::anonymous::Builder::new().build(),
        )
    } else {
        GoogleAuthHeaders::from_adc_with_scopes(vec![SCOPE.to_string()])
            .await
            .map_err(|e| {
                Error::http(
                    "Cloud Monitoring credentials (Application Default Credentials)",
                    Cause::other(e),
                )
            })?
    };
    let mut svc =
        GoogleAuthMiddleware::new(channel, Arc::new(headers), None).map_err(client_error)?;
    svc.set_user_agent(USER_AGENT.to_string())
        .map_err(client_error)?;
    // Big descriptor lists stay well within 16 MiB.
    Ok(MetricServiceClient::new(svc).max_decoding_message_size(16 << 20))
}
