//! Execution dates and ids: the parser records go through, the canonical text stored, and
//! the `schedule/date` key.

use chrono::{Datelike, NaiveDate};

use super::*;

fn day(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
}

#[test]
fn canonical_execution_date_text() {
    let valid = [
        ("2026-03-08", day("2026-03-08"), None),
        ("2026-03-08T05", day("2026-03-08"), Some(5)),
        ("2026-03-08T00", day("2026-03-08"), Some(0)),
        ("2026-12-31T23", day("2026-12-31"), Some(23)),
        ("2028-02-29", day("2028-02-29"), None),
    ];
    for (text, day, hour) in valid {
        let date = ExecutionDate::canonical(text);
        assert_eq!(date, Some(ExecutionDate { day, hour }), "{text}");
        assert_eq!(date.unwrap().to_string(), text);
    }
    let invalid = [
        "",
        "2026-3-8",
        "2026-03-8",
        "20260308",
        "2026-03-08T5",
        "2026-03-08T+5",
        "2026-03-08T24",
        "2026-03-08T05:00",
        "2026-03-08 05",
        "2026-03-08T",
        "2026-02-30",
        "2027-02-29",
        " 2026-03-08",
        "+2026-03-08",
    ];
    for text in invalid {
        assert_eq!(ExecutionDate::canonical(text), None, "{text:?}");
    }
    assert_eq!(ExecutionDate::daily(day("2026-03-08")).to_string(), "2026-03-08");
    assert_eq!(ExecutionDate::hourly(day("2026-03-08"), 7).to_string(), "2026-03-08T07");
    let mut dates = [
        ExecutionDate::daily(day("2026-03-09")),
        ExecutionDate::hourly(day("2026-03-08"), 10),
        ExecutionDate::hourly(day("2026-03-08"), 9),
        ExecutionDate::daily(day("2026-03-08")),
    ];
    dates.sort();
    let texts: Vec<String> = dates.iter().map(ToString::to_string).collect();
    assert_eq!(texts, ["2026-03-08", "2026-03-08T09", "2026-03-08T10", "2026-03-09"]);
}

#[test]
fn records_may_spell_a_date_any_way_the_edge_accepts_and_it_reads_back_canonical() {
    let spellings = [
        ("2026-03-03", "2026-03-03"),
        ("20260303", "2026-03-03"),
        ("2026-3-3", "2026-03-03"),
        ("2026-03-03T05", "2026-03-03T05"),
        ("20260303T05", "2026-03-03T05"),
        ("2026-03-03T5", "2026-03-03T05"),
        ("2026-03-03T+5", "2026-03-03T05"),
        ("2026-03-03T005", "2026-03-03T05"),
        ("2026-03-03T00", "2026-03-03T00"),
        ("2026-03-03T23", "2026-03-03T23"),
    ];
    for (text, canonical) in spellings {
        let date: ExecutionDate = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(date.to_string(), canonical, "{text}");
        assert_eq!(canonical.parse::<ExecutionDate>(), Ok(date), "{canonical}");
        assert_eq!(ExecutionDate::canonical(canonical), Some(date), "{canonical}");
    }
}

#[test]
fn what_is_not_a_date_is_refused_with_the_text() {
    for text in [
        "",
        "T05",
        "2026-03-03T",
        "2026-03-03T24",
        "2026-03-03T-1",
        "2026-03-03T05:00",
        "2026-03-03 05",
        "2026-02-30",
        "03/03/2026",
        "2026/03/03",
        "yesterday",
    ] {
        assert_eq!(
            text.parse::<ExecutionDate>(),
            Err(ParseError::Date(text.to_string())),
            "{text:?}"
        );
    }
    assert_eq!(
        "2026-03-03T24".parse::<ExecutionDate>().unwrap_err().to_string(),
        "\"2026-03-03T24\" is not YYYY-MM-DD or YYYY-MM-DDTHH"
    );
}

#[test]
fn the_day_of_a_date() {
    let hourly = ExecutionDate::hourly(day("2026-11-23"), 5);
    assert_eq!(hourly.whole_day(), ExecutionDate::daily(day("2026-11-23")));
    assert_eq!(hourly.whole_day().whole_day(), hourly.whole_day());
    assert_eq!(hourly.compact_day(), "20261123");
    assert_eq!(ExecutionDate::daily(day("2026-03-03")).compact_day(), "20260303");
}

#[test]
fn execution_ids_round_trip_through_their_text() {
    for (text, schedule, date) in [
        ("daily/2026-11-23", "daily", ExecutionDate::daily(day("2026-11-23"))),
        (
            "hourly/2026-11-23T05",
            "hourly",
            ExecutionDate::hourly(day("2026-11-23"), 5),
        ),
        ("stream/2026-11-22", "stream", ExecutionDate::daily(day("2026-11-22"))),
        // A date never holds the separator: the last one splits, whatever the schedule id.
        (
            "team/etl/2026-11-23",
            "team/etl",
            ExecutionDate::daily(day("2026-11-23")),
        ),
    ] {
        let id: ExecutionId = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(id, ExecutionId::new(schedule, date), "{text}");
        assert_eq!(id.to_string(), text);
        assert_eq!(
            (id.schedule(), id.date(), id.date_text()),
            (schedule, date, &text[schedule.len() + 1..])
        );
        assert_eq!(ExecutionId::of(schedule, id.date_text()), Some(id));
    }
}

#[test]
fn an_execution_id_needs_a_schedule_separator_and_a_canonical_date() {
    for text in [
        "",
        "daily",
        "2026-11-23",
        "daily/",
        "daily/2026-11-23/",
        "daily/20261123",
        "daily/2026-11-23T5",
        "daily/2026-11-23T24",
        "daily-2026-11-23",
    ] {
        assert_eq!(
            text.parse::<ExecutionId>(),
            Err(ParseError::Id(text.to_string())),
            "{text:?}"
        );
    }
}

/// Ids that sort differently by their parts than by their text: `-` and `.` come before the
/// separator, so `a-b/…` sorts before `a/…` as text though `a` < `a-b`.
const AWKWARD: [&str; 7] = [
    "a/2026-11-23",
    "a-b/2026-11-22",
    "a.b/2026-11-24",
    "a/2026-11-23T05",
    "ab/2026-11-01",
    "a/b/2026-11-23",
    "a/2026-11-22T23",
];

#[test]
fn ids_order_and_serialise_as_their_text_so_stored_maps_keep_their_bytes() {
    let ids: Vec<ExecutionId> = AWKWARD.iter().map(|t| t.parse().unwrap()).collect();
    let mut by_id = ids.clone();
    by_id.sort();
    let mut by_text = AWKWARD.to_vec();
    by_text.sort();
    assert_eq!(by_id.iter().map(ExecutionId::as_str).collect::<Vec<_>>(), by_text);
    // A map keyed by ids is written exactly as the map keyed by their text was.
    let keyed_by_id: std::collections::BTreeMap<_, _> = ids.iter().map(|id| (id.clone(), 1)).collect();
    let keyed_by_text: std::collections::BTreeMap<_, _> = AWKWARD.iter().map(|t| (t.to_string(), 1)).collect();
    let written = serde_json::to_string(&keyed_by_id).unwrap();
    assert_eq!(written, serde_json::to_string(&keyed_by_text).unwrap());
    let read: std::collections::BTreeMap<ExecutionId, i32> = serde_json::from_str(&written).unwrap();
    assert_eq!(read, keyed_by_id);
    // Looked up by text as by id.
    assert_eq!(keyed_by_id.get("a-b/2026-11-22"), Some(&1));
}

#[test]
fn a_stored_id_that_is_not_canonical_does_not_read() {
    for text in ["\"daily/20261123\"", "\"daily\"", "\"daily/2026-11-23T5\""] {
        assert!(serde_json::from_str::<ExecutionId>(text).is_err(), "{text}");
    }
    assert!(serde_json::from_str::<ExecutionDate>("\"20261123\"").is_err());
    assert_eq!(
        serde_json::from_str::<ExecutionDate>("\"2026-11-23T05\"").unwrap(),
        ExecutionDate::hourly(day("2026-11-23"), 5)
    );
}

/// A timer of an execution, stored as its fields.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Timer {
    #[serde(flatten, with = "fields")]
    execution: ExecutionId,
    run_id: String,
}

#[test]
fn as_fields_an_id_is_its_schedule_and_date_in_place() {
    let timer = Timer {
        execution: "team/etl/2026-11-23T05".parse().unwrap(),
        run_id: "r".into(),
    };
    let written = serde_json::to_string(&timer).unwrap();
    assert_eq!(
        written,
        r#"{"scheduleId":"team/etl","date":"2026-11-23T05","runId":"r"}"#
    );
    assert_eq!(serde_json::from_str::<Timer>(&written).unwrap(), timer);
    let bad = r#"{"scheduleId":"daily","date":"20261123","runId":"r"}"#;
    assert!(
        serde_json::from_str::<Timer>(bad).is_err(),
        "a date not in its canonical form"
    );
}

/// The long way [`ExecutionDate::canonical`] takes for shapes it does not read directly.
fn canonical_the_long_way(text: &str) -> Option<ExecutionDate> {
    text.parse()
        .ok()
        .filter(|date: &ExecutionDate| date.to_string() == text)
}

#[test]
fn the_direct_reading_of_a_canonical_date_agrees_with_the_long_way() {
    let mut rng = fastrand::Rng::with_seed(42);
    let mut day = NaiveDate::from_ymd_opt(1999, 1, 1).unwrap();
    while day.year() < 2032 {
        for hour in [None, Some(0), Some(rng.u32(0..24)), Some(23)] {
            let date = ExecutionDate { day, hour };
            let text = date.to_string();
            let chrono = day.format("%Y-%m-%d").to_string() + &hour.map(|h| format!("T{h:02}")).unwrap_or_default();
            assert_eq!(text, chrono, "written directly as chrono writes it");
            assert_eq!(ExecutionDate::canonical(&text), canonical_the_long_way(&text), "{text}");
            assert_eq!(ExecutionId::of("s", &text), Some(ExecutionId::new("s", date)));
            assert!(ExecutionDate::canonical(&text).is_some(), "{text}");
            // The same text with one byte changed reads the same both ways.
            let mut bytes = text.clone().into_bytes();
            let at = rng.usize(..bytes.len());
            bytes[at] = b"0123456789-T:+ x"[rng.usize(..16)];
            if let Ok(changed) = String::from_utf8(bytes) {
                assert_eq!(
                    ExecutionDate::canonical(&changed),
                    canonical_the_long_way(&changed),
                    "{changed}"
                );
            }
        }
        day = day.succ_opt().unwrap();
    }
}

#[test]
fn dates_of_any_year_are_written_as_chrono_writes_them() {
    for year in [-1, 0, 7, 999, 1000, 9999, 10000, 262_142] {
        let day = NaiveDate::from_ymd_opt(year, 2, 3).unwrap();
        assert_eq!(
            ExecutionDate::daily(day).to_string(),
            day.format("%Y-%m-%d").to_string()
        );
    }
}
