//! TLS on the listener: the certificate pair is read from files and re-read when they change
//! (cert-manager and kubelet-mounted Secrets rotate them in place), TLS 1.2 and 1.3 only,
//! aws-lc-rs only. With a client CA, a client certificate is verified when offered and its
//! subject (CN as the user, O as the groups, as the Kubernetes API server reads it) rides on each
//! request as a [`ClientCertUser`] extension, for [`super::auth`]. Connections are accepted by
//! [`super::listener`], plain or TLS alike.
//!
//! A bad new pair (unreadable, not PEM, key not matching the certificate) never replaces the
//! served one: it is logged and counted in `kube_prober_tls_reloads_total{result="error"}`, once
//! per distinct content, and the files are tried again when they change again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::outputs::families;
use crate::outputs::series::Labels;

/// Where the listener's certificate, key and (optional) client CA come from.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Verify client certificates against these CAs (offered certificates only: a client
    /// without one can still send a bearer token).
    pub client_ca_file: Option<PathBuf>,
    /// How often the files are compared with what is served.
    pub reload_interval: Duration,
}

/// The user a verified client certificate names: CN is the user, each O a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertUser {
    pub user: String,
    pub groups: Vec<String>,
}

/// Reload outcomes, rendered on `/metrics`.
#[derive(Debug, Default)]
pub struct TlsStats {
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
}

impl TlsStats {
    /// The rows this layer adds to `/metrics`.
    pub fn families(&self) -> Vec<(&'static families::Family, Vec<(Labels<'static>, f64)>)> {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        vec![(
            &families::TLS_RELOADS,
            vec![
                (vec![("result", "success")], v(&self.reloads_ok)),
                (vec![("result", "error")], v(&self.reloads_failed)),
            ],
        )]
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Why a certificate pair cannot be served: which file, and the error of the library that
/// refused it.
#[derive(Debug, thiserror::Error)]
pub enum BadPair {
    #[error("reading {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("certificate file: {0}")]
    CertPem(#[source] rustls::pki_types::pem::Error),
    #[error("certificate file: no CERTIFICATE block")]
    NoCertificate,
    #[error("key file: {0}")]
    KeyPem(#[source] rustls::pki_types::pem::Error),
    #[error("certificate and key do not form a pair: {0}")]
    NotAPair(#[source] rustls::Error),
}

/// Reads and checks a certificate chain and its key.
pub fn load_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, BadPair> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(BadPair::CertPem)?;
    if chain.is_empty() {
        return Err(BadPair::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(BadPair::KeyPem)?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(BadPair::NotAPair)
}

fn read(path: &Path) -> Result<Vec<u8>, BadPair> {
    std::fs::read(path).map_err(|source| BadPair::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The served pair, swapped in place when the files change.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<Arc<CertifiedKey>>,
    /// The file contents last tried, good or bad: the same bad pair is reported once.
    last_seen: std::sync::Mutex<(Vec<u8>, Vec<u8>)>,
    settings: TlsConfig,
    pub stats: Arc<TlsStats>,
}

impl CertStore {
    /// Loads the pair; an error names the file and the problem.
    pub fn load(settings: TlsConfig) -> Result<Arc<CertStore>, BadPair> {
        let cert = read(&settings.cert_file)?;
        let key = read(&settings.key_file)?;
        let pair = load_pair(&cert, &key)?;
        Ok(Arc::new(CertStore {
            current: RwLock::new(Arc::new(pair)),
            last_seen: std::sync::Mutex::new((cert, key)),
            settings,
            stats: Arc::default(),
        }))
    }

    /// Re-reads the files; swaps the pair in when they changed and form a good pair. Returns
    /// whether a new pair is now served.
    pub fn reload(&self) -> bool {
        let (cert, key) = match (
            read(&self.settings.cert_file),
            read(&self.settings.key_file),
        ) {
            (Ok(c), Ok(k)) => (c, k),
            (Err(e), _) | (_, Err(e)) => {
                // A file briefly missing mid-rotation is retried at the next interval; it is
                // not a new pair, so it is only logged.
                tracing::debug!(error = %e, "TLS files not readable; keeping the served pair");
                return false;
            }
        };
        {
            let mut seen = self.last_seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.0 == cert && seen.1 == key {
                return false;
            }
            *seen = (cert.clone(), key.clone());
        }
        match load_pair(&cert, &key) {
            Ok(pair) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pair);
                self.stats.reloads_ok.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    cert_file = %self.settings.cert_file.display(),
                    "TLS certificate reloaded"
                );
                true
            }
            Err(e) => {
                self.stats.reloads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    cert_file = %self.settings.cert_file.display(),
                    key_file = %self.settings.key_file.display(),
                    error = %e,
                    "new TLS certificate files rejected; still serving the previous pair"
                );
                false
            }
        }
    }

    /// Compares the files with the served pair every `reload_interval` until `cancel`.
    pub fn spawn_reloader(
        self: &Arc<Self>,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(store.settings.reload_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let s = store.clone();
                // File reads and key parsing are blocking work.
                let _ = tokio::task::spawn_blocking(move || s.reload()).await;
            }
        })
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }
}

/// Why the server's TLS configuration cannot be built: rustls's refusal, or the client CA file
/// at fault with the error of what read it.
#[derive(Debug, thiserror::Error)]
pub enum BadServerConfig {
    #[error("TLS versions: {0}")]
    Versions(#[source] rustls::Error),
    #[error("{0}")]
    Read(#[source] BadPair),
    #[error("{}: {source}", .path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{}: no CERTIFICATE block", .0.display())]
    NoClientCa(PathBuf),
}

/// The rustls server configuration: TLS 1.3 and 1.2, HTTP/1.1, certificates from `store`.
pub fn server_config(store: Arc<CertStore>) -> Result<Arc<ServerConfig>, BadServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(BadServerConfig::Versions)?;
    let builder = match &store.settings.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let pem = read(path).map_err(BadServerConfig::Read)?;
            let bad = |e: Box<dyn std::error::Error + Send + Sync>| BadServerConfig::ClientCa {
                path: path.clone(),
                source: e,
            };
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(e.into()))?;
                roots.add(cert).map_err(|e| bad(e.into()))?;
            }
            if roots.is_empty() {
                return Err(BadServerConfig::NoClientCa(path.clone()));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad(e.into()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(store);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The user a client certificate names (its subject's first CN; every O), `None` without a CN.
pub fn client_cert_user(der: &[u8]) -> Option<ClientCertUser> {
    use x509_cert::der::Decode as _;
    use x509_cert::der::asn1::ObjectIdentifier;
    const CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
    const O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let subject = cert.tbs_certificate().subject();
    let text = |atv: &x509_cert::attr::AttributeTypeAndValue| {
        x509_cert::ext::pkix::name::DirectoryString::try_from(&atv.value)
            .ok()
            .map(|s| s.value().into_owned())
    };
    let user = subject
        .iter()
        .filter(|a| a.oid == CN)
        .find_map(text)
        .filter(|u| !u.is_empty())?;
    let groups = subject
        .iter()
        .filter(|a| a.oid == O)
        .filter_map(text)
        .collect();
    Some(ClientCertUser { user, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(dn: &[(rcgen::DnType, &str)]) -> (String, String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    #[test]
    fn the_subject_names_user_and_groups() {
        let (_, _, der) = cert_with(&[
            (rcgen::DnType::CommonName, "system:node:n1"),
            (rcgen::DnType::OrganizationName, "system:nodes"),
        ]);
        assert_eq!(
            client_cert_user(&der),
            Some(ClientCertUser {
                user: "system:node:n1".into(),
                groups: vec!["system:nodes".into()],
            })
        );
        let (_, _, der) = cert_with(&[(rcgen::DnType::OrganizationName, "x")]);
        assert_eq!(client_cert_user(&der), None, "no CN: no user");
        assert_eq!(client_cert_user(b"\x30\x03\x02\x01\x01"), None);
        assert_eq!(client_cert_user(&[]), None);
    }

    #[test]
    fn a_pair_must_match() {
        let (cert_a, key_a, _) = cert_with(&[(rcgen::DnType::CommonName, "a")]);
        let (_, key_b, _) = cert_with(&[(rcgen::DnType::CommonName, "b")]);
        assert!(load_pair(cert_a.as_bytes(), key_a.as_bytes()).is_ok());
        let e = load_pair(cert_a.as_bytes(), key_b.as_bytes()).unwrap_err();
        assert!(matches!(e, BadPair::NotAPair(_)), "{e:?}");
        assert!(e.to_string().contains("do not form a pair"), "{e}");
        let e = load_pair(b"", key_a.as_bytes()).unwrap_err();
        assert!(matches!(e, BadPair::NoCertificate), "{e:?}");
        assert!(e.to_string().contains("no CERTIFICATE"), "{e}");
    }

    #[test]
    fn a_bad_new_pair_keeps_the_old_one_and_is_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_a, key_a, der_a) = cert_with(&[(rcgen::DnType::CommonName, "a")]);
        let (cert_b, key_b, der_b) = cert_with(&[(rcgen::DnType::CommonName, "b")]);
        let settings = TlsConfig {
            cert_file: dir.path().join("tls.crt"),
            key_file: dir.path().join("tls.key"),
            client_ca_file: None,
            reload_interval: Duration::from_secs(1),
        };
        std::fs::write(&settings.cert_file, &cert_a).unwrap();
        std::fs::write(&settings.key_file, &key_a).unwrap();
        let store = CertStore::load(settings.clone()).unwrap();
        let served = |s: &CertStore| s.current.read().unwrap().cert[0].to_vec();
        assert!(!store.reload(), "unchanged files: nothing to do");
        std::fs::write(&settings.cert_file, &cert_b).unwrap();
        assert!(!store.reload());
        assert!(!store.reload(), "the same bad pair again");
        assert_eq!(store.stats.reloads_failed.load(Ordering::Relaxed), 1);
        assert_eq!(served(&store), der_a);
        std::fs::remove_file(&settings.key_file).unwrap();
        assert!(!store.reload(), "a missing file mid-rotation");
        assert_eq!(store.stats.reloads_failed.load(Ordering::Relaxed), 1);
        std::fs::write(&settings.key_file, &key_b).unwrap();
        assert!(store.reload());
        assert_eq!(served(&store), der_b);
        assert_eq!(store.stats.reloads_ok.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn bad_pem_is_a_clear_error() {
        let e = load_pair(b"not pem", b"not pem").unwrap_err();
        assert!(e.to_string().contains("certificate file"), "{e}");
    }
}
