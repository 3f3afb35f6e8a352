//! Key slots of a format 2 store: the master key, wrapped once per slot
//! under a key file's secret or a passphrase (Argon2id), each slot one
//! object `keys/<16 hex>.json` in the store. Removing a slot revokes it;
//! the master key never changes, so no data is re-encrypted.

use super::Store;
use super::seal::{self, MasterKey};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use zeroize::Zeroizing;

/// Argon2id costs of a new passphrase slot (about half a second here).
const ARGON2_M_KIB: u32 = 64 * 1024;
const ARGON2_T: u32 = 3;
const ARGON2_P: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotKind {
    Keyfile,
    Passphrase,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Argon2Params {
    pub m_kib: u32,
    pub t: u32,
    pub p: u32,
    /// 32 hex digits.
    pub salt: String,
}

/// One key slot, as stored (in the clear: it holds only the wrapped key).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Slot {
    /// 16 hex digits; also its key's name.
    pub id: String,
    pub kind: SlotKind,
    /// RFC 3339.
    pub created: String,
    /// Who added it (user@host), for `key list`.
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argon2: Option<Argon2Params>,
    /// Hex of nonce ‖ AES-256-GCM(master key) ‖ tag.
    pub wrapped: String,
}

/// A key file: the secret of one slot of one store. Kept 0600.
#[derive(Serialize, Deserialize)]
pub struct KeyFile {
    pub store_id: String,
    pub slot: String,
    /// 64 hex digits.
    secret: String,
}

/// What may open a store.
pub enum Secret {
    KeyFile(KeyFile),
    Passphrase(Zeroizing<String>),
}

impl KeyFile {
    pub fn read(path: &Path) -> Result<KeyFile> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path.display(), e))?;
        serde_json::from_slice::<KeyFile>(&bytes)
            .ok()
            .filter(|k| {
                crate::id::is_lower_hex(&k.secret, 64) && crate::id::is_lower_hex(&k.slot, 16)
            })
            .ok_or_else(|| {
                Error::InvalidInput(format!("{} is not a detafs key file", path.display()))
            })
    }

    /// Writes a new key file (0600, never over an existing file).
    fn create(path: &Path, store_id: &str, slot: &str) -> Result<KeyFile> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let key = KeyFile {
            store_id: store_id.to_string(),
            slot: slot.to_string(),
            secret: hex::encode(rand::random::<[u8; 32]>()),
        };
        if let Some(dir) = path.parent() {
            crate::private::ensure_dir(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io(path.display(), e))?;
        let mut body = serde_json::to_vec_pretty(&key).expect("serializable");
        body.push(b'\n');
        f.write_all(&body)
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io(path.display(), e))?;
        Ok(key)
    }
}

fn slot_aad(store_id: &str, slot: &str) -> Vec<u8> {
    format!("detafs 2 slot {store_id} {slot}").into_bytes()
}

/// The key a slot's secret gives.
fn slot_key(slot: &Slot, secret: &Secret, store_id: &str) -> Option<Zeroizing<[u8; 32]>> {
    let mut out = Zeroizing::new([0u8; 32]);
    match (secret, &slot.kind, &slot.argon2) {
        (Secret::KeyFile(k), SlotKind::Keyfile, _) if k.slot == slot.id => {
            let secret = Zeroizing::new(hex::decode(&k.secret).ok()?);
            hkdf::Hkdf::<sha2::Sha256>::new(Some(store_id.as_bytes()), &secret)
                .expand(b"detafs 2 key file", &mut out[..])
                .ok()?;
        }
        (Secret::Passphrase(p), SlotKind::Passphrase, Some(a)) => {
            let params = argon2::Params::new(a.m_kib, a.t, a.p, Some(32)).ok()?;
            let salt = hex::decode(&a.salt).ok()?;
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
                .hash_password_into(p.as_bytes(), &salt, &mut out[..])
                .ok()?;
        }
        _ => return None,
    }
    Some(out)
}

impl Store {
    /// The store's key slots.
    pub fn slots(&self) -> Result<Vec<Slot>> {
        let keys: Vec<String> = self
            .list(super::keys::KEY_SLOTS, None)?
            .into_iter()
            .map(|l| l.key)
            .collect();
        let mut out = Vec::new();
        for (key, body) in keys.iter().zip(self.get_many(&keys)?) {
            let Some(body) = body else { continue };
            match serde_json::from_slice::<Slot>(&body) {
                Ok(s) if *key == slot_key_name(&s.id) => out.push(s),
                _ => tracing::warn!("{key} is not a key slot; ignored"),
            }
        }
        Ok(out)
    }

    /// The master key, from the first slot one of `secrets` opens. A wrong
    /// secret opens none: one clear error, nothing written.
    pub fn open_master(&self, secrets: &[Secret]) -> Result<MasterKey> {
        let store_id = self.info()?.store_id;
        for slot in self.slots()? {
            let Ok(wrapped) = hex::decode(&slot.wrapped) else {
                continue;
            };
            for secret in secrets {
                if let Some(key) = slot_key(&slot, secret, &store_id)
                    && let Ok(master) = seal::unwrap(&wrapped, &key, &slot_aad(&store_id, &slot.id))
                {
                    return Ok(master);
                }
            }
        }
        Err(Error::WrongKey(self.url().to_string()))
    }

    /// Adds a slot: a new key file at `key_file`, or `passphrase`.
    pub fn add_slot(
        &self,
        master: &MasterKey,
        key_file: Option<&Path>,
        passphrase: Option<&str>,
        by: &str,
    ) -> Result<Slot> {
        let store_id = self.info()?.store_id;
        self.add_slot_to(&store_id, master, key_file, passphrase, by)
    }

    pub(super) fn add_slot_to(
        &self,
        store_id: &str,
        master: &MasterKey,
        key_file: Option<&Path>,
        passphrase: Option<&str>,
        by: &str,
    ) -> Result<Slot> {
        let store_id = store_id.to_string();
        let id = hex::encode(rand::random::<[u8; 8]>());
        let (kind, argon2, secret) = match (key_file, passphrase) {
            (Some(path), None) => (
                SlotKind::Keyfile,
                None,
                Secret::KeyFile(KeyFile::create(path, &store_id, &id)?),
            ),
            (None, Some(p)) => (
                SlotKind::Passphrase,
                Some(Argon2Params {
                    m_kib: ARGON2_M_KIB,
                    t: ARGON2_T,
                    p: ARGON2_P,
                    salt: hex::encode(rand::random::<[u8; 16]>()),
                }),
                Secret::Passphrase(Zeroizing::new(p.to_string())),
            ),
            _ => {
                return Err(Error::InvalidInput(
                    "a key slot is a key file or a passphrase".into(),
                ));
            }
        };
        let mut slot = Slot {
            id: id.clone(),
            kind,
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            by: by.to_string(),
            argon2,
            wrapped: String::new(),
        };
        let key = slot_key(&slot, &secret, &store_id).expect("a slot of its own kind");
        slot.wrapped = hex::encode(seal::wrap(master, &key, &slot_aad(&store_id, &id)));
        let body = serde_json::to_vec_pretty(&slot).expect("serializable");
        if !self.put_create(&slot_key_name(&id), body.into())? {
            return Err(Error::InvalidInput(format!("key slot {id} exists")));
        }
        Ok(slot)
    }

    /// Removes slot `id`: its key file or passphrase opens the store no
    /// more. The last slot is kept (without it nothing could).
    pub fn remove_slot(&self, id: &str) -> Result<()> {
        let slots = self.slots()?;
        if !slots.iter().any(|s| s.id == id) {
            return Err(Error::NoKeySlot(id.to_string()));
        }
        if slots.len() == 1 {
            return Err(Error::InvalidInput(format!(
                "key slot {id} is the store's last: add another first, or nothing could open it"
            )));
        }
        self.delete(&slot_key_name(id))
    }
}

/// Where a store's key file is kept unless the user says otherwise.
pub fn default_key_file(store_id: &str) -> std::path::PathBuf {
    dirs::config_dir()
        .unwrap_or_else(|| std::path::PathBuf::from("."))
        .join("detafs/keys")
        .join(format!("{store_id}.key"))
}

fn slot_key_name(id: &str) -> String {
    super::keys::key_slot(id)
}
