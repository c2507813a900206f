//! YAML as Sluice reads it everywhere (pipeline configs, calendars, topic definitions):
//! the YAML 1.2 core schema with `serde-saphyr`, set to read untyped values as the older
//! design's Go parser (yaml.v3) and Sluice's earlier parser did, so that a file means what
//! it meant:
//! - `yes`/`no`/`on`/`off` are strings (only `true`/`false` are booleans);
//! - `017` and `1_000` are strings, not numbers;
//! - `.inf` and `.nan` are the strings they are written as (not a silent null);
//! - a key given twice in a mapping is an error (yaml.v3 refuses it too);
//! - merge keys (`<<: *defaults`) merge;
//! - a tag Sluice does not know (`!Ref`) is an error, not silently dropped.
//!
//! The parser's budget (document size, depth, aliases) bounds what a hostile file costs.

use serde::de::DeserializeOwned;
use serde_saphyr::options::NonFiniteFloatPolicy;
use serde_saphyr::Options;

fn options() -> Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        non_finite_float_policy: NonFiniteFloatPolicy::AsString,
        reject_unsupported_tags: true,
        with_snippet: false,
    }
}

/// Why a YAML text does not read as what was asked for, with its line and column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

/// One YAML document as `T`; `Err` says why, with its line and column.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(message)
}

/// Every document of a YAML stream (`---` between them) as `T`.
pub fn from_str_multiple<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, YamlError> {
    serde_saphyr::from_str_multiple_with_options(text, options()).map_err(message)
}

fn message(e: serde_saphyr::Error) -> YamlError {
    let text = e.to_string();
    YamlError(text.strip_prefix("error: ").unwrap_or(&text).trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn read(text: &str) -> Result<Value, String> {
        from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn untyped_scalars_read_as_the_older_design_read_them() {
        let text = "deadline: 23:59\nflag: yes\noff: off\nzip: 017\nbig: 1_000\nn: 5\nf: 1.5\nt: true\nd: 2026-01-01\nq: '5m'\ninf: .inf\nnothing: ~\n";
        assert_eq!(
            read(text).unwrap(),
            json!({"deadline": "23:59", "flag": "yes", "off": "off", "zip": "017", "big": "1_000", "n": 5,
                   "f": 1.5, "t": true, "d": "2026-01-01", "q": "5m", "inf": ".inf", "nothing": null})
        );
    }

    #[test]
    fn merge_keys_merge_and_mistakes_are_errors_with_their_place() {
        let merged = read("base: &b {x: 1, y: 2}\nthis:\n  <<: *b\n  y: 3\n").unwrap();
        assert_eq!(merged["this"], json!({"x": 1, "y": 3}));
        for (bad, says) in [
            ("a: 1\na: 2\n", "duplicate"),
            ("a: !Ref x\n", "tag"),
            ("a: [1, 2\n", "line 1"),
            ("a:\n\t- 1\n", "line 2"),
            ("---\na: 1\n---\nb: 2\n", "multiple"),
        ] {
            let e = read(bad).unwrap_err();
            assert!(e.contains(says) && !e.starts_with("error:"), "{bad:?}: {e}");
        }
        let docs: Vec<Value> = from_str_multiple("---\na: 1\n---\nb: 2\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
    }

    #[test]
    fn an_alias_bomb_is_refused_not_expanded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(read(&text).is_err(), "ten to the twelfth strings were built");
    }
}
