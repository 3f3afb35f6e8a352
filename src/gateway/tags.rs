//! `POST /datasets/{id}/tags` `{"tag", "version"}`: names a version the
//! caller may see (`dataset:tag`), as `detafs tag NAME VERSION TAG` does
//! on the store; the answer is `{"tag", "version"}`. A tag that exists is
//! refused naming its version only if the caller may see that version.

use super::core::{Api, Reply, err, read_body};
use crate::access::{self, Action};
use crate::repo::tag;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) fn routes() -> Router<Arc<Api>> {
    let tags = super::logline::Asks("dataset:tag", "datasets/{id}");
    Router::new().route(
        "/datasets/{id}/tags",
        super::logline::asking(tags, post(create_tag)),
    )
}

async fn create_tag(
    State(api): State<Arc<Api>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Reply {
    let caller = api.caller(&headers).await?;
    let body = read_body(body).await?;
    let field = |k: &str| {
        body.get(k).and_then(Value::as_str).ok_or_else(|| {
            err(
                StatusCode::BAD_REQUEST,
                "invalid",
                "send {\"tag\": TAG, \"version\": VERSION}",
            )
        })
    };
    let (name, v) = (field("tag")?.to_string(), field("version")?.to_string());
    tag::validate(&name)?;
    let (_, record, _) = api.visible_version(&caller, &id, &v).await?;
    caller.may(Action::Tag, &[access::dataset_resource(&id)])?;
    let (dataset, author, number) = (id.clone(), caller.name().to_string(), record.version);
    let wanted = name.clone();
    let made = api
        .run(move |repo| Ok(repo.create_tag(&dataset, &format!("v{number}"), &wanted, &author)))
        .await?;
    api.changed(&id);
    match made {
        Ok(t) => Ok((
            StatusCode::CREATED,
            Json(json!({"tag": t.tag, "version": t.version})),
        )
            .into_response()),
        Err(crate::Error::InvalidInput(_)) => {
            // Taken: by which version is said only if the caller sees it.
            let now = api.visible_version(&caller, &id, &name).await;
            let message = match now {
                Ok((_, r, _)) => {
                    format!("tag {name} already names v{} (tags never move)", r.version)
                }
                Err(_) => format!("tag {name} already exists"),
            };
            Err(err(StatusCode::CONFLICT, "tag_exists", message))
        }
        Err(e) => Err(e.into()),
    }
}
