//! The cases `gray` measures: which of the three servers is sick and how, or none, or the sick one
//! removed from the pool.

use std::time::Duration;

use crate::kit::backend::Answering;

/// One case: what the sick server (the last of three) does during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// It answers 50 ms late.
    Late50,
    /// It answers 200 ms late.
    Late200,
    /// It answers 200 ms late for the run's first `--sick-seconds`, then at once.
    Recovering,
    /// It answers at once, with 500s.
    Failing,
    /// Every server answers at once: the reference for p99 and for CPU per request.
    Healthy,
    /// It is not in the pool: two servers, the reference for requests/s.
    Removed,
}

/// The order in which a round runs the cases. Each case's sick server was sick or recovered in
/// the case before it, and all healthy comes after the recovering case, so that no case starts
/// with what a proxy learnt of a server that has since changed, unless the proxy failed to see
/// the recovery (which the recovering case measures): failing fast, 50 ms, 200 ms, then
/// recovering.
pub const RUN_ORDER: [Scenario; 6] = [
    Scenario::Healthy,
    Scenario::Removed,
    Scenario::Failing,
    Scenario::Late50,
    Scenario::Late200,
    Scenario::Recovering,
];

/// The order of the results: the issue's.
pub const REPORT_ORDER: [Scenario; 6] = [
    Scenario::Late50,
    Scenario::Late200,
    Scenario::Recovering,
    Scenario::Failing,
    Scenario::Healthy,
    Scenario::Removed,
];

/// How late a late server answers.
pub const SLIGHTLY_LATE: Duration = Duration::from_millis(50);
pub const VERY_LATE: Duration = Duration::from_millis(200);

impl Scenario {
    /// As the results name it.
    pub fn text(self) -> &'static str {
        match self {
            Scenario::Late50 => "one server 50 ms late",
            Scenario::Late200 => "one server 200 ms late",
            Scenario::Recovering => "one server 200 ms late, then recovered",
            Scenario::Failing => "one server failing fast (500)",
            Scenario::Healthy => "all healthy",
            Scenario::Removed => "the sick server removed (two servers)",
        }
    }

    /// One word for the table of every run.
    pub fn word(self) -> &'static str {
        match self {
            Scenario::Late50 => "late-50ms",
            Scenario::Late200 => "late-200ms",
            Scenario::Recovering => "recovering",
            Scenario::Failing => "failing",
            Scenario::Healthy => "healthy",
            Scenario::Removed => "removed",
        }
    }

    /// How the sick server answers as the run starts.
    pub fn sick_answering(self) -> Answering {
        match self {
            Scenario::Late50 => Answering::Late(SLIGHTLY_LATE),
            Scenario::Late200 | Scenario::Recovering => Answering::Late(VERY_LATE),
            Scenario::Failing => Answering::Failing,
            Scenario::Healthy | Scenario::Removed => Answering::AtOnce,
        }
    }

    /// Whether the proxy measured has the sick server in its pool (three servers), or not (two).
    pub fn has_sick_server(self) -> bool {
        self != Scenario::Removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_runs_and_is_reported_once() {
        for scenario in RUN_ORDER {
            assert_eq!(REPORT_ORDER.iter().filter(|&&s| s == scenario).count(), 1);
        }
        // All healthy follows the recovering case of the round before.
        assert_eq!(RUN_ORDER[0], Scenario::Healthy);
        assert_eq!(RUN_ORDER[5], Scenario::Recovering);
        assert_eq!(
            Scenario::Recovering.sick_answering(),
            Answering::Late(VERY_LATE)
        );
        assert!(!Scenario::Removed.has_sick_server());
    }
}
