//! The time on an access log line, in UTC: `10/Oct/2000:13:55:36 +0000` for `combined` and
//! `2000-10-10T13:55:36.123Z` (RFC 3339) for JSON. The date is worked out once a second per
//! worker, from the system clock, without a time zone database.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// One moment, as both formats write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogTime {
    /// `10/Oct/2000:13:55:36 +0000`
    pub combined: [u8; 26],
    /// `2000-10-10T13:55:36`, to which the milliseconds and `Z` are added.
    pub rfc3339_seconds: [u8; 19],
    pub millis: u16,
}

impl LogTime {
    /// The moment `seconds` and `millis` after the Unix epoch. Years past 9999 are written as
    /// 9999 (the formats have four digits for them).
    pub fn at(seconds: u64, millis: u16) -> LogTime {
        let days = seconds / 86_400;
        let in_day = seconds % 86_400;
        let (year, month, day) = civil_from_days(days);
        let year = year.min(9999);
        let (hour, minute, second) = (in_day / 3600, in_day / 60 % 60, in_day % 60);
        let mut combined = *b"00/Jan/0000:00:00:00 +0000";
        put_digits(&mut combined[0..2], day);
        combined[3..6].copy_from_slice(MONTHS[(month - 1) as usize]);
        put_digits(&mut combined[7..11], year);
        put_digits(&mut combined[12..14], hour);
        put_digits(&mut combined[15..17], minute);
        put_digits(&mut combined[18..20], second);
        let mut rfc3339_seconds = *b"0000-00-00T00:00:00";
        put_digits(&mut rfc3339_seconds[0..4], year);
        put_digits(&mut rfc3339_seconds[5..7], month);
        put_digits(&mut rfc3339_seconds[8..10], day);
        put_digits(&mut rfc3339_seconds[11..13], hour);
        put_digits(&mut rfc3339_seconds[14..16], minute);
        put_digits(&mut rfc3339_seconds[17..19], second);
        LogTime {
            combined,
            rfc3339_seconds,
            millis,
        }
    }
}

/// A worker's clock: the last second's `LogTime`, so that a busy worker formats a date once a
/// second rather than once a request.
#[derive(Debug, Default)]
pub struct LogClock {
    last: Option<(u64, LogTime)>,
}

impl LogClock {
    /// The time now.
    pub fn now(&mut self) -> LogTime {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let seconds = since_epoch.as_secs();
        let millis = u16::try_from(since_epoch.subsec_millis()).unwrap_or(0);
        match &mut self.last {
            Some((second, time)) if *second == seconds => {
                time.millis = millis;
                *time
            }
            _ => {
                let time = LogTime::at(seconds, millis);
                self.last = Some((seconds, time));
                time
            }
        }
    }
}

/// Writes `value` in decimal into all of `digits`, with leading zeros.
fn put_digits(digits: &mut [u8], mut value: u64) {
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// (year, month 1–12, day 1–31) of the day `days` after 1970-01-01, in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(seconds: u64) -> (String, String) {
        let time = LogTime::at(seconds, 7);
        (
            String::from_utf8(time.combined.to_vec()).unwrap(),
            String::from_utf8(time.rfc3339_seconds.to_vec()).unwrap(),
        )
    }

    #[test]
    fn dates_are_written_in_utc_as_both_formats_want_them() {
        assert_eq!(
            texts(0),
            (
                "01/Jan/1970:00:00:00 +0000".into(),
                "1970-01-01T00:00:00".into()
            )
        );
        // Apache's documentation example, 13:55:36 -0700 being 20:55:36 UTC.
        assert_eq!(texts(971_211_336).0, "10/Oct/2000:20:55:36 +0000");
        // A leap day, and the last second of a year.
        assert_eq!(texts(951_782_400).1, "2000-02-29T00:00:00");
        assert_eq!(texts(1_704_067_199).1, "2023-12-31T23:59:59");
        assert_eq!(texts(1_709_251_199).0, "29/Feb/2024:23:59:59 +0000");
    }

    #[test]
    fn every_day_of_four_centuries_follows_the_one_before() {
        let mut previous = civil_from_days(0);
        for days in 1..146_097 * 2 {
            let (year, month, day) = civil_from_days(days);
            let next_day = (year, month, day) == (previous.0, previous.1, previous.2 + 1);
            let next_month = day == 1 && (year, month) == (previous.0, previous.1 + 1);
            let next_year = (month, day) == (1, 1) && year == previous.0 + 1;
            assert!(
                next_day || next_month || next_year,
                "{previous:?} then {year}-{month}-{day}"
            );
            previous = (year, month, day);
        }
    }

    #[test]
    fn the_clock_keeps_its_second_and_updates_milliseconds() {
        let mut clock = LogClock::default();
        let first = clock.now();
        let second = clock.now();
        assert!(first.rfc3339_seconds <= second.rfc3339_seconds);
        assert!(second.millis < 1000);
    }
}
