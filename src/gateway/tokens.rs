//! OAuth2 bearer tokens: JWTs signed with RS256 or ES256 by a key of a
//! JWKS (a file, or a URL: https, or http on the loopback), with `exp`,
//! `nbf`, `iss` and `aud` checked and 30 s of clock skew allowed. A key id
//! the set does not hold makes the gateway read the set again (at most
//! every 2 s), so a rotated key is picked up.

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use parking_lot::Mutex;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often an unknown key id may make the set be read again.
const REFETCH: Duration = Duration::from_secs(2);
const SKEW: u64 = 30;

pub enum Jwks {
    File(PathBuf),
    Url(String),
}

impl Jwks {
    /// A file path or a URL; plain http only to the loopback.
    pub fn parse(s: &str) -> Result<Jwks, String> {
        if s.starts_with("https://") {
            return Ok(Jwks::Url(s.into()));
        }
        if let Some(rest) = s.strip_prefix("http://") {
            let host = rest.split(['/', ':']).next().unwrap_or("");
            if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
                return Ok(Jwks::Url(s.into()));
            }
            return Err(format!(
                "{s}: a JWKS URL must be https (http only on the loopback)"
            ));
        }
        Ok(Jwks::File(s.into()))
    }
}

pub struct Tokens {
    source: Jwks,
    issuer: String,
    audience: String,
    keys: Mutex<(Option<Instant>, JwkSet)>,
    /// `REFETCH` (tests: none, through `DETAFS_TEST_KEYS_FRESH`).
    refetch: Duration,
}

/// What a verified token says of its bearer.
pub struct Bearer {
    pub subject: String,
    /// `claim:NAME=VALUE` for each string claim (and each string of a list).
    pub claims: Vec<String>,
    /// The words of its `scope` claim.
    pub scopes: Vec<String>,
}

impl Tokens {
    pub fn new(source: Jwks, issuer: String, audience: String) -> Tokens {
        Tokens {
            source,
            issuer,
            audience,
            keys: Mutex::new((None, JwkSet { keys: Vec::new() })),
            refetch: crate::hold::test_duration("DETAFS_TEST_KEYS_FRESH", REFETCH),
        }
    }

    async fn fetch(&self) -> Result<JwkSet, String> {
        let text = match &self.source {
            Jwks::File(p) => tokio::fs::read_to_string(p)
                .await
                .map_err(|e| format!("JWKS {}: {e}", p.display()))?,
            Jwks::Url(u) => {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .map_err(|e| e.to_string())?;
                let res = client
                    .get(u)
                    .send()
                    .await
                    .map_err(|e| format!("JWKS {u}: {e}"))?;
                res.error_for_status()
                    .map_err(|e| format!("JWKS {u}: {e}"))?
                    .text()
                    .await
                    .map_err(|e| format!("JWKS {u}: {e}"))?
            }
        };
        serde_json::from_str(&text).map_err(|e| format!("JWKS is not a key set: {e}"))
    }

    /// The key `kid` names, reading the set again if it is not known.
    async fn key(&self, kid: &str) -> Result<DecodingKey, String> {
        let (found, stale) = {
            let k = self.keys.lock();
            let stale = k.0.is_none_or(|t| t.elapsed() >= self.refetch);
            (k.1.find(kid).cloned(), stale)
        };
        let jwk = match (found, stale) {
            (Some(j), _) => j,
            (None, false) => return Err(format!("unknown key id {kid:?}")),
            (None, true) => {
                let set = self.fetch().await;
                let mut k = self.keys.lock();
                k.0 = Some(Instant::now());
                if let Ok(set) = set {
                    k.1 = set;
                }
                k.1.find(kid)
                    .cloned()
                    .ok_or_else(|| format!("unknown key id {kid:?}"))?
            }
        };
        DecodingKey::from_jwk(&jwk).map_err(|e| format!("key {kid:?}: {e}"))
    }

    /// Verifies `token`; the error says why it is refused (a 401).
    pub async fn verify(&self, token: &str) -> Result<Bearer, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("bad token: {e}"))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(format!(
                "tokens signed with {:?} are refused (RS256 or ES256 only)",
                header.alg
            ));
        }
        let kid = header.kid.ok_or("the token names no key (kid)")?;
        let key = self.key(&kid).await?;
        let mut v = Validation::new(header.alg);
        v.leeway = SKEW;
        v.validate_nbf = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &v)
            .map_err(|e| format!("token refused: {e}"))?;
        let claims = data.claims;
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .ok_or("the token has no subject")?
            .to_string();
        let scopes: Vec<String> = claims
            .get("scope")
            .and_then(Value::as_str)
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let mut named = Vec::new();
        for (name, value) in &claims {
            match value {
                Value::String(s) => named.push(format!("claim:{name}={s}")),
                Value::Array(a) => named.extend(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|s| format!("claim:{name}={s}")),
                ),
                _ => {}
            }
        }
        named.extend(scopes.iter().map(|s| format!("claim:scope={s}")));
        Ok(Bearer {
            subject,
            claims: named,
            scopes,
        })
    }
}
