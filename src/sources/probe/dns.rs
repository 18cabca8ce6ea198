//! DNS probes: the name must resolve to at least one address (cluster DNS:
//! `kubernetes.default.svc.cluster.local`).

use super::{Failure, Probe};

#[derive(Debug, Clone)]
pub struct DnsProbe {
    name: String,
    host: String,
}

impl DnsProbe {
    pub fn new(name: &str, host: &str) -> Self {
        DnsProbe {
            name: name.into(),
            host: host.into(),
        }
    }
}

impl Probe for DnsProbe {
    fn name(&self) -> &str {
        &self.name
    }

    fn target(&self) -> &str {
        &self.host
    }

    async fn check(&self) -> Result<(), Failure> {
        let addrs = tokio::net::lookup_host((self.host.as_str(), 0))
            .await
            .map_err(|e| Failure::new("dns", format!("{}: {e}", self.host)))?;
        if addrs.count() == 0 {
            return Err(Failure::new(
                "no_items",
                format!("{} resolved to no address", self.host),
            ));
        }
        Ok(())
    }
}
