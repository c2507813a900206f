//! Patterns with `*`: sensor keys a pipeline expects (`anomalies.expectedSensors`) and the
//! pipelines an alert route names.

/// `pattern` with `*` matching any run of characters (and nothing else special).
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_any_run_of_characters() {
        assert!(wildcard("*", ""));
        assert!(wildcard("a*", "abc"));
        assert!(wildcard("*c", "abc"));
        assert!(wildcard("a*c", "ac"));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("a*b*c", "axxc"));
        assert!(!wildcard("abc", "abcd"));
        assert!(!wildcard("a*aa", "aa"));
    }
}
