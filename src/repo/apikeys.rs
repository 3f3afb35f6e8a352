//! API keys for the gateway, kept in the store so every gateway knows
//! them: `apikeys/ID.json` holds a key's name, scopes and the SHA-256 of its
//! secret, `apikeys/ID.revoked` revokes it. A key is `dtfs_ID_SECRET`: the
//! id finds the record, the secret is checked against its hash in constant
//! time. An S3 key (`--s3`) is also access key id `DTFSID` with that
//! secret: a SigV4 signature is checked by signing again, which needs the
//! secret itself, so it is kept too, only in an encrypted store (where the
//! key's object is sealed).

use super::Repo;
use crate::access::Action;
use crate::error::{Error, Result};
use crate::store::keys;
use serde::{Deserialize, Serialize};
use sha2::Digest;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    /// Actions the key may ask for at most (the policy, if any, decides
    /// within them).
    pub scopes: Vec<String>,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    /// RFC 3339.
    pub created: String,
    pub author: String,
    /// An S3 key's secret (`--s3`), for checking SigV4 signatures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_secret: Option<String>,
    #[serde(default, skip)]
    pub revoked: bool,
}

impl ApiKey {
    /// An S3 key's access key id: `DTFS` and its id.
    pub fn s3_access_key(&self) -> Option<String> {
        self.s3_secret
            .as_ref()
            .map(|_| format!("DTFS{}", self.id.to_ascii_uppercase()))
    }
}

/// The S3 key of access key id `access`, if it is one of `keys` and not
/// revoked.
pub fn find_s3<'k>(keys: &'k [ApiKey], access: &str) -> Option<&'k ApiKey> {
    let id = access.strip_prefix("DTFS")?.to_ascii_lowercase();
    keys.iter()
        .find(|k| k.id == id && !k.revoked && k.s3_secret.is_some())
}

/// Whether scopes (as `parse_scopes` makes them) hold `action`.
pub fn scopes_allow(scopes: &[String], action: Action) -> bool {
    scopes
        .iter()
        .any(|s| s == "dataset:*" || s == action.name())
}

/// The actions one scope word stands for, if it is one.
pub fn scope_actions(word: &str) -> Option<Vec<&str>> {
    Some(match word {
        "read" => vec!["dataset:read", "dataset:versions"],
        "commit" | "write" | "dataset:write" => vec!["dataset:commit"],
        "tag" => vec!["dataset:tag"],
        "create" => vec!["dataset:create"],
        "admin" | "dataset:*" | "all" => vec!["dataset:*"],
        a if Action::parse(a).is_some() => vec![a],
        _ => return None,
    })
}

/// Scopes as given (`read`, `commit`, `dataset:tag`, …), as actions.
pub fn parse_scopes(given: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for s in given.iter().flat_map(|s| s.split(',')).map(str::trim) {
        let actions = scope_actions(s).ok_or_else(|| {
            Error::InvalidInput(format!(
                "unknown scope {s:?} (read, commit, tag, create, admin, or an action such as dataset:read)"
            ))
        })?;
        out.extend(actions.into_iter().map(String::from));
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(Error::InvalidInput("a key needs at least one scope".into()));
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    crate::limits::plain_name(name)
}

fn hash(secret: &str) -> String {
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

impl Repo {
    /// Every key, revoked ones marked.
    pub fn api_keys(&self) -> Result<Vec<ApiKey>> {
        let listed = self.store.list(keys::APIKEYS, None)?;
        let revoked: std::collections::HashSet<String> = listed
            .iter()
            .filter_map(|l| l.key.strip_prefix(keys::APIKEYS)?.strip_suffix(".revoked"))
            .map(String::from)
            .collect();
        let keys: Vec<String> = listed
            .into_iter()
            .map(|l| l.key)
            .filter(|k| k.ends_with(".json"))
            .collect();
        let mut out = Vec::new();
        for key in &keys {
            // A damaged or crafted key object is no key (said each time the
            // keys are read); it must not stop the others from working.
            let mut k = match self.api_key_at(key) {
                Ok(Some(k)) => k,
                Ok(None) => continue,
                Err(e @ (Error::Malformed { .. } | Error::Corrupt { .. })) => {
                    tracing::warn!("ignoring an API key: {e}");
                    continue;
                }
                Err(e) => return Err(e),
            };
            k.revoked = revoked.contains(&k.id);
            out.push(k);
        }
        out.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
        Ok(out)
    }

    /// The key stored at `key`, checked against its name.
    fn api_key_at(&self, key: &str) -> Result<Option<ApiKey>> {
        let Some(bytes) = self.store.get(key)? else {
            return Ok(None);
        };
        let k: ApiKey =
            serde_json::from_slice(&bytes).map_err(|e| Error::malformed(key, e.to_string()))?;
        if keys::apikey(&k.id) != key {
            return Err(Error::malformed(key, "API key does not match its name"));
        }
        parse_scopes(&k.scopes).map_err(|e| Error::malformed(key, e.to_string()))?;
        Ok(Some(k))
    }

    /// Makes a key (with `s3`, also an S3 key: `ApiKey::s3_access_key` and
    /// the secret); returns it with its secret form, shown once.
    pub fn create_api_key(
        &self,
        name: &str,
        scopes: Vec<String>,
        author: &str,
        s3: bool,
    ) -> Result<(ApiKey, String)> {
        if s3 && !self.codec.is_sealed() {
            return Err(Error::InvalidInput(
                "S3 keys need an encrypted store: a signature is checked with the secret itself, which a plaintext store would show to whoever reads it".into(),
            ));
        }
        if !valid_name(name) {
            return Err(Error::InvalidInput(format!(
                "invalid key name {name:?}: letters, digits, '-', '_' and '.'"
            )));
        }
        self.check_store(false)?;
        if self
            .api_keys()?
            .iter()
            .any(|k| k.name == name && !k.revoked)
        {
            return Err(Error::InvalidInput(format!(
                "a key named {name} exists (revoke it first)"
            )));
        }
        let id = hex::encode(rand::random::<[u8; 8]>());
        let secret = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            rand::random::<[u8; 32]>(),
        );
        let key = ApiKey {
            id: id.clone(),
            name: name.to_string(),
            scopes,
            hash: hash(&secret),
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            author: author.to_string(),
            s3_secret: s3.then(|| secret.clone()),
            revoked: false,
        };
        let body = serde_json::to_vec_pretty(&key).expect("serializable");
        if !self.store.put_create(&keys::apikey(&id), body.into())? {
            return Err(Error::InvalidInput("key id taken; try again".into()));
        }
        Ok((key, format!("dtfs_{id}_{secret}")))
    }

    /// Revokes the key named `name` (every gateway refuses it from its
    /// next look at the store).
    pub fn revoke_api_key(&self, name: &str) -> Result<ApiKey> {
        let key = self
            .api_keys()?
            .into_iter()
            .find(|k| k.name == name && !k.revoked)
            .ok_or_else(|| Error::InvalidInput(format!("no key named {name}")))?;
        let body = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        self.store
            .put_create(&keys::apikey_revoked(&key.id), body.into_bytes().into())?;
        Ok(key)
    }
}

/// The key a presented secret form names, if it is one of `keys` and not
/// revoked.
pub fn check(keys: &[ApiKey], presented: &str) -> Option<ApiKey> {
    let rest = presented.strip_prefix("dtfs_")?;
    let (id, secret) = rest.split_once('_')?;
    let key = keys.iter().find(|k| k.id == id && !k.revoked)?;
    // In constant time: the comparison does not tell how much matched.
    let same = aws_lc_rs::constant_time::verify_slices_are_equal(
        hash(secret).as_bytes(),
        key.hash.as_bytes(),
    );
    same.is_ok().then(|| key.clone())
}
