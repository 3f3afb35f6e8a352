//! A dataset's lifecycle over REST, as the CLI has it on the store (the
//! library decides; the caller's scopes and the policies are checked
//! first, as for every request):
//!
//! - `GET /datasets/{id}/retention`: rules, holds, expired versions
//!   (`dataset:versions`); `PUT` with the rules (`dataset:retention`).
//! - `POST /datasets/{id}/forget` `{"versions": [..], "dry_run"}`: the plan
//!   (`dataset:forget`).
//! - `POST /datasets/{id}/holds` `{"version", "reason"}`, `POST
//!   /datasets/{id}/releases` the same (`dataset:hold`).
//! - `POST /datasets/{id}/erase` `{"path", "reason", "from", "dry_run"}`
//!   (`dataset:erase`).
//! - `GET /datasets/{id}/report`: the compliance report (`dataset:admin`).
//! - `PUT /datasets/{id}/leases/{staging}` `{"versions": [..]}`: a host's
//!   staging area stands on those versions (`dataset:commit`; the lease is
//!   the caller's, `repo::leases`).

use super::core::{Api, Caller, Reply, err, read_body, resources};
use crate::access::caller::Actor;
use crate::access::{Action, dataset_resource};
use crate::repo::lifecycle::Rules;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::Value;
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<Api>> {
    use super::logline::{Asks, asking};
    let on = "datasets/{id}";
    Router::new()
        .route(
            "/datasets/{id}/retention",
            asking(Asks("dataset:retention", on), get(show).put(set)),
        )
        .route(
            "/datasets/{id}/forget",
            asking(Asks("dataset:forget", on), post(forget)),
        )
        .route(
            "/datasets/{id}/holds",
            asking(Asks("dataset:hold", on), post(hold)),
        )
        .route(
            "/datasets/{id}/releases",
            asking(Asks("dataset:hold", on), post(release)),
        )
        .route(
            "/datasets/{id}/erase",
            asking(Asks("dataset:erase", on), post(erase)),
        )
        .route(
            "/datasets/{id}/report",
            asking(Asks("dataset:admin", on), get(report)),
        )
        .route(
            "/datasets/{id}/leases/{staging}",
            asking(Asks("dataset:commit", on), put(lease)),
        )
}

/// The caller, allowed `action` on dataset `id` (scopes and policies).
async fn allowed(
    api: &Arc<Api>,
    headers: &HeaderMap,
    id: &str,
    action: Action,
) -> Result<Caller, super::core::ApiError> {
    let caller = api.caller(headers).await?;
    caller.may(action, &[dataset_resource(id)])?;
    Ok(caller)
}

fn actor(caller: &Caller) -> Actor {
    Actor {
        who: caller.who().clone(),
        name: caller.name().to_string(),
    }
}

fn bad(what: &str) -> super::core::ApiError {
    err(StatusCode::BAD_REQUEST, "invalid", what.to_string())
}

fn text(body: &Value, k: &str) -> Option<String> {
    body.get(k).and_then(Value::as_str).map(String::from)
}

async fn show(State(api): State<Arc<Api>>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    allowed(&api, &headers, &id, Action::Versions).await?;
    let out = api
        .run(move |repo| {
            repo.check_dataset(&id)?;
            Ok(crate::retention::state_json(&id, &repo.lifecycle(&id)?))
        })
        .await?;
    Ok(Json(out).into_response())
}

async fn set(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = allowed(&api, &headers, &id, Action::Retention).await?;
    let rules: Rules = serde_json::from_value(read_body(body).await?)
        .map_err(|e| bad(&format!("retention rules: {e}")))?;
    let by = actor(&caller);
    let (dataset, shown) = (id.clone(), rules.clone());
    api.run(move |repo| Ok(crate::retention::set_rules(repo, &dataset, rules, &by)?))
        .await?;
    Ok(Json(serde_json::json!({"rules": shown})).into_response())
}

async fn forget(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = allowed(&api, &headers, &id, Action::Forget).await?;
    let body = read_body(body).await?;
    let versions: Vec<String> = match body.get("versions") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|_| bad("\"versions\" is a list of versions (v3, a tag)"))?,
    };
    let dry_run = body
        .get("dry_run")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let by = actor(&caller);
    let dataset = id.clone();
    let plan = api
        .run(move |repo| {
            Ok(crate::retention::forget(
                repo, &dataset, &versions, dry_run, &by,
            )?)
        })
        .await?;
    api.changed(&id);
    Ok(Json(plan.to_json(dry_run)).into_response())
}

async fn hold(state: State<Arc<Api>>, headers: HeaderMap, id: Path<String>, body: Body) -> Reply {
    holding(state, headers, id, body, false).await
}

async fn release(
    state: State<Arc<Api>>,
    headers: HeaderMap,
    id: Path<String>,
    body: Body,
) -> Reply {
    holding(state, headers, id, body, true).await
}

async fn holding(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
    end: bool,
) -> Reply {
    let caller = allowed(&api, &headers, &id, Action::Hold).await?;
    let body = read_body(body).await?;
    let (Some(version), Some(reason)) = (text(&body, "version"), text(&body, "reason")) else {
        return Err(bad("send {\"version\": VERSION, \"reason\": WHY}"));
    };
    // A version the caller may not see answers as a missing one.
    let (_, record, _) = api.visible_version(&caller, &id, &version).await?;
    let by = actor(&caller);
    let (dataset, spec) = (id.clone(), format!("v{}", record.version));
    let v = api
        .run(move |repo| {
            Ok(match end {
                true => crate::retention::release(repo, &dataset, &spec, &reason, &by)?,
                false => crate::retention::hold(repo, &dataset, &spec, &reason, &by)?,
            })
        })
        .await?;
    Ok(Json(serde_json::json!({"version": v, "held": !end})).into_response())
}

async fn erase(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = allowed(&api, &headers, &id, Action::Erase).await?;
    let body = read_body(body).await?;
    let (Some(path), Some(reason)) = (text(&body, "path"), text(&body, "reason")) else {
        return Err(bad("send {\"path\": PATH, \"reason\": WHY}"));
    };
    let from = text(&body, "from");
    let dry_run = body
        .get("dry_run")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let path = crate::relpath::RelPath::parse(path.as_bytes())?;
    let by = actor(&caller);
    let dataset = id.clone();
    let done = api
        .run(move |repo| {
            let req = crate::erase::Request {
                dataset: &dataset,
                path: &path,
                from: from.as_deref(),
                reason: &reason,
                dry_run,
            };
            Ok(crate::erase::erase(repo, &req, &by)?)
        })
        .await?;
    api.changed(&id);
    Ok(Json(done.to_json()).into_response())
}

async fn report(State(api): State<Arc<Api>>, headers: HeaderMap, Path(id): Path<String>) -> Reply {
    allowed(&api, &headers, &id, Action::Admin).await?;
    let out = api
        .run(move |repo| Ok(crate::report::report(repo, &id)?))
        .await?;
    Ok(Json(out).into_response())
}

/// A host's staging area stands on `versions`: each one the caller is
/// served now, or one its lease named already.
async fn lease(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path((id, staging)): Path<(String, String)>,
    body: Body,
) -> Reply {
    let caller = allowed(&api, &headers, &id, Action::Commit).await?;
    let body = read_body(body).await?;
    let versions: Vec<u64> = body
        .get("versions")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .ok_or_else(|| bad("\"versions\" is a list of version numbers"))?;
    let view = api.view(&id, std::time::Instant::now()).await?;
    caller.finds_dataset(&id, &view)?;
    let served: std::collections::BTreeSet<u64> = view
        .records
        .iter()
        .filter(|r| caller.sees(Action::Versions, &resources(&id, r, &view.tags)))
        .map(|r| r.version)
        .collect();
    let (owner, name) = (caller.owner().to_string(), caller.name().to_string());
    let shown = versions.clone();
    let (forget_id, forget_owner) = (id.clone(), owner.clone());
    api.run(move |repo| {
        let holder = crate::repo::leases::Holder {
            owner: &owner,
            name: &name,
        };
        Ok(repo.lease_for(&id, &holder, &staging, &versions, &served)?)
    })
    .await?;
    api.leases_changed(&forget_id, &forget_owner);
    Ok(Json(serde_json::json!({ "versions": shown })).into_response())
}
