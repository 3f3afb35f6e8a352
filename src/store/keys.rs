//! Every key detafs writes in a store (docs/format.md) and what each kind
//! holds: one place decides the layout and whether a sealed store seals an
//! object, so no kind of key can be added without saying whether it is.

use crate::id::PackId;

/// What a key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The store's marker (`MARKER`): format and sealing, read before any key.
    Marker,
    /// Key slots of a format 2 store (`slots.rs`): wrapped keys.
    KeySlot,
    /// A probe of conditional create (`Store::probe`), deleted at once.
    Probe,
    /// A dataset's objects: its description, version records and tags.
    Dataset,
    /// Access policy records.
    PolicyRecord,
    /// Gateway API keys and their revocations.
    ApiKey,
    /// Files uploaded through the gateway, not yet committed.
    Upload,
    /// Changes staged through the S3 endpoint for a dataset's next commit.
    Staged,
    /// Notes of gc runs (names only, no content).
    GcNote,
    /// Where the store's colder tier is (`tier.rs`).
    Tiers,
    /// Packs of blobs (sealed blob by blob, not as one object).
    Pack,
}

impl Kind {
    /// The kind of `key`, if detafs writes keys like it.
    pub fn of(key: &str) -> Option<Kind> {
        if key == super::MARKER {
            return Some(Kind::Marker);
        }
        if key == TIERS {
            return Some(Kind::Tiers);
        }
        [
            (KEY_SLOTS, Kind::KeySlot),
            (PROBES, Kind::Probe),
            (DATASETS, Kind::Dataset),
            (POLICY_RECORDS, Kind::PolicyRecord),
            (APIKEYS, Kind::ApiKey),
            (UPLOADS, Kind::Upload),
            (STAGED, Kind::Staged),
            (GC_NOTES, Kind::GcNote),
            (PACKS, Kind::Pack),
        ]
        .into_iter()
        .find_map(|(prefix, kind)| key.starts_with(prefix).then_some(kind))
    }

    /// Whether a sealed store seals an object of this kind as a whole (the
    /// codec's small objects); packs seal each blob, slots wrap their keys.
    pub fn sealed(self) -> bool {
        match self {
            Kind::Dataset | Kind::PolicyRecord | Kind::ApiKey | Kind::Upload | Kind::Staged => true,
            Kind::Marker
            | Kind::KeySlot
            | Kind::Probe
            | Kind::GcNote
            | Kind::Pack
            | Kind::Tiers => false,
        }
    }
}

/// Whether a sealed store seals the small object at `key`.
pub fn sealed(key: &str) -> bool {
    Kind::of(key).is_some_and(Kind::sealed)
}

pub const KEY_SLOTS: &str = "keys/";
/// The store's tiers: where its colder one is (a location, no secret).
pub const TIERS: &str = "tiers.json";
pub fn key_slot(id: &str) -> String {
    format!("{KEY_SLOTS}{id}.json")
}
pub const PROBES: &str = "probes/";
pub fn probe(nonce: &str) -> String {
    format!("{PROBES}{nonce}")
}
pub const DATASETS: &str = "datasets/";
pub const APIKEYS: &str = "apikeys/";
pub fn apikey(id: &str) -> String {
    format!("{APIKEYS}{id}.json")
}
pub fn apikey_revoked(id: &str) -> String {
    format!("{APIKEYS}{id}.revoked")
}
pub const UPLOADS: &str = "uploads/";
pub fn upload(id: &str) -> String {
    format!("{UPLOADS}{id}.json")
}
pub const STAGED: &str = "staged/";
/// Every change `owner` (a digest of who staged it) staged for `dataset`
/// (`commit/pending.rs`).
pub fn staged_all(dataset: &str, owner: &str) -> String {
    format!("{STAGED}{dataset}/{owner}/")
}
pub fn staged(dataset: &str, owner: &str, name: &str) -> String {
    format!("{STAGED}{dataset}/{owner}/{name}.json")
}

pub fn dataset(name: &str) -> String {
    format!("{DATASETS}{name}/dataset.json")
}
pub fn deleted(name: &str) -> String {
    format!("{DATASETS}{name}/deleted.json")
}
pub fn records(name: &str) -> String {
    format!("{DATASETS}{name}/records/")
}
pub fn record(name: &str, version: u64) -> String {
    format!("{DATASETS}{name}/records/{version:020}.json")
}
/// The version a record key names, if `key` is exactly such a key.
pub fn record_number(name: &str, key: &str) -> Option<u64> {
    numbered(&records(name), key).filter(|&n| n <= crate::limits::MAX_VERSION)
}
/// N of `PREFIX` + N as 20 digits + `.json`, if `key` is exactly that (N > 0).
fn numbered(prefix: &str, key: &str) -> Option<u64> {
    let digits = key.strip_prefix(prefix)?.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n > 0)
}
/// A dataset's lifecycle log: retention rules, expiries, holds
/// (`repo/lifecycle.rs`).
pub fn lifecycle(name: &str) -> String {
    format!("{DATASETS}{name}/lifecycle/")
}
pub fn lifecycle_entry(name: &str, seq: u64) -> String {
    format!("{DATASETS}{name}/lifecycle/{seq:020}.json")
}
/// The entry number a lifecycle key names, if `key` is exactly such a key.
pub fn lifecycle_seq(name: &str, key: &str) -> Option<u64> {
    numbered(&lifecycle(name), key)
}
/// Staging areas' leases on the versions they stand on (`lifecycle.rs`).
pub fn leases(name: &str) -> String {
    format!("{DATASETS}{name}/leases/")
}
pub fn lease(name: &str, staging: &str) -> String {
    format!("{DATASETS}{name}/leases/{staging}.json")
}
pub fn tags(name: &str) -> String {
    format!("{DATASETS}{name}/tags/")
}
pub fn tag(name: &str, tag: &str) -> String {
    format!("{DATASETS}{name}/tags/{tag}.json")
}
/// The tag a key names, if `key` is a tag key of dataset `name`.
pub fn tag_name<'k>(name: &str, key: &'k str) -> Option<&'k str> {
    key.strip_prefix(&tags(name))?.strip_suffix(".json")
}
/// One object per gc run that deleted something, named by its time:
/// hosts that see a new one forget where blobs were (`Repo::gc_mark`).
pub const GC_NOTES: &str = "gc/";
pub fn gc_note(unix_nanos: u128, nonce: u64) -> String {
    format!("{GC_NOTES}{unix_nanos:039}-{nonce:016x}")
}
pub const POLICY_RECORDS: &str = "policy/records/";
pub fn policy_record(version: u64) -> String {
    format!("{POLICY_RECORDS}{version:020}.json")
}
/// The policy version a key names, if it is exactly such a key.
pub fn policy_record_number(key: &str) -> Option<u64> {
    let digits = key.strip_prefix(POLICY_RECORDS)?.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&n| n > 0)
}
pub const PACKS: &str = "packs/";
pub fn pack(id: &PackId) -> String {
    let hex = id.to_hex();
    format!("{PACKS}{}/{hex}", &hex[..2])
}
/// The pack id named by a pack key, if it is one.
pub fn pack_id(key: &str) -> Option<PackId> {
    key.strip_prefix(PACKS)?.rsplit('/').next()?.parse().ok()
}
/// The temporary name pack `key` is copied to in a colder folder before
/// its rename: a mover killed in between leaves it, and gc deletes it.
const MOVING: &str = ".moving-";
pub fn moving(key: &str, mover: u32) -> String {
    format!("{key}{MOVING}{mover}")
}
/// Whether `key` is what a move left unfinished (`moving`).
pub fn is_moving(key: &str) -> bool {
    key.rsplit_once(MOVING)
        .is_some_and(|(pack, mover)| pack_id(pack).is_some() && mover.parse::<u32>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_detafs_writes_has_a_kind_and_secrets_are_sealed() {
        let id = PackId::of(b"x");
        let cases = [
            (super::super::MARKER.to_string(), Kind::Marker, false),
            (key_slot("a1"), Kind::KeySlot, false),
            (probe("00"), Kind::Probe, false),
            (dataset("d"), Kind::Dataset, true),
            (deleted("d"), Kind::Dataset, true),
            (record("d", 3), Kind::Dataset, true),
            (tag("d", "t"), Kind::Dataset, true),
            (lifecycle_entry("d", 1), Kind::Dataset, true),
            (lease("d", "s"), Kind::Dataset, true),
            (policy_record(1), Kind::PolicyRecord, true),
            (apikey("k"), Kind::ApiKey, true),
            (apikey_revoked("k"), Kind::ApiKey, true),
            (upload("u"), Kind::Upload, true),
            (staged("ds", "o", "n"), Kind::Staged, true),
            (gc_note(1, 2), Kind::GcNote, false),
            (TIERS.to_string(), Kind::Tiers, false),
            (pack(&id), Kind::Pack, false),
        ];
        for (key, kind, sealed_) in cases {
            assert_eq!(Kind::of(&key), Some(kind), "{key}");
            assert_eq!(sealed(&key), sealed_, "{key}");
        }
        assert_eq!(Kind::of("elsewhere/x"), None);
        assert!(!sealed("elsewhere/x"));
    }

    #[test]
    fn only_a_pack_moving_is_a_leftover_of_a_move() {
        let key = pack(&PackId::of(b"x"));
        assert!(is_moving(&moving(&key, 42)));
        assert_eq!(pack_id(&moving(&key, 42)), None, "never counted as a pack");
        for other in [
            key.clone(),
            format!("{key}.moving-"),
            format!("{key}.moving-x"),
            "packs/ab/zz.moving-1".into(),
        ] {
            assert!(!is_moving(&other), "{other}");
        }
    }
}
