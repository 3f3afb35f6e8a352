//! The gateway's TLS: a certificate and key given, or a self-signed pair
//! made on first start and kept (key 0600) for the next.

use crate::error::{Error, Result};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use sha2::Digest;
use std::path::Path;
use std::sync::Arc;

/// The server's TLS configuration and its certificate's SHA-256
/// fingerprint (hex, as `openssl x509 -fingerprint -sha256` shows it).
pub struct Tls {
    pub config: Arc<rustls::ServerConfig>,
    pub fingerprint: String,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::InvalidInput(format!("{}: {what}", path.display()))
}

/// Loads `cert` and `key` (PEM).
pub fn load(cert: &Path, key: &Path) -> Result<Tls> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(cert, e))?;
    let Some(first) = certs.first() else {
        return Err(bad(cert, "no certificate in it"));
    };
    let fingerprint = hex::encode(sha2::Sha256::digest(first.as_ref()));
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::InvalidInput(format!("TLS: {e}")))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| Error::InvalidInput(format!("TLS certificate and key: {e}")))?;
    Ok(Tls {
        config: Arc::new(config),
        fingerprint,
    })
}

/// The self-signed pair in `dir` (for `localhost`, `127.0.0.1` and `::1`),
/// made if it is not there yet. Returns it and whether it was made now.
pub fn self_signed(dir: &Path) -> Result<(Tls, bool)> {
    let (cert, key) = (dir.join("gateway-cert.pem"), dir.join("gateway-key.pem"));
    let made = !cert.exists() || !key.exists();
    if made {
        let names = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        let pair = rcgen::generate_simple_self_signed(names)
            .map_err(|e| Error::InvalidInput(format!("cannot make a certificate: {e}")))?;
        let write = |path: &Path, text: String| -> Result<()> {
            use std::io::Write;
            crate::private::create_file(path)
                .and_then(|mut f| f.write_all(text.as_bytes()))
                .map_err(|e| Error::io(path.display(), e))
        };
        write(&key, pair.signing_key.serialize_pem())?;
        write(&cert, pair.cert.pem())?;
    }
    Ok((load(&cert, &key)?, made))
}
