//! Spend-limit windows: UTC calendar periods, so every replica (and the database's
//! `key_spend` rows, keyed by window start) agrees on which window an instant belongs to
//! without sharing any state.
//!
//! - `Daily`: from 00:00:00 UTC of the day, for one day.
//! - `Weekly`: from Monday 00:00:00 UTC (ISO weeks), for seven days.
//! - `Monthly`: from the 1st of the month 00:00:00 UTC, to the 1st of the next month.
//!
//! Invariants: `window_start(r, t) <= t < window_end(r, t)`; an instant exactly at a
//! boundary opens the new window; `window_end(r, t) == window_start(r, window_end(r, t))` —
//! windows tile time with no gap or overlap. Time zones and daylight saving play no part.
//! At the very ends of chrono's range (±262,000 years) the arithmetic saturates instead of
//! failing.

use chrono::{DateTime, Datelike, Months, NaiveDate, NaiveTime, Utc};

use crate::money::Usd;
use crate::store::{ApiKey, LimitReset, Store, StoreResult};

/// Midnight UTC at the start of `date`.
fn midnight(date: NaiveDate) -> DateTime<Utc> {
    date.and_time(NaiveTime::MIN).and_utc()
}

/// The first day of the window containing `date`.
fn first_day(reset: LimitReset, date: NaiveDate) -> NaiveDate {
    let back = match reset {
        LimitReset::Daily => 0,
        LimitReset::Weekly => date.weekday().num_days_from_monday(),
        LimitReset::Monthly => date.day0(),
    };
    date.checked_sub_days(chrono::Days::new(u64::from(back)))
        .unwrap_or(NaiveDate::MIN)
}

/// The instant the window containing `now` opened.
pub fn window_start(reset: LimitReset, now: DateTime<Utc>) -> DateTime<Utc> {
    midnight(first_day(reset, now.date_naive()))
}

/// Each key's spend in its window containing `now` (`None` for a key without a limit), read
/// in one store call.
pub async fn current_spends(
    store: &dyn Store,
    keys: &[ApiKey],
    now: DateTime<Utc>,
) -> StoreResult<Vec<Option<Usd>>> {
    let windows: Vec<(String, DateTime<Utc>)> = keys
        .iter()
        .filter_map(|k| k.limit_reset.map(|r| (k.id.clone(), window_start(r, now))))
        .collect();
    // In the order asked: one answer per key with a limit.
    let mut spends = store.key_spends(&windows).await?.into_iter();
    Ok(keys
        .iter()
        .map(|k| k.limit_reset.and(spends.next()).map(|(_, s)| s))
        .collect())
}

/// The instant the window containing `now` closes (the next window's start; exclusive).
pub fn window_end(reset: LimitReset, now: DateTime<Utc>) -> DateTime<Utc> {
    let first = first_day(reset, now.date_naive());
    let next = match reset {
        LimitReset::Daily => first.checked_add_days(chrono::Days::new(1)),
        LimitReset::Weekly => first.checked_add_days(chrono::Days::new(7)),
        // `first` is the 1st, so adding a month never clamps the day.
        LimitReset::Monthly => first.checked_add_months(Months::new(1)),
    };
    midnight(next.unwrap_or(NaiveDate::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Weekday};

    use LimitReset::{Daily, Monthly, Weekly};

    fn t(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    fn day(y: i32, mo: u32, d: u32) -> DateTime<Utc> {
        t(y, mo, d, 0, 0, 0)
    }

    /// Checks the tiling invariants around `now`.
    fn invariants(reset: LimitReset, now: DateTime<Utc>) {
        let (s, e) = (window_start(reset, now), window_end(reset, now));
        assert!(s <= now && now < e, "{reset:?} {now}: [{s}, {e})");
        assert_eq!(
            window_start(reset, e),
            e,
            "{reset:?} {now}: next opens at end"
        );
        assert_eq!(window_start(reset, s), s);
        assert_eq!(window_end(reset, s), e);
        let last = e - chrono::Duration::microseconds(1);
        assert_eq!(window_start(reset, last), s);
    }

    #[test]
    fn daily_windows() {
        let now = t(2025, 3, 14, 15, 9, 26);
        assert_eq!(window_start(Daily, now), day(2025, 3, 14));
        assert_eq!(window_end(Daily, now), day(2025, 3, 15));
        // The exact boundary instant belongs to the new day.
        assert_eq!(window_start(Daily, day(2025, 3, 15)), day(2025, 3, 15));
        let just_before = day(2025, 3, 15) - chrono::Duration::nanoseconds(1);
        assert_eq!(window_start(Daily, just_before), day(2025, 3, 14));
        assert_eq!(window_end(Daily, just_before), day(2025, 3, 15));
        // Year end.
        assert_eq!(
            window_end(Daily, t(2025, 12, 31, 23, 59, 59)),
            day(2026, 1, 1)
        );
    }

    #[test]
    fn weekly_windows_start_on_monday() {
        // 2025-03-16 is a Sunday; its week began Monday 2025-03-10.
        let sunday = t(2025, 3, 16, 23, 59, 59);
        assert_eq!(sunday.weekday(), Weekday::Sun);
        assert_eq!(window_start(Weekly, sunday), day(2025, 3, 10));
        assert_eq!(window_end(Weekly, sunday), day(2025, 3, 17));
        // Sunday → Monday: Monday 00:00 opens the next week.
        let monday = day(2025, 3, 17);
        assert_eq!(monday.weekday(), Weekday::Mon);
        assert_eq!(window_start(Weekly, monday), monday);
        assert_eq!(window_end(Weekly, monday), day(2025, 3, 24));
        // A week across a year boundary: Mon 2024-12-30 .. Mon 2025-01-06.
        let new_year = t(2025, 1, 1, 12, 0, 0);
        assert_eq!(window_start(Weekly, new_year), day(2024, 12, 30));
        assert_eq!(window_end(Weekly, new_year), day(2025, 1, 6));
        for d in 10..=16 {
            assert_eq!(
                window_start(Weekly, t(2025, 3, d, 7, 0, 0)),
                day(2025, 3, 10)
            );
        }
    }

    #[test]
    fn monthly_windows_start_on_the_first() {
        assert_eq!(
            window_start(Monthly, t(2025, 3, 31, 23, 59, 59)),
            day(2025, 3, 1)
        );
        assert_eq!(
            window_end(Monthly, t(2025, 3, 31, 23, 59, 59)),
            day(2025, 4, 1)
        );
        assert_eq!(window_start(Monthly, day(2025, 4, 1)), day(2025, 4, 1));
        // December → January of the next year.
        assert_eq!(
            window_start(Monthly, t(2025, 12, 31, 23, 0, 0)),
            day(2025, 12, 1)
        );
        assert_eq!(
            window_end(Monthly, t(2025, 12, 31, 23, 0, 0)),
            day(2026, 1, 1)
        );
        assert_eq!(window_start(Monthly, day(2026, 1, 1)), day(2026, 1, 1));
        // 30-day month.
        assert_eq!(
            window_end(Monthly, t(2025, 4, 30, 1, 0, 0)),
            day(2025, 5, 1)
        );
    }

    #[test]
    fn leap_day() {
        let leap = t(2024, 2, 29, 12, 0, 0);
        assert_eq!(window_start(Daily, leap), day(2024, 2, 29));
        assert_eq!(window_end(Daily, leap), day(2024, 3, 1));
        assert_eq!(window_start(Monthly, leap), day(2024, 2, 1));
        assert_eq!(window_end(Monthly, leap), day(2024, 3, 1));
        // 2024-02-29 is a Thursday: its week is Mon 02-26 .. Mon 03-04.
        assert_eq!(window_start(Weekly, leap), day(2024, 2, 26));
        assert_eq!(window_end(Weekly, leap), day(2024, 3, 4));
        // A non-leap February ends on the 28th.
        assert_eq!(
            window_end(Monthly, t(2025, 2, 28, 23, 59, 59)),
            day(2025, 3, 1)
        );
        assert_eq!(window_end(Daily, t(2025, 2, 28, 0, 0, 0)), day(2025, 3, 1));
    }

    #[test]
    fn windows_tile_time() {
        let samples = [
            t(2024, 2, 29, 0, 0, 0),
            t(2024, 12, 31, 23, 59, 59),
            t(2025, 1, 1, 0, 0, 0),
            t(2025, 3, 16, 23, 59, 59),
            t(2025, 3, 17, 0, 0, 0),
            t(1970, 1, 1, 0, 0, 0),
            t(1969, 12, 31, 23, 59, 59),
            t(2100, 2, 28, 6, 0, 0),
        ];
        for now in samples {
            for reset in [Daily, Weekly, Monthly] {
                invariants(reset, now);
            }
        }
        // Sub-second instants at a boundary still open the new window.
        let at = day(2025, 6, 1) + chrono::Duration::microseconds(1);
        assert_eq!(window_start(Monthly, at), day(2025, 6, 1));
    }

    #[test]
    fn saturates_at_the_end_of_time() {
        let end = DateTime::<Utc>::MAX_UTC;
        for reset in [Daily, Weekly, Monthly] {
            assert!(window_start(reset, end) <= end);
            let _ = window_end(reset, end);
            let _ = window_start(reset, DateTime::<Utc>::MIN_UTC);
        }
    }
}
