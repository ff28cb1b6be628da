//! The live view of `herdsman top`: the alternate screen, redrawn with each new sample; `q`, Esc
//! or Ctrl-C quits, and the terminal is restored however the view ends (a return, an error, or
//! a panic: ratatui's panic hook restores it before the message is printed).
//!
//! Samples are taken on a thread of their own, so that a key is answered at once even while
//! the admin API is slow to answer (up to `ctl`'s timeouts).

use std::io;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row};
use ratatui::Frame;

use crate::cli::ctl::client::CtlError;

use super::sample::Sample;
use super::tables::{Table, Tables};

/// How often the keyboard is looked at while waiting for the next sample.
const KEY_POLL: Duration = Duration::from_millis(100);

/// Why `top` stopped short.
#[derive(Debug, thiserror::Error)]
pub enum TopError {
    /// The admin API could not be asked, or refused: `ctl`'s messages.
    #[error(transparent)]
    Admin(#[from] CtlError),
    #[error("the live view needs a terminal; for plain text, use --once")]
    NotATerminal,
    #[error("the terminal: {0}")]
    Terminal(#[from] io::Error),
}

/// Takes the terminal over and shows a new span of figures every `interval` until a key quits.
pub fn run(admin: &str, token: Option<&str>, interval: Duration) -> Result<(), TopError> {
    // Before the terminal is taken over, so that an unreachable herdsman is a plain message.
    let first = Sample::take(admin, token)?;
    let samples = sample_every(admin, token, first.taken_at + interval, interval);
    let mut view = View::new(admin, interval, first);
    // Declared before the terminal, so dropped after it: the terminal shows its cursor again,
    // then raw mode and the alternate screen end. Also when `try_init` fails half-way.
    let _restore = RestoreTerminal;
    let mut terminal = ratatui::try_init()?;
    let mut redraw = true;
    loop {
        if redraw {
            terminal.draw(|frame| view.draw(frame))?;
            redraw = false;
        }
        if event::poll(KEY_POLL)? {
            match event::read()? {
                Event::Key(key) if quits(&key) => return Ok(()),
                Event::Resize(..) => redraw = true,
                _ => {}
            }
        }
        while let Ok(sample) = samples.try_recv() {
            view.update(sample);
            redraw = true;
        }
    }
}

/// `q`, Esc, or Ctrl-C (which raw mode delivers as a key, not SIGINT).
fn quits(key: &KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// Ends raw mode and the alternate screen when dropped.
struct RestoreTerminal;

impl Drop for RestoreTerminal {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Samples the admin API at `first`, then every `interval`, on a thread of its own that ends
/// when the receiver is dropped (at its next sample).
fn sample_every(
    admin: &str,
    token: Option<&str>,
    first: Instant,
    interval: Duration,
) -> mpsc::Receiver<Result<Sample, CtlError>> {
    let (admin, token) = (admin.to_string(), token.map(str::to_string));
    let (send, receive) = mpsc::channel();
    thread::spawn(move || {
        let mut next = first;
        loop {
            thread::sleep(next.saturating_duration_since(Instant::now()));
            // After a slow answer the next sample is an interval later, not at once.
            next = (next + interval).max(Instant::now());
            if send.send(Sample::take(&admin, token.as_deref())).is_err() {
                return;
            }
        }
    });
    receive
}

/// What the screen shows: the figures of the last span, and what went wrong since, if anything.
struct View {
    admin: String,
    interval: Duration,
    /// Where the next span starts.
    earlier: Sample,
    /// `None` until the second sample.
    tables: Option<Tables>,
    /// Why the last sample failed; the figures shown are then the last good ones.
    problem: Option<String>,
}

impl View {
    fn new(admin: &str, interval: Duration, first: Sample) -> View {
        View {
            admin: admin.to_string(),
            interval,
            earlier: first,
            tables: None,
            problem: None,
        }
    }

    fn update(&mut self, sample: Result<Sample, CtlError>) {
        match sample {
            Ok(later) => {
                self.tables = Some(Tables::between(&self.earlier, &later));
                self.earlier = later;
                self.problem = None;
            }
            Err(error) => self.problem = Some(error.to_string()),
        }
    }

    fn draw(&self, frame: &mut Frame) {
        let height = |table: &Table| u16::try_from(table.rows.len() + 1).unwrap_or(u16::MAX);
        let workers_height = self
            .tables
            .as_ref()
            .map_or(0, |tables| height(&tables.workers));
        // The cache's table and the blank line after it, when some pool caches.
        let cache_height = self
            .tables
            .as_ref()
            .filter(|tables| !tables.cache.rows.is_empty())
            .map_or(0, |tables| height(&tables.cache) + 1);
        let [summary, status, workers, _, cache, servers] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Length(workers_height),
            Constraint::Length(1),
            Constraint::Length(cache_height),
            Constraint::Fill(1),
        ])
        .areas(frame.area());
        let seconds = self.interval.as_secs_f64();
        let summary_line = match &self.tables {
            Some(tables) => tables.summary.clone(),
            None => format!(
                "herdsman at {}: measuring the first {seconds:.1} s",
                self.admin
            ),
        };
        frame.render_widget(Paragraph::new(summary_line), summary);
        let status_line = match &self.problem {
            Some(problem) => Line::styled(problem.clone(), Style::new().fg(Color::Red)),
            None => Line::styled(
                format!("every {seconds:.1} s from {} · q quits", self.admin),
                Style::new().add_modifier(Modifier::DIM),
            ),
        };
        frame.render_widget(Paragraph::new(status_line), status);
        if let Some(tables) = &self.tables {
            frame.render_widget(table_widget(&tables.workers), workers);
            if cache_height > 0 {
                frame.render_widget(table_widget(&tables.cache), cache);
            }
            frame.render_widget(table_widget(&tables.servers), servers);
        }
    }
}

/// `table` as ratatui draws it: the same columns as the text, numbers right-aligned, headings
/// in reverse video like prstat's.
fn table_widget(table: &Table) -> ratatui::widgets::Table<'static> {
    let cell = |column: usize, text: String| {
        let line = Line::from(text);
        Cell::from(if table.numeric.get(column) == Some(&true) {
            line.right_aligned()
        } else {
            line
        })
    };
    let row = |cells: &[String]| {
        Row::new(
            cells
                .iter()
                .enumerate()
                .map(|(column, text)| cell(column, text.clone())),
        )
    };
    let headings: Vec<String> = table.headings.iter().map(|h| h.to_string()).collect();
    let widths = table
        .widths()
        .into_iter()
        .map(|width| Constraint::Length(u16::try_from(width).unwrap_or(u16::MAX)));
    ratatui::widgets::Table::new(table.rows.iter().map(|cells| row(cells)), widths)
        .header(row(&headings).style(Style::new().add_modifier(Modifier::REVERSED)))
        .column_spacing(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    #[test]
    fn q_esc_and_ctrl_c_quit() {
        assert!(quits(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!quits(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
        assert!(!quits(&key(KeyCode::Char('Q'), KeyModifiers::SHIFT)));
    }

    /// The screen's lines, trailing blanks dropped.
    fn screen_text(view: &View) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(100, 12)).unwrap();
        terminal.draw(|frame| view.draw(frame)).unwrap();
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| {
                let line: String = (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect();
                line.trim_end().to_string()
            })
            .collect()
    }

    #[test]
    fn the_screen_shows_the_same_rows_as_the_text() {
        let sample = |requests: u64, taken_at: Instant| Sample {
            taken_at,
            workers: serde_json::from_value(serde_json::json!({
                "pid": 7, "intake": "balanced", "listen_queue": null,
                "workers": [{ "worker": 0, "accepted": 1, "active": 1, "requests": requests,
                              "cpu": { "user_seconds": 0.0, "system_seconds": 0.0,
                                       "run_queue_wait_seconds": 0.0 } }],
            }))
            .unwrap(),
            pools: serde_json::from_value(serde_json::json!({
                "generation": 1,
                "pools": [{ "name": "app", "servers": [
                    { "name": "a", "addr": "127.0.0.1:1", "state": "drain", "weight": 1 }] }],
            }))
            .unwrap(),
        };
        let start = Instant::now();
        let mut view = View::new("127.0.0.1:9900", Duration::from_secs(1), sample(0, start));
        let waiting = screen_text(&view);
        assert!(
            waiting[0].contains("measuring the first 1.0 s"),
            "{waiting:?}"
        );

        view.update(Ok(sample(40, start + Duration::from_secs(2))));
        let tables = view.tables.clone().unwrap();
        let text = tables.plain_text();
        let expected: Vec<&str> = text.lines().collect();
        let shown = screen_text(&view);
        assert_eq!(shown[0], expected[0]);
        assert!(shown[1].contains("q quits"), "{shown:?}");
        // The worker table, a blank line, the server table.
        assert_eq!(shown[2..4], expected[1..3], "{shown:?}");
        assert_eq!(shown[4], "");
        assert_eq!(shown[5..7], expected[3..5], "{shown:?}");
        let cells: Vec<&str> = shown[3].split_whitespace().collect();
        assert_eq!(cells[8..], ["20.0", "0.000", "0.0"], "{shown:?}");

        view.update(Err(CtlError::TokenMissing));
        let shown = screen_text(&view);
        assert!(shown[1].contains("wants a token"), "{shown:?}");
        assert_eq!(
            shown[2..4],
            expected[1..3],
            "the last figures stay: {shown:?}"
        );
    }
}
