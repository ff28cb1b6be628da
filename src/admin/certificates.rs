//! `GET /api/certificates`: every TLS listener's certificates as they serve now — the names each
//! covers, its issuer, its expiry (as a date and as seconds left), its files, and whether ACME
//! manages it (and then when it renews) — for `herdsman ctl certs` and the stats page.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::access_log::LogTime;
use crate::upstream::registry::Registry;

/// The body of `GET /api/certificates`.
#[derive(Debug, Serialize)]
pub(super) struct CertificatesBody {
    pub(super) certificates: Vec<CertificateView>,
}

/// One certificate of one listener.
#[derive(Debug, Serialize)]
pub(super) struct CertificateView {
    pub(super) listener: String,
    pub(super) names: Vec<String>,
    pub(super) issuer: String,
    /// RFC 3339, UTC.
    pub(super) not_after: String,
    /// Negative once it has expired.
    pub(super) expires_in_seconds: i64,
    pub(super) chain: String,
    pub(super) key: String,
    /// Obtained and renewed by herdsman (ACME) rather than read from files the operator keeps.
    pub(super) acme: bool,
    /// For an ACME certificate, when herdsman plans to renew it (RFC 3339, UTC); `None` for
    /// the others, and until the ACME thread has planned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) renews_at: Option<String>,
}

/// The certificates of every TLS listener, in listener order and then as listed.
pub(super) fn certificates(registry: &Registry) -> CertificatesBody {
    let now = SystemTime::now();
    let mut certificates = Vec::new();
    for (listener, store) in registry.certificates() {
        for certificate in store.certificates() {
            let expires_in_seconds = certificate.seconds_left(now);
            certificates.push(CertificateView {
                listener: listener.clone(),
                names: certificate.names.clone(),
                issuer: certificate.issuer.clone(),
                not_after: rfc3339(certificate.not_after),
                expires_in_seconds,
                chain: certificate.chain_file.display().to_string(),
                key: certificate.key_file.display().to_string(),
                acme: false,
                renews_at: None,
            });
        }
    }
    for (listener, managed) in registry.acme_certificates() {
        // One not obtained yet has nothing to show but its names.
        let Some(certificate) = managed.current() else {
            continue;
        };
        let renews_at = managed.renews_at().map(|at| {
            let at = UNIX_EPOCH + std::time::Duration::from_secs(u64::try_from(at).unwrap_or(0));
            rfc3339(at)
        });
        certificates.push(CertificateView {
            listener,
            names: certificate.names.clone(),
            issuer: certificate.issuer.clone(),
            not_after: rfc3339(certificate.not_after),
            expires_in_seconds: certificate.seconds_left(now),
            chain: certificate.chain_file.display().to_string(),
            key: certificate.key_file.display().to_string(),
            acme: true,
            renews_at,
        });
    }
    CertificatesBody { certificates }
}

/// `moment` as `2026-11-26T07:00:00Z` (before 1970: the epoch).
fn rfc3339(moment: SystemTime) -> String {
    let seconds = moment
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let time = LogTime::at(seconds, 0);
    format!("{}Z", String::from_utf8_lossy(&time.rfc3339_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_moment_is_written_in_rfc3339_utc() {
        let moment = UNIX_EPOCH + Duration::from_secs(971_211_336);
        assert_eq!(rfc3339(moment), "2000-10-10T20:55:36Z");
    }
}
