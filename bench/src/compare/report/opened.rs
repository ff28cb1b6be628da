//! Server connections opened per request: when the steady part of a run starts, how the figure
//! reads, what the results file says of how it is counted, and its table beside CPU-µs per request
//! and requests/s (the medians of one section, a row per target and connection count).

use std::fmt::Write as _;
use std::time::Duration;

use super::{
    section_name, Cell, Figure, Run, Session, CPU_FIGURE, ERRORS_FIGURE, REQUESTS_PER_SEC_FIGURE,
};
use crate::kit::server_status::STATUS_PATH;
use crate::kit::servers::ServerKind;

pub(super) const STEADY_FIGURE: Figure = Figure {
    title: "Server connections opened per request at steady load (accepted by the server in the \
            run's second half ÷ requests it answered meanwhile; lower is better)",
    column: "server conns opened/req, steady",
    value: Run::steady_opened_per_request,
    format: per_request,
};

pub(super) const WHOLE_RUN_FIGURE: Figure = Figure {
    title: "Server connections opened per request over the whole run (accepted by the server \
            during the run ÷ requests wrk completed; the first connections included)",
    column: "server conns opened/req, whole run",
    value: Run::opened_per_request,
    format: per_request,
};

/// Where the steady part of a run of `seconds` starts: half-way, once wrk's connections are all
/// open and the proxy has opened what it needs for them. At 5,000 clients that takes a while: a
/// connection the proxy's full listen queue dropped is tried again after 1 s and again 2 s later,
/// and a busy proxy accepts slowly (in short runs on a busy machine, half of 2 s is not enough).
pub fn steady_from(seconds: u32) -> Duration {
    Duration::from_secs(u64::from(seconds)) / 2
}

/// A figure per request, small as it is: "0", "0.0125", "2.50e-6".
pub fn per_request(value: f64) -> String {
    if value == 0.0 {
        "0".to_string()
    } else if value >= 0.001 {
        format!("{value:.4}")
    } else {
        format!("{value:.2e}")
    }
}

/// How the connections opened are counted, for the results file's setup.
pub fn write_how(md: &mut String, seconds: u32) {
    let _ = writeln!(
        md,
        "Server connections opened per request are counted at the server, so the count is the \
         same whichever proxy is in front: both servers answer `GET {STATUS_PATH}` on their own \
         port with the connections they have accepted and the requests they have answered (nginx \
         with its `stub_status`, the own backend with its own counters in the same shape). The \
         bench reads them on a connection of its own just before wrk starts, {:.1} s into the \
         run, and just after wrk ends, and leaves its own reading connections and requests out. \
         **At steady load** is what the server accepted from {:.1} s into the run (half-way) to \
         its end ÷ the requests it answered meanwhile, once wrk's connections and the proxy's \
         first server connections are open; **over the whole run** is every connection it accepted ÷ the \
         requests wrk completed, the first connections included (a proxy that keeps what it \
         opened pays them once per run).\n",
        steady_from(seconds).as_secs_f64(),
        steady_from(seconds).as_secs_f64(),
    );
}

/// The columns of the table.
const COLUMNS: [&Figure; 5] = [
    &CPU_FIGURE,
    &REQUESTS_PER_SEC_FIGURE,
    &STEADY_FIGURE,
    &WHOLE_RUN_FIGURE,
    &ERRORS_FIGURE,
];

/// The table of one section: a row per target and connection count, the medians over rounds.
pub fn write_beside(md: &mut String, s: &Session, workers: u32, server: ServerKind) {
    let _ = writeln!(
        md,
        "### Server connections opened per request, beside CPU and requests/s, {}\n",
        section_name(workers, server)
    );
    let _ = write!(md, "| target | c |");
    for column in COLUMNS {
        let _ = write!(md, " {} |", column.column);
    }
    let _ = write!(md, "\n|---|---:|");
    for _ in COLUMNS {
        let _ = write!(md, "---:|");
    }
    let _ = writeln!(md);
    for label in &s.labels {
        for &connections in &s.connections {
            let cell = Cell {
                server,
                workers,
                connections,
            };
            let _ = write!(md, "| {label} | {connections} |");
            for column in COLUMNS {
                let shown = s
                    .median(label, cell, column.value)
                    .map_or("–".into(), column.format);
                let _ = write!(md, " {shown} |");
            }
            let _ = writeln!(md);
        }
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_part_is_the_second_half() {
        assert_eq!(steady_from(2), Duration::from_secs(1));
        assert_eq!(steady_from(1), Duration::from_millis(500));
        assert_eq!(steady_from(10), Duration::from_secs(5));
    }

    #[test]
    fn small_figures_keep_their_digits() {
        assert_eq!(per_request(0.0), "0");
        assert_eq!(per_request(0.0125), "0.0125");
        assert_eq!(per_request(1.0), "1.0000");
        assert_eq!(per_request(0.0000025), "2.50e-6");
    }
}
