//! Who may use `run --http`. Without token files the API is open to read and refuses every
//! change. With `--api-token-file` (tokens that may read) and/or `--api-write-token-file`
//! (tokens that may also rerun and cancel), every request but the probes (`/healthz`,
//! `/readyz`) and the page's static files needs `Authorization: Bearer TOKEN`; the page
//! asks for a token when the API answers 401.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Read,
    Write,
}

#[derive(Debug, Default)]
pub struct Access {
    read: Vec<String>,
    write: Vec<String>,
}

impl Access {
    /// Tokens from files of one token per line (blank lines and `#` comments skipped).
    pub fn from_files(read: Option<&Path>, write: Option<&Path>) -> Result<Access> {
        let load = |path: Option<&Path>| -> Result<Vec<String>> {
            let Some(path) = path else { return Ok(Vec::new()) };
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading token file {}", path.display()))?;
            let tokens: Vec<String> = tokens_in(&text).map(str::to_string).collect();
            if tokens.is_empty() {
                bail!("token file {} holds no token", path.display());
            }
            if let Some(short) = tokens.iter().find(|t| t.len() < 16) {
                bail!(
                    "token file {}: a token of {} characters is too easy to guess (16 or more)",
                    path.display(),
                    short.len()
                );
            }
            Ok(tokens)
        };
        Ok(Access {
            read: load(read)?,
            write: load(write)?,
        })
    }

    /// Whether requests must carry a token.
    pub fn required(&self) -> bool {
        !self.read.is_empty() || !self.write.is_empty()
    }

    /// Whether any token may change things.
    pub fn allows_writes(&self) -> bool {
        !self.write.is_empty()
    }

    /// What the `Authorization` header's value allows, if anything.
    pub fn grant(&self, authorization: Option<&str>) -> Option<Grant> {
        if !self.required() {
            return Some(Grant::Read);
        }
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        let matches = |tokens: &[String]| tokens.iter().any(|t| same(t.as_bytes(), token.as_bytes()));
        if matches(&self.write) {
            Some(Grant::Write)
        } else if matches(&self.read) {
            Some(Grant::Read)
        } else {
            None
        }
    }
}

/// The tokens of a token file: one per line, blank lines and `#` comments skipped.
pub fn tokens_in(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Compares without returning early on the first difference, so the time taken does not tell
/// how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Refuses a request without a valid token (when tokens are required) and tells the handlers
/// what it may do (a [`Grant`] extension).
pub async fn guard(State(access): State<Arc<Access>>, mut request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match access.grant(authorization) {
        Some(grant) => {
            request.extensions_mut().insert(grant);
            next.run(request).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Bearer"),
                (header::CONTENT_TYPE, "application/json"),
            ],
            r#"{"error":"a valid bearer token is needed (Authorization: Bearer TOKEN)"}"#,
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(read: &str, write: &str) -> Access {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            (!text.is_empty()).then(|| {
                let path = dir.path().join(name);
                std::fs::write(&path, text).unwrap();
                path
            })
        };
        let (r, w) = (file("read", read), file("write", write));
        Access::from_files(r.as_deref(), w.as_deref()).unwrap()
    }

    #[test]
    fn tokens_grant_reading_or_writing_and_nothing_else_does() {
        let a = access("# readers\nread-token-0123456789\n\n", "write-token-0123456789\n");
        assert!(a.required() && a.allows_writes());
        assert_eq!(a.grant(Some("Bearer read-token-0123456789")), Some(Grant::Read));
        assert_eq!(a.grant(Some("Bearer write-token-0123456789")), Some(Grant::Write));
        assert_eq!(a.grant(Some("Bearer read-token-012345678")), None);
        assert_eq!(
            a.grant(Some("read-token-0123456789")),
            None,
            "the Bearer scheme is needed"
        );
        assert_eq!(a.grant(None), None);
    }

    #[test]
    fn without_token_files_everyone_reads_and_nobody_writes() {
        let a = Access::default();
        assert!(!a.required() && !a.allows_writes());
        assert_eq!(a.grant(None), Some(Grant::Read));
        assert_eq!(a.grant(Some("Bearer anything-at-all-really")), Some(Grant::Read));
    }

    #[test]
    fn an_empty_or_weak_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(Access::from_files(Some(&path), None)
            .unwrap_err()
            .to_string()
            .contains("no token"));
        std::fs::write(&path, "short\n").unwrap();
        assert!(Access::from_files(Some(&path), None)
            .unwrap_err()
            .to_string()
            .contains("too easy"));
    }
}
