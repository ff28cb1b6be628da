//! Debian's headless Chromium for the tests that load herdsman's pages in a real browser
//! (`stats_page.rs`, `http2_browser.rs`), driven over the DevTools protocol (`headless_chrome`):
//! launched with a fresh profile under `target/tmp`, a page opened, JavaScript evaluated, and a
//! bounded wait for a condition on the page. Chromium is required, not optional: without it the
//! tests fail and say how to install it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;

/// The longest any one thing may take to show on the page.
pub const WAIT: Duration = Duration::from_secs(15);

/// Debian's Chromium, or a failure that says how to install it.
pub fn chromium() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "chromium is not installed, and herdsman's pages are tested in it: run \
             bench/scripts/install-peers.sh (CI does), or `apt-get install chromium`"
        )
    })
}

/// A headless Chromium of its own, with a fresh profile under `target/tmp`; closed when dropped.
pub struct Chromium {
    browser: Option<Browser>,
    profile: PathBuf,
}

impl Chromium {
    /// New headless mode (plain `--headless` is the new one since Chromium 132); no sandbox,
    /// since tests may run as root.
    pub fn launch() -> Chromium {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let profile = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "chromium-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let options = LaunchOptions {
            path: Some(chromium()),
            headless: true,
            sandbox: false,
            window_size: Some((1200, 1000)),
            // Not the crate's own temporary profile in /tmp, which the browser's helper
            // processes, still exiting, sometimes write to after it is removed.
            user_data_dir: Some(profile.clone()),
            // How long any one DevTools call may wait for its answer.
            idle_browser_timeout: Duration::from_secs(30),
            ..LaunchOptions::default()
        };
        let browser = Browser::new(options)
            .unwrap_or_else(|error| panic!("cannot start chromium: {error:#}"));
        Chromium {
            browser: Some(browser),
            profile,
        }
    }

    /// Opens `url` in a new tab and waits for it to load.
    pub fn open(&self, url: &str) -> Arc<Tab> {
        let browser = self.browser.as_ref().expect("running");
        let tab = browser.new_tab().expect("a new tab");
        tab.set_default_timeout(WAIT);
        tab.navigate_to(url)
            .and_then(|tab| tab.wait_until_navigated())
            .unwrap_or_else(|error| panic!("cannot load {url}: {error:#}"));
        tab
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // Kills the browser and waits for it; then the profile. Its helper processes may still
        // be writing there for a moment, so a few tries; what is left is in target/tmp.
        drop(self.browser.take());
        for _ in 0..10 {
            if std::fs::remove_dir_all(&self.profile).is_ok() || !self.profile.exists() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The value of the JavaScript expression `expression`, through JSON.
pub fn eval(tab: &Tab, expression: &str) -> Value {
    let result = tab
        .evaluate(&format!("JSON.stringify({expression})"), false)
        .unwrap_or_else(|error| panic!("cannot evaluate {expression}: {error:#}"));
    match result.value {
        Some(Value::String(json)) => serde_json::from_str(&json).unwrap(),
        // JSON.stringify(undefined) is undefined.
        _ => Value::Null,
    }
}

/// Waits until the JavaScript expression `condition` is true; fails saying `what` did not
/// happen, with what the page shows, after WAIT.
pub fn wait_for(tab: &Tab, condition: &str, what: &str) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if eval(tab, &format!("Boolean({condition})")) == Value::Bool(true) {
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{what}: not within {WAIT:?}. The page says {}",
        eval(
            tab,
            "[document.body.dataset, document.getElementById('status').textContent]"
        )
    );
}
