//! The operator's page on `run --http`: `/` lists the pipelines and draws their dependency
//! graph, `/pipelines/{id}` shows one with its run history against its SLA. Both are the same
//! static page (embedded in the binary), which draws itself from the pipeline API
//! ([`super::api`]) and polls it, so every instance serves every pipeline.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// The page's routes.
pub fn routes() -> Router {
    let page = || async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response() };
    Router::new()
        .route("/", get(page))
        .route("/pipelines/{id}", get(page))
        .route(
            "/ui/app.js",
            get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE) }),
        )
}
