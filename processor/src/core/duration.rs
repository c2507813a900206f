//! Durations as pipeline YAML writes them: `90s`, `5m`, `2h`, `1h30m`, `1.5h`, `500ms`, `1d`.

use chrono::TimeDelta;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{input:?} is not a duration ({why}); write e.g. 90s, 5m, 2h or 1h30m")]
pub struct DurationError {
    input: String,
    why: &'static str,
}

/// Parses a duration made of `<number><unit>` parts (units: ms, s, m, h, d).
pub fn parse_duration(input: &str) -> Result<TimeDelta, DurationError> {
    let fail = |why| DurationError {
        input: input.to_string(),
        why,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(fail("empty"));
    }
    let mut total_ms: f64 = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| fail("a number needs a unit"))?;
        if number_len == 0 {
            return Err(fail("expected a number"));
        }
        let number: f64 = rest[..number_len].parse().map_err(|_| fail("bad number"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1.0,
            "s" => 1_000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => 86_400_000.0,
            _ => return Err(fail("unknown unit")),
        };
        rest = &rest[unit_len..];
        total_ms += number * unit_ms;
    }
    if !total_ms.is_finite() || total_ms > i64::MAX as f64 / 2.0 {
        return Err(fail("too large"));
    }
    Ok(TimeDelta::milliseconds(total_ms.round() as i64))
}

/// Formats a duration the way a person would write it (`1h30m`, `90s` → `1m30s`).
pub fn format_duration(d: TimeDelta) -> String {
    let mut ms = d.num_milliseconds();
    if ms == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    if ms < 0 {
        out.push('-');
        ms = -ms;
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_pipelines_use() {
        let cases = [
            ("90s", 90_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
            ("1h30m", 5_400_000),
            ("1.5h", 5_400_000),
            ("500ms", 500),
            ("1d", 86_400_000),
            (" 10m ", 600_000),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration(text).unwrap().num_milliseconds(), ms, "{text}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in ["", "5", "m", "5x", "1h30", "-5m", "h5"] {
            assert!(parse_duration(text).is_err(), "{text} should be rejected");
        }
    }

    #[test]
    fn formats_back_readably() {
        assert_eq!(format_duration(TimeDelta::seconds(5400)), "1h30m");
        assert_eq!(format_duration(TimeDelta::seconds(90)), "1m30s");
        assert_eq!(format_duration(TimeDelta::zero()), "0s");
    }
}
