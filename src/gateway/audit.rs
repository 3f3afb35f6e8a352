//! `GET /datasets/{id}/audit`: the dataset's history as the store holds it
//! (`detafs audit`), each version's and tag's chain check, for the
//! versions the caller sees. Whoever may administer the dataset
//! (`dataset:admin`) also gets every problem, expired versions and the
//! policy's changes; others get the problems of the versions they see
//! (one elsewhere would tell them a hidden version is there).

use super::core::{Api, Reply, resources};
use super::logline::{Asks, asking};
use crate::access::{Action, dataset_resource};
use crate::store::keys;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

const AUDITS: Asks = Asks("dataset:versions", "datasets/{id}/audit");

pub(super) fn routes() -> Router<Arc<Api>> {
    Router::new().route("/datasets/{id}/audit", asking(AUDITS, get(audit)))
}

async fn audit(State(api): State<Arc<Api>>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    let caller = api.caller(&headers).await?;
    let view = api.view(&id, std::time::Instant::now()).await?;
    caller.finds_dataset(&id, &view)?;
    let admin = caller.sees(Action::Admin, &[dataset_resource(&id)]);
    let seen: HashSet<u64> = view
        .records
        .iter()
        .filter(|r| caller.sees(Action::Versions, &resources(&id, r, &view.tags)))
        .map(|r| r.version)
        .collect();
    let out = api
        .run(move |repo| {
            let h = crate::audit::history(repo, &id)?;
            let shown = |v: u64| admin || seen.contains(&v);
            let versions: Vec<Value> = h
                .versions
                .iter()
                .filter(|v| shown(v.version))
                .map(|v| match &v.record {
                    Some(r) => json!({
                        "version": v.version, "time": r.time, "author": r.author,
                        "message": r.message, "hash": v.hash.to_hex(), "chained": v.chained,
                        "expired": !seen.contains(&v.version) && admin,
                    }),
                    None => {
                        json!({"version": v.version, "hash": v.hash.to_hex(), "chained": false})
                    }
                })
                .collect();
            let tags: Vec<Value> = h
                .tags
                .iter()
                .filter(|t| shown(t.version))
                .map(|t| json!({"tag": t.tag, "version": t.version, "holds": t.holds}))
                .collect();
            let own: HashSet<String> = seen.iter().map(|v| keys::record(&id, *v)).collect();
            let mut problems: Vec<String> = h
                .problems
                .iter()
                .filter(|p| admin || own.contains(&p.object))
                .map(ToString::to_string)
                .collect();
            let mut policy = Vec::new();
            if admin {
                for (n, hash, record) in repo.policy_audit()? {
                    policy.push(match record {
                        Ok(r) => json!({
                            "version": n, "time": r.time, "author": r.author,
                            "message": r.message, "hash": hash.to_hex(), "chained": true,
                        }),
                        Err(e) => {
                            problems.push(format!("policy v{n}: {e}"));
                            json!({"version": n, "hash": hash.to_hex(), "chained": false})
                        }
                    });
                }
            }
            Ok(json!({
                "dataset": id, "ok": problems.is_empty(), "versions": versions,
                "tags": tags, "policy": policy, "problems": problems,
            }))
        })
        .await?;
    Ok(Json(out).into_response())
}
