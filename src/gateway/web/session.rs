//! Sign-in sessions of the web page: an API key (or a JWT) presented once
//! at `/ui/login` is exchanged for a random session token in a cookie
//! (`HttpOnly`, `Secure`, `SameSite=Strict`, an hour at most). The session
//! keeps the credential in this process's memory alone and presents it
//! with each of the page's requests to the REST API, so a key revoked (or
//! a token expired) ends every session made with it at the next request.
//! Each session has a CSRF token of its own, which every form that
//! changes state sends back.

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a session lasts.
pub const TTL: Duration = Duration::from_secs(3600);
/// Sessions kept at most: the oldest go first.
const MAX: usize = 10_000;
pub const COOKIE: &str = "detafs_session";
/// The sign-in form's own CSRF cookie (before there is a session).
pub const LOGIN_COOKIE: &str = "detafs_login";

#[derive(Clone)]
pub struct Session {
    /// What the REST API is shown: `Authorization: Bearer …`.
    pub bearer: String,
    pub csrf: String,
    expires: Instant,
}

#[derive(Default)]
pub struct Sessions(Mutex<HashMap<[u8; 32], Session>>);

/// 32 random bytes, as hex.
pub fn token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// Sessions are kept by a hash of their token: a token is never kept.
fn id(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Sessions {
    /// A new session presenting `bearer`: its token (for the cookie).
    pub fn open(&self, bearer: String) -> String {
        let token = token();
        let now = Instant::now();
        let mut all = self.0.lock();
        all.retain(|_, s| s.expires > now);
        if all.len() >= MAX
            && let Some(oldest) = all.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k)
        {
            all.remove(&oldest);
        }
        all.insert(
            id(&token),
            Session {
                bearer,
                csrf: self::token(),
                expires: now + TTL,
            },
        );
        token
    }

    /// The live session of `token`, if any.
    pub fn get(&self, token: &str) -> Option<Session> {
        let mut all = self.0.lock();
        let key = id(token);
        match all.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                all.remove(&key);
                None
            }
            None => None,
        }
    }

    pub fn close(&self, token: &str) {
        self.0.lock().remove(&id(token));
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h axum::http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Adds a `Set-Cookie` of `name` (`HttpOnly`, `Secure`, `SameSite=Strict`)
/// to `res`; `value` is one of ours (hex, or empty to end it).
pub fn set_cookie(
    res: &mut axum::response::Response,
    name: &str,
    value: &str,
    path: &str,
    max_age: Duration,
) {
    let cookie = format!(
        "{name}={value}; Path={path}; Max-Age={}; HttpOnly; Secure; SameSite=Strict",
        max_age.as_secs()
    );
    res.headers_mut().append(
        axum::http::header::SET_COOKIE,
        axum::http::HeaderValue::from_str(&cookie).expect("ascii"),
    );
}

/// Whether `value` is a token as `token` makes them.
pub fn is_token(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_token_alone_until_closed() {
        let s = Sessions::default();
        let t = s.open("dtfs_x".into());
        assert_eq!(s.get(&t).unwrap().bearer, "dtfs_x");
        assert!(s.get(&token()).is_none());
        assert_ne!(s.get(&t).unwrap().csrf, t);
        assert!(is_token(&t) && !is_token("<b>") && !is_token(&"z".repeat(64)));
        s.close(&t);
        assert!(s.get(&t).is_none());
        let mut h = axum::http::HeaderMap::new();
        h.insert(
            axum::http::header::COOKIE,
            "a=1; detafs_session=abc".parse().unwrap(),
        );
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), None);
    }
}
