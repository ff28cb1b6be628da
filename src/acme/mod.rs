//! Certificates herdsman obtains and renews itself (ACME, RFC 8555), as Caddy does: the control
//! plane's ACME thread. One per process, on a current-thread runtime of its own beside the
//! health checker and the certificate watch, never on a worker: an order's HTTPS calls and
//! waits cost the request path nothing. It follows the running config (each reload publishes
//! one): for every TLS listener with `acme` it keeps one certificate per set of names, which the
//! handshakes read from `config::acme` without a lock.
//!
//! For each certificate, in turn:
//! 1. what the state directory holds is installed (a restart serves it at once and orders
//!    nothing while it is valid; one another process renewed is picked up);
//! 2. its renewal is planned (`schedule.rs`: the CA's window, RFC 9773, else two thirds into its
//!    lifetime) and shown (`/api/certificates`, the metrics);
//! 3. when due (or when there is none), it is ordered (`order.rs`) under the state directory's
//!    lock, so that two processes sharing it (a binary upgrade's old and new) never both order:
//!    the one that finds it held looks again shortly and installs what the other stored;
//! 4. a failure is tried again after a back-off, logged as a warning, and as an error once the
//!    certificate is in the last sixth of its lifetime (or there is none).
//!
//! A reload that moves `[tls] acme_state_dir` has the accounts and certificates in use copied
//! into the new directory at once (what it has of its own stays), so a restart on it orders
//! nothing anew.
//!
//! `order.rs`: talking to the CA; `schedule.rs`: when; `state_dir.rs`: what is kept on disk.

mod order;
mod schedule;
mod state_dir;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use rustls::pki_types::CertificateDer;
use tokio::sync::watch;

use crate::config::acme::AcmeSettings;
use crate::config::certificates::Certificate;
use crate::config::tls::provider;
use crate::config::Config;
use crate::upstream::registry::Registry;
use schedule::Urgency;
use state_dir::{StateDir, Stored};

/// How soon a process that found the order lock held looks again (for what the holder stored).
const LOCK_HELD_RETRY: Duration = Duration::from_secs(3);
/// The longest the thread sleeps without looking at the config and the state directory.
const LONGEST_SLEEP: Duration = Duration::from_secs(3600);
/// The longest a whole order may take (the account, the challenges, the validation, the
/// certificate): instant-acme's HTTPS client has no deadline of its own, and a CA that accepts
/// a connection and never answers must not stop every other certificate's renewal.
const ORDER_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest asking for the CA's renewal window may take before two thirds of the lifetime
/// is used instead.
const RENEWAL_INFO_TIMEOUT: Duration = Duration::from_secs(30);

/// Installs the certificates `registry`'s config has in its state directory (so the first
/// handshakes are served them), then starts the ACME thread; it ends when the registry goes or
/// `stop` turns true: a process that stops, or handed its listeners to a successor at a binary
/// upgrade, orders nothing more (the validator's connections now reach the successor, which
/// alone could answer its challenges).
pub fn start(registry: &Arc<Registry>, stop: watch::Receiver<bool>) -> std::io::Result<()> {
    let config = registry.config();
    for settings in wanted(&config) {
        if let Ok(state) = StateDir::open(&config.acme_state_dir) {
            install_stored(&state, &settings);
        }
    }
    // The thread starts even when no listener has `acme` (it then sleeps until a reload): a
    // reload may add one.

    // instant-acme's HTTPS client takes rustls's process-wide provider; herdsman builds two
    // (aws-lc-rs and ring), so one must be named. Ours, as every connection's.
    let _ = rustls::crypto::CryptoProvider::clone(&provider()).install_default();
    let registry = Arc::downgrade(registry);
    std::thread::Builder::new()
        .name("herdsman-acme".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime");
            runtime.block_on(run(registry, stop));
        })?;
    Ok(())
}

/// The `acme` settings of `config`'s TLS listeners, one per certificate.
fn wanted(config: &Config) -> Vec<AcmeSettings> {
    let mut wanted: Vec<AcmeSettings> = Vec::new();
    let listed = config
        .listeners
        .iter()
        .filter_map(|l| l.tls.as_ref()?.acme.as_ref());
    for settings in listed {
        if !wanted.iter().any(|w| w.managed.id == settings.managed.id) {
            wanted.push(settings.clone());
        }
    }
    wanted
}

/// One certificate the thread keeps.
struct Job {
    settings: AcmeSettings,
    /// When to look at it next.
    next: SystemTime,
    /// Orders that failed in a row.
    failures: u32,
    /// The certificate (its chain's first certificate) the renewal was planned for, and when.
    planned: Option<(CertificateDer<'static>, SystemTime)>,
}

async fn run(registry: Weak<Registry>, mut stop: watch::Receiver<bool>) {
    let mut jobs: HashMap<String, Job> = HashMap::new();
    // The state directory of the config last looked at: a reload may move it.
    let mut state_dir: Option<PathBuf> = None;
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        let Some(strong) = registry.upgrade() else {
            return;
        };
        let mut published = strong.subscribe();
        let config = strong.config();
        drop(strong);
        let now = SystemTime::now();
        let settings = wanted(&config);
        jobs.retain(|id, _| settings.iter().any(|s| s.managed.id == *id));
        for settings in settings {
            let job = jobs.entry(settings.managed.id.clone()).or_insert(Job {
                settings: settings.clone(),
                next: now,
                failures: 0,
                planned: None,
            });
            if job.settings != settings {
                // A reload changed how it is obtained (contact, challenge, CA file): look now.
                job.next = now;
                job.failures = 0;
            }
            job.settings = settings;
        }
        if let Some(earlier) = state_dir.replace(config.acme_state_dir.clone()) {
            if earlier != config.acme_state_dir {
                carry_state(&earlier, &config.acme_state_dir, &jobs);
                // Each is looked at in the new directory now.
                for job in jobs.values_mut() {
                    job.next = now;
                }
            }
        }
        for job in jobs.values_mut() {
            if job.next <= SystemTime::now() {
                job.next = tend(job, &config.acme_state_dir).await;
            }
        }
        let now = SystemTime::now();
        let sleep = jobs
            .values()
            .map(|job| job.next.duration_since(now).unwrap_or(Duration::ZERO))
            .min()
            .unwrap_or(LONGEST_SLEEP)
            .min(LONGEST_SLEEP);
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            changed = published.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            changed = stop.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// After a reload moved `[tls] acme_state_dir` from `earlier` to `now`: copies the accounts and
/// certificates the config's jobs use into it, unless it has its own, so that a restart on
/// the new directory orders nothing anew. A failure is logged; the jobs then order when due.
fn carry_state(earlier: &Path, now: &Path, jobs: &HashMap<String, Job>) {
    let ids: Vec<&str> = jobs.keys().map(String::as_str).collect();
    let mut directories: Vec<&str> = jobs
        .values()
        .map(|job| job.settings.directory.as_str())
        .collect();
    directories.sort_unstable();
    directories.dedup();
    let carried = StateDir::open(now).and_then(|moved| {
        let earlier = StateDir::open(earlier)?;
        moved.carry_from(&earlier, &ids, &directories)
    });
    match carried {
        Ok(carried) => {
            tracing::info!(from = %earlier.display(), to = %now.display(), carried = %carried.join(","), "the ACME state directory moved; what it lacked was copied")
        }
        Err(error) => {
            tracing::error!(from = %earlier.display(), to = %now.display(), %error, "the ACME state directory moved and cannot be filled; certificates are ordered anew when due")
        }
    }
}

/// Looks after one certificate (see the module's comment): when to look at it next.
async fn tend(job: &mut Job, state_dir: &Path) -> SystemTime {
    let settings = job.settings.clone();
    let state = match StateDir::open(state_dir) {
        Ok(state) => state,
        Err(error) => {
            let why = format!("the state directory {}: {error}", state_dir.display());
            return failed(job, &why);
        }
    };
    install_stored(&state, &settings);
    if let Some(at) = plan(job, &state).await.filter(|at| *at > SystemTime::now()) {
        return at;
    }
    let lock = match state.try_lock() {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            tracing::info!(names = %settings.names.join(","), "another process is ordering in the ACME state directory; waiting for what it stores");
            return SystemTime::now() + LOCK_HELD_RETRY;
        }
        Err(error) => return failed(job, &format!("the state directory's lock: {error}")),
    };
    // Under the lock, what another process may have stored meanwhile counts first.
    install_stored(&state, &settings);
    if let Some(at) = plan(job, &state).await.filter(|at| *at > SystemTime::now()) {
        return at;
    }
    tracing::info!(names = %settings.names.join(","), directory = %settings.directory, challenge = settings.challenge.name(), "ordering a certificate");
    let ordering = async {
        let account = order::account(&settings, &state).await?;
        order::obtain(&account, &settings).await
    };
    let obtained = match tokio::time::timeout(ORDER_TIMEOUT, ordering).await {
        Ok(obtained) => obtained,
        Err(_) => Err(format!("no certificate within {ORDER_TIMEOUT:?}")),
    };
    let stored = obtained.and_then(|(chain, key)| {
        state
            .store_certificate(&settings.managed.id, chain.as_bytes(), key.as_bytes())
            .map_err(|e| format!("cannot store it: {e}"))
    });
    drop(lock);
    match stored.and_then(|stored| certificate_of(&stored)) {
        Ok(certificate) => {
            let expires_in_seconds = certificate.seconds_left(SystemTime::now());
            tracing::info!(names = %settings.names.join(","), expires_in_seconds, file = %certificate.chain_file.display(), "certificate obtained; new handshakes get it");
            settings.managed.install(certificate);
            job.failures = 0;
            job.planned = None;
            plan(job, &state).await.unwrap_or_else(SystemTime::now)
        }
        Err(why) => failed(job, &why),
    }
}

/// The planned renewal of the certificate installed now (made when it changed), or `None` when
/// there is none.
async fn plan(job: &mut Job, state: &StateDir) -> Option<SystemTime> {
    let managed = &job.settings.managed;
    let current = managed.current()?;
    let leaf = current.key.cert.first()?.clone();
    if let Some((planned_for, at)) = &job.planned {
        if *planned_for == leaf {
            return Some(*at);
        }
    }
    let (not_before, not_after) = validity(&leaf)?;
    // The CA's window needs the account's HTTPS client; without an account yet (a certificate
    // from elsewhere), or a CA that does not answer, two thirds of the lifetime.
    let asking = async {
        match state.account(&job.settings.directory) {
            Ok(Some(_)) => match order::account(&job.settings, state).await {
                Ok(account) => order::renewal_window(&account, &leaf).await,
                Err(_) => None,
            },
            _ => None,
        }
    };
    let window = tokio::time::timeout(RENEWAL_INFO_TIMEOUT, asking)
        .await
        .unwrap_or(None);
    let at = schedule::renewal_time(not_before, not_after, window, fastrand::f64());
    let unix = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    managed.plan_renewal(unix);
    let renews_in_seconds = at
        .duration_since(SystemTime::now())
        .map_or(0, |d| d.as_secs());
    let by = match window {
        Some(_) => "the CA's renewal information",
        None => "two thirds of its lifetime",
    };
    tracing::info!(names = %managed.names.join(","), renews_in_seconds, renews_at_unix = unix, by, "certificate renewal planned");
    job.planned = Some((leaf.into_owned(), at));
    Some(at)
}

/// Counts and logs a failed order: when to try again.
fn failed(job: &mut Job, why: &str) -> SystemTime {
    job.failures = job.failures.saturating_add(1);
    let managed = &job.settings.managed;
    managed
        .failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let retry = schedule::retry_after(job.failures, fastrand::f64());
    let names = managed.names.join(",");
    let now = SystemTime::now();
    let current = managed.current();
    let urgency = current
        .as_ref()
        .and_then(|c| validity(c.key.cert.first()?))
        .map(|(not_before, not_after)| schedule::urgency(not_before, not_after, now));
    match urgency {
        Some(Urgency::Renewing) => {
            tracing::warn!(names, failures = job.failures, retry_in = ?retry, "ACME renewal failed: {why}; the current certificate serves meanwhile")
        }
        Some(Urgency::NearExpiry) => {
            tracing::error!(names, failures = job.failures, retry_in = ?retry, expires_in_seconds = current.map_or(0, |c| c.seconds_left(now)), "ACME renewal failed and the certificate is near expiry: {why}")
        }
        None => {
            tracing::error!(names, failures = job.failures, retry_in = ?retry, "ACME could not obtain a certificate: {why}; handshakes for these names get the listener's other certificates, or fail")
        }
    }
    now + retry
}

/// Installs what the state directory holds for `settings`, when it loads, is for the same
/// names and is newer than what serves now.
fn install_stored(state: &StateDir, settings: &AcmeSettings) {
    let stored = match state.certificate(&settings.managed.id) {
        Ok(Some(stored)) => stored,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(names = %settings.names.join(","), %error, "cannot read the stored certificate");
            return;
        }
    };
    let certificate = match certificate_of(&stored) {
        Ok(certificate) => certificate,
        Err(why) => {
            tracing::warn!(names = %settings.names.join(","), "the stored certificate does not load ({why}); ordering anew when due");
            return;
        }
    };
    let mut names = certificate.names.clone();
    let mut expected = settings.names.clone();
    names.sort();
    expected.sort();
    if names != expected {
        return;
    }
    // Newer; or the same one in another place (a reload moved the state directory and copied
    // it there), so that `/api/certificates` names the files that are kept now.
    let take = settings.managed.current().is_none_or(|serving| {
        certificate.not_after > serving.not_after
            || (certificate.key.cert == serving.key.cert
                && certificate.chain_file != serving.chain_file)
    });
    if take {
        tracing::info!(names = %settings.names.join(","), file = %stored.chain_file.display(), "certificate read from the ACME state directory");
        settings.managed.install(certificate);
    }
}

fn certificate_of(stored: &Stored) -> Result<Certificate, String> {
    Certificate::from_pem(
        &stored.chain_pem,
        &stored.key_pem,
        &stored.chain_file,
        &stored.key_file,
        &provider(),
    )
    .map_err(|e| e.to_string())
}

/// A certificate's validity: not before, not after.
fn validity(leaf: &CertificateDer<'_>) -> Option<(SystemTime, SystemTime)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let time = |seconds: i64| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    };
    let validity = parsed.validity();
    Some((
        time(validity.not_before.timestamp()),
        time(validity.not_after.timestamp()),
    ))
}
