//! Every expected instant is worked out by hand from the 2026 transitions:
//!
//! - America/New_York: EST (-05:00) until 2026-03-08 02:00 → 03:00 EDT (-04:00), at 07:00Z;
//!   EDT until 2026-11-01 02:00 → 01:00 EST, at 06:00Z (01:00-01:59 happens twice).
//! - Europe/London: GMT until 2026-03-29 01:00 → 02:00 BST (+01:00), at 01:00Z; BST until
//!   2026-10-25 02:00 → 01:00 GMT, at 01:00Z.
//! - Asia/Kolkata: +05:30 all year.
//! - Australia/Lord_Howe: +10:30 until 2026-10-04 02:00 → 02:30 (+11:00): a 30-minute gap.
//! - Pacific/Apia: 2011-12-29 23:59:59 (-10:00) was followed by 2011-12-31 00:00 (+14:00).
//!
//! 2026-03-06 is a Friday, 2026-03-08 and 2026-11-01 are Sundays.

use chrono::SecondsFormat;

use super::*;

const UTC: Tz = Tz::UTC;
const NY: Tz = Tz::America__New_York;
const LONDON: Tz = Tz::Europe__London;
const KOLKATA: Tz = Tz::Asia__Kolkata;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn show(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn day(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
}

fn clock(text: &str) -> ClockTime {
    let (h, m) = text.split_once(':').unwrap();
    ClockTime {
        hour: h.parse().unwrap(),
        minute: m.parse().unwrap(),
    }
}

fn cron(expr: &str) -> Cron {
    Cron::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// The first `n` occurrences after `after`, each searched from the one before.
fn occurrences(expr: &str, tz: Tz, after: &str, n: usize) -> Vec<String> {
    let cron = cron(expr);
    let mut from = at(after);
    let mut out = Vec::new();
    for _ in 0..n {
        let Some(next) = cron.next_after(from, tz) else { break };
        out.push(show(next));
        from = next;
    }
    out
}

#[test]
fn parse_errors_name_the_problem() {
    let cases = [
        (
            "0 8 * *",
            "\"0 8 * *\" has 4 fields; a cron expression has 5 (minute hour day-of-month month day-of-week)",
        ),
        ("0 0 8 * * *", "has 6 fields; a cron expression has 5"),
        ("0 0 8 * * * 2026", "has 7 fields; a cron expression has 5"),
        ("@daily", "has 1 field; a cron expression has 5"),
        ("", "has 0 fields"),
        (
            "61 * * * *",
            "the minute field \"61\" is invalid: Number out of bounds (allowed: 0-59)",
        ),
        ("5-3 * * * *", "the minute field \"5-3\" is invalid"),
        ("x * * * *", "the minute field \"x\" is invalid"),
        ("0/5 * * * *", "the minute field \"0/5\" is invalid"),
        (
            "0 24 * * *",
            "the hour field \"24\" is invalid: Number out of bounds (allowed: 0-23)",
        ),
        ("0 8 0 * *", "the day-of-month field \"0\" is invalid"),
        ("0 8 32 * *", "the day-of-month field \"32\" is invalid"),
        ("0 8 * 13 *", "the month field \"13\" is invalid"),
        ("0 8 * * 8", "the day-of-week field \"8\" is invalid"),
        ("0 8 * * MON-", "the day-of-week field \"MON-\" is invalid"),
    ];
    for (expr, expected) in cases {
        let err = Cron::parse(expr).expect_err(expr).to_string();
        assert!(err.contains(expected), "{expr:?}: {err}");
    }
}

#[test]
fn parse_accepts_five_fields() {
    let cases = [
        ("0 8 * * *", "0 8 * * *"),
        ("  0   8 * *\t1-5 ", "0 8 * * 1-5"),
        ("*/15 8-18/2 1,15 JAN-MAR mon", "*/15 8-18/2 1,15 JAN-MAR mon"),
        ("0 0 L * *", "0 0 L * *"),
    ];
    for (expr, text) in cases {
        assert_eq!(cron(expr).as_str(), text);
    }
}

#[test]
fn next_after() {
    let cases: [(&str, Tz, &str, &[&str]); 20] = [
        // Strictly after: an occurrence at `after` itself is not returned, nor one a fraction
        // of a second before it.
        (
            "0 8 * * *",
            UTC,
            "2026-03-07T07:59:59Z",
            &["2026-03-07T08:00:00Z", "2026-03-08T08:00:00Z"],
        ),
        ("0 8 * * *", UTC, "2026-03-07T08:00:00Z", &["2026-03-08T08:00:00Z"]),
        ("0 8 * * *", UTC, "2026-03-07T08:00:00.5Z", &["2026-03-08T08:00:00Z"]),
        // New York, spring forward: 08:00 moves from 13:00Z to 12:00Z.
        (
            "0 8 * * *",
            NY,
            "2026-03-07T00:00:00Z",
            &["2026-03-07T13:00:00Z", "2026-03-08T12:00:00Z", "2026-03-09T12:00:00Z"],
        ),
        // 02:30 does not exist on 03-08: a fixed-time expression fires at the gap's end, 03:00
        // EDT (croner's Vixie-cron rule), not at 03:30 as local_instant would place 02:30.
        (
            "30 2 * * *",
            NY,
            "2026-03-07T00:00:00Z",
            &["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
        ),
        // An interval expression skips the gap: no 02:00 on 03-08 ...
        (
            "0 * * * *",
            NY,
            "2026-03-08T05:30:00Z",
            &["2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"],
        ),
        // ... and one whose every occurrence is in the gap does not fire that day at all.
        (
            "*/15 2 * * *",
            NY,
            "2026-03-07T12:00:00Z",
            &["2026-03-09T06:00:00Z", "2026-03-09T06:15:00Z"],
        ),
        // New York, fall back: 01:30 happens at 05:30Z (EDT) and 06:30Z (EST); it fires once.
        (
            "30 1 * * *",
            NY,
            "2026-10-31T12:00:00Z",
            &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        ),
        // From inside the second pass (01:10 EST), the repeated 01:30 EST does not fire.
        ("30 1 * * *", NY, "2026-11-01T06:10:00Z", &["2026-11-02T06:30:00Z"]),
        // 02:00 happens once (EST) that day.
        (
            "0 2 * * *",
            NY,
            "2026-11-01T00:00:00Z",
            &["2026-11-01T07:00:00Z", "2026-11-02T07:00:00Z"],
        ),
        // Hourly: 01:00 EDT fires, 01:00 EST (06:00Z) does not, 02:00 EST does.
        (
            "0 * * * *",
            NY,
            "2026-11-01T04:30:00Z",
            &["2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"],
        ),
        (
            "*/30 1 * * *",
            NY,
            "2026-11-01T04:30:00Z",
            &["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"],
        ),
        // From inside the second pass, the rest of the repeated hour is skipped.
        ("*/15 * * * *", NY, "2026-11-01T06:10:00Z", &["2026-11-01T07:00:00Z"]),
        // London, spring forward at 01:00 GMT: 01:30 is in the gap and fires at 02:00 BST.
        (
            "30 1 * * *",
            LONDON,
            "2026-03-28T00:00:00Z",
            &["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        ),
        // London, fall back: 08:00 BST, then 08:00 GMT.
        (
            "0 8 * * *",
            LONDON,
            "2026-10-24T00:00:00Z",
            &["2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z"],
        ),
        // Weekdays: after Friday's 08:00 comes Monday's, which is EDT.
        (
            "0 8 * * 1-5",
            NY,
            "2026-03-06T14:00:00Z",
            &["2026-03-09T12:00:00Z", "2026-03-10T12:00:00Z"],
        ),
        (
            "0 8 * * MON-FRI",
            NY,
            "2026-03-06T12:00:00Z",
            &["2026-03-06T13:00:00Z", "2026-03-09T12:00:00Z"],
        ),
        // Both day fields restricted: either one fires (the 4th, a Wednesday, and Fridays).
        (
            "0 8 4 * 5",
            UTC,
            "2026-03-01T00:00:00Z",
            &["2026-03-04T08:00:00Z", "2026-03-06T08:00:00Z", "2026-03-13T08:00:00Z"],
        ),
        // Kolkata: 08:00 IST is 02:30Z; 02:30 IST is the UTC day before.
        (
            "0 8 * * *",
            KOLKATA,
            "2026-03-07T00:00:00Z",
            &["2026-03-07T02:30:00Z", "2026-03-08T02:30:00Z"],
        ),
        (
            "30 2 * * *",
            KOLKATA,
            "2026-03-07T00:00:00Z",
            &["2026-03-07T21:00:00Z", "2026-03-08T21:00:00Z"],
        ),
    ];
    for (expr, tz, after, expected) in cases {
        assert_eq!(
            occurrences(expr, tz, after, expected.len()),
            *expected,
            "{expr:?} in {tz} after {after}"
        );
    }
}

#[test]
fn next_after_never() {
    assert_eq!(cron("0 0 30 2 *").next_after(at("2026-01-01T00:00:00Z"), UTC), None);
}

#[test]
fn is_sub_daily() {
    let cases = [
        ("0 8 * * *", false),
        ("0 * * * *", true),
        ("0 8,20 * * *", true),
        ("0 8-10 * * *", true),
        ("0 */6 * * *", true),
        // One hour, many minutes: daily, its four occurrences share the day's execution date.
        ("*/15 8 * * *", false),
        ("* 8 * * 1-5", false),
        ("0 0 1 * *", false),
    ];
    for (expr, expected) in cases {
        assert_eq!(cron(expr).is_sub_daily(), expected, "{expr:?}");
    }
}

#[test]
fn execution_date() {
    let cases = [
        ("0 8 * * *", UTC, "2026-03-08T08:00:00Z", "2026-03-08"),
        ("*/15 8 * * *", UTC, "2026-03-08T08:45:00Z", "2026-03-08"),
        ("0 * * * *", NY, "2026-03-08T07:00:00Z", "2026-03-08T03"),
        // 23:00 EST on 03-07 is 04:00Z on 03-08.
        ("0 * * * *", NY, "2026-03-08T04:00:00Z", "2026-03-07T23"),
        ("0 8 * * *", NY, "2026-03-08T03:00:00Z", "2026-03-07"),
        // 02:30 IST on 03-08 is 21:00Z on 03-07.
        ("30 2 * * *", KOLKATA, "2026-03-07T21:00:00Z", "2026-03-08"),
        ("30 * * * *", KOLKATA, "2026-03-07T21:00:00Z", "2026-03-08T02"),
        ("0 * * * *", NY, "2026-11-01T05:00:00Z", "2026-11-01T01"),
        ("0 8,20 * * *", LONDON, "2026-03-29T19:00:00Z", "2026-03-29T20"),
    ];
    for (expr, tz, instant, expected) in cases {
        assert_eq!(
            cron(expr).execution_date(at(instant), tz).to_string(),
            expected,
            "{expr:?} at {instant} in {tz}"
        );
    }
}

/// The hourly dates of a whole local day, as `next_after` and `execution_date` yield them.
fn hourly_dates(tz: Tz, from: &str, until: &str) -> Vec<String> {
    let cron = cron("0 * * * *");
    let (mut t, until) = (at(from), at(until));
    let mut out = Vec::new();
    while let Some(next) = cron.next_after(t, tz).filter(|n| *n < until) {
        out.push(cron.execution_date(next, tz).to_string());
        t = next;
    }
    out
}

#[test]
fn one_execution_per_local_hour_across_dst() {
    let hours = |skip: Option<u32>| -> Vec<String> {
        (0..24)
            .filter(|h| Some(*h) != skip)
            .map(|h| format!("T{h:02}"))
            .collect()
    };
    // Spring forward: 23 hours, no T02. The day runs 05:00Z (00:00 EST) to 04:00Z (00:00 EDT).
    let spring = hourly_dates(NY, "2026-03-08T04:59:00Z", "2026-03-09T04:00:00Z");
    let expected: Vec<String> = hours(Some(2)).iter().map(|h| format!("2026-03-08{h}")).collect();
    assert_eq!(spring, expected);
    // Fall back: 24 dates though the day lasts 25 hours: T01 once. 04:00Z (00:00 EDT) to 05:00Z.
    let fall = hourly_dates(NY, "2026-11-01T03:59:00Z", "2026-11-02T05:00:00Z");
    let expected: Vec<String> = hours(None).iter().map(|h| format!("2026-11-01{h}")).collect();
    assert_eq!(fall, expected);
}

#[test]
fn local_instant_gap_and_fold() {
    let cases = [
        (UTC, "2026-03-08", "08:00", "2026-03-08T08:00:00Z"),
        (NY, "2026-03-08", "01:59", "2026-03-08T06:59:00Z"),
        // In the gap: forward by its hour.
        (NY, "2026-03-08", "02:00", "2026-03-08T07:00:00Z"),
        (NY, "2026-03-08", "02:30", "2026-03-08T07:30:00Z"),
        (NY, "2026-03-08", "03:00", "2026-03-08T07:00:00Z"),
        (NY, "2026-03-08", "03:30", "2026-03-08T07:30:00Z"),
        // In the fold: the earlier (EDT) instant.
        (NY, "2026-11-01", "01:00", "2026-11-01T05:00:00Z"),
        (NY, "2026-11-01", "01:30", "2026-11-01T05:30:00Z"),
        (NY, "2026-11-01", "02:00", "2026-11-01T07:00:00Z"),
        (LONDON, "2026-03-29", "01:30", "2026-03-29T01:30:00Z"),
        (LONDON, "2026-10-25", "01:30", "2026-10-25T00:30:00Z"),
        (KOLKATA, "2026-03-08", "02:30", "2026-03-07T21:00:00Z"),
        // A 30-minute gap moves 02:15 by 30 minutes, to 02:45 (+11:00).
        (Tz::Australia__Lord_Howe, "2026-10-04", "02:15", "2026-10-03T15:45:00Z"),
        // A skipped day: 12:00 on 2011-12-30 is read at -10:00, which is 12:00 on the 31st (+14:00).
        (Tz::Pacific__Apia, "2011-12-30", "12:00", "2011-12-30T22:00:00Z"),
    ];
    for (tz, d, time, expected) in cases {
        assert_eq!(
            show(local_instant(day(d), clock(time), tz)),
            expected,
            "{d} {time} in {tz}"
        );
    }
}

#[test]
fn next_daily() {
    let cases = [
        // Before the time today, exactly at it, after it.
        (
            NY,
            "2026-03-06T12:00:00Z",
            "08:00",
            "2026-03-06",
            "2026-03-06T13:00:00Z",
        ),
        (
            NY,
            "2026-03-06T13:00:00Z",
            "08:00",
            "2026-03-07",
            "2026-03-07T13:00:00Z",
        ),
        (
            NY,
            "2026-03-06T14:00:00Z",
            "08:00",
            "2026-03-07",
            "2026-03-07T13:00:00Z",
        ),
        // 22:00 EST on 03-06 is 03:00Z on 03-07: the local day is the 6th.
        (
            NY,
            "2026-03-07T03:00:00Z",
            "23:00",
            "2026-03-06",
            "2026-03-07T04:00:00Z",
        ),
        // The next day is the spring-forward day: 08:00 EDT.
        (
            NY,
            "2026-03-07T20:00:00Z",
            "08:00",
            "2026-03-08",
            "2026-03-08T12:00:00Z",
        ),
        // A time in today's gap, before and after it.
        (
            NY,
            "2026-03-08T06:00:00Z",
            "02:30",
            "2026-03-08",
            "2026-03-08T07:30:00Z",
        ),
        (
            NY,
            "2026-03-08T07:40:00Z",
            "02:30",
            "2026-03-09",
            "2026-03-09T06:30:00Z",
        ),
        // 01:45 EDT on the fall-back day: 01:30 EDT has passed, and 01:30 EST does not count.
        (
            NY,
            "2026-11-01T05:45:00Z",
            "01:30",
            "2026-11-02",
            "2026-11-02T06:30:00Z",
        ),
        (
            NY,
            "2026-11-01T05:15:00Z",
            "01:30",
            "2026-11-01",
            "2026-11-01T05:30:00Z",
        ),
        // 01:30 IST on 03-08 is 20:00Z on 03-07.
        (
            KOLKATA,
            "2026-03-07T20:00:00Z",
            "02:30",
            "2026-03-08",
            "2026-03-07T21:00:00Z",
        ),
        (
            UTC,
            "2026-12-31T23:59:00Z",
            "00:00",
            "2027-01-01",
            "2027-01-01T00:00:00Z",
        ),
    ];
    for (tz, now, time, expected_day, expected_at) in cases {
        let (d, instant) = super::next_daily(at(now), clock(time), tz);
        assert_eq!(
            (d, show(instant)),
            (day(expected_day), expected_at.to_string()),
            "{time} after {now} in {tz}"
        );
    }
}

#[test]
fn sla_deadline() {
    let daily = |d: &str| ExecutionDate::daily(day(d));
    let hourly = |d: &str, h: u32| ExecutionDate::hourly(day(d), h);
    let hm = |text: &str| Deadline::Daily(clock(text));
    let cases = [
        // Daily deadlines on a daily date.
        (daily("2026-03-06"), hm("10:00"), NY, None, Some("2026-03-06T15:00:00Z")),
        (
            daily("2026-03-06"),
            hm("10:00"),
            NY,
            Some("08:00"),
            Some("2026-03-06T15:00:00Z"),
        ),
        (daily("2026-03-08"), hm("10:00"), NY, None, Some("2026-03-08T14:00:00Z")),
        // Rollover: at or before the day's start means the next day.
        (
            daily("2026-03-06"),
            hm("02:00"),
            NY,
            Some("23:00"),
            Some("2026-03-07T07:00:00Z"),
        ),
        (
            daily("2026-03-06"),
            hm("08:00"),
            NY,
            Some("08:00"),
            Some("2026-03-07T13:00:00Z"),
        ),
        (
            daily("2026-03-06"),
            hm("08:01"),
            NY,
            Some("08:00"),
            Some("2026-03-06T13:01:00Z"),
        ),
        // Rolled into the spring-forward gap: 02:30 is 03:30 EDT.
        (
            daily("2026-03-07"),
            hm("02:30"),
            NY,
            Some("23:00"),
            Some("2026-03-08T07:30:00Z"),
        ),
        // Rolled over the year's end.
        (
            daily("2026-12-31"),
            hm("01:00"),
            UTC,
            Some("22:00"),
            Some("2027-01-01T01:00:00Z"),
        ),
        // Kolkata: 02:00 IST on 03-08 is 20:30Z on 03-07.
        (
            daily("2026-03-08"),
            hm("02:00"),
            KOLKATA,
            None,
            Some("2026-03-07T20:30:00Z"),
        ),
        // Hourly deadlines: the end of the hour, plus the minute.
        (
            hourly("2026-03-06", 5),
            Deadline::Hourly { minute: 30 },
            NY,
            None,
            Some("2026-03-06T11:30:00Z"),
        ),
        (
            hourly("2026-03-06", 5),
            Deadline::Hourly { minute: 30 },
            NY,
            Some("23:00"),
            Some("2026-03-06T11:30:00Z"),
        ),
        (
            hourly("2026-03-06", 23),
            Deadline::Hourly { minute: 15 },
            NY,
            None,
            Some("2026-03-07T05:15:00Z"),
        ),
        (
            hourly("2026-12-31", 23),
            Deadline::Hourly { minute: 5 },
            UTC,
            None,
            Some("2027-01-01T00:05:00Z"),
        ),
        (
            hourly("2026-03-08", 23),
            Deadline::Hourly { minute: 0 },
            KOLKATA,
            None,
            Some("2026-03-08T18:30:00Z"),
        ),
        // Spring forward: after T01 the next wall-clock hour is 02, which is 03 EDT.
        (
            hourly("2026-03-08", 1),
            Deadline::Hourly { minute: 0 },
            NY,
            None,
            Some("2026-03-08T07:00:00Z"),
        ),
        (
            hourly("2026-03-08", 1),
            Deadline::Hourly { minute: 30 },
            NY,
            None,
            Some("2026-03-08T07:30:00Z"),
        ),
        (
            hourly("2026-03-08", 3),
            Deadline::Hourly { minute: 0 },
            NY,
            None,
            Some("2026-03-08T08:00:00Z"),
        ),
        (
            hourly("2026-03-29", 0),
            Deadline::Hourly { minute: 30 },
            LONDON,
            None,
            Some("2026-03-29T01:30:00Z"),
        ),
        // Fall back: T00 is due in the fold (its earlier pass); T01 at 02:00 EST.
        (
            hourly("2026-11-01", 0),
            Deadline::Hourly { minute: 30 },
            NY,
            None,
            Some("2026-11-01T05:30:00Z"),
        ),
        (
            hourly("2026-11-01", 1),
            Deadline::Hourly { minute: 0 },
            NY,
            None,
            Some("2026-11-01T07:00:00Z"),
        ),
        // An hourly deadline has no meaning for a daily date.
        (daily("2026-03-06"), Deadline::Hourly { minute: 30 }, NY, None, None),
        // A daily deadline for an hourly date: the date's day, with the same rollover.
        (
            hourly("2026-03-06", 5),
            hm("10:00"),
            NY,
            None,
            Some("2026-03-06T15:00:00Z"),
        ),
        (
            hourly("2026-03-06", 23),
            hm("02:00"),
            NY,
            Some("23:00"),
            Some("2026-03-07T07:00:00Z"),
        ),
    ];
    for (date, deadline, tz, start, expected) in cases {
        let got = super::sla_deadline(date, deadline, tz, start.map(clock)).map(show);
        assert_eq!(
            got.as_deref(),
            expected,
            "{date} {deadline:?} in {tz} starting {start:?}"
        );
    }
}
