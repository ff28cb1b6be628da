//! One certificate ordered from a CA (RFC 8555 §7.4), with instant-acme: the account (read from
//! the state directory, or created there), the order, its challenges answered through the
//! process's [`AcmeBoard`] (HTTP-01 tokens for the exchange, TLS-ALPN-01 certificates for the
//! handshake) and closed again however the order ends, the CSR and key (ECDSA P-256, made by
//! rcgen), and the chain. Also the CA's renewal window for a certificate (RFC 9773), when its
//! directory offers one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, CertificateIdentifier, ChallengeType,
    Identifier, NewAccount, NewOrder, OrderStatus, RetryPolicy,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::state_dir::StateDir;
use crate::config::acme::{AcmeBoard, AcmeSettings, ChallengeKind};
use crate::config::tls::provider;

/// How long the CA has to validate the challenges and to issue: Pebble takes well under a
/// second; a CA under load a minute.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(120);

/// The account at `settings.directory`, from the state directory or made there.
pub async fn account(settings: &AcmeSettings, state: &StateDir) -> Result<Account, String> {
    let builder = || match &settings.directory_ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    let builder = builder().map_err(|e| format!("cannot make an HTTPS client: {e}"))?;
    let stored = state
        .account(&settings.directory)
        .map_err(|e| format!("cannot read the account: {e}"))?;
    if let Some(json) = stored {
        let credentials: AccountCredentials = serde_json::from_slice(&json)
            .map_err(|e| format!("the stored account does not parse: {e}"))?;
        return builder
            .from_credentials(credentials)
            .await
            .map_err(|e| format!("the directory {}: {e}", settings.directory));
    }
    let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = builder
        .create(&new, settings.directory.clone(), None)
        .await
        .map_err(|e| format!("cannot create an account at {}: {e}", settings.directory))?;
    let json = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
    state
        .store_account(&settings.directory, &json)
        .map_err(|e| format!("cannot store the account: {e}"))?;
    tracing::info!(directory = %settings.directory, id = account.id(), "ACME account created");
    Ok(account)
}

/// The challenges an order opened on the board; closed when dropped, so that a failed order
/// leaves no token answering.
#[derive(Default)]
struct OpenChallenges {
    http01: Vec<String>,
    tls_alpn01: Vec<String>,
}

impl Drop for OpenChallenges {
    fn drop(&mut self) {
        let board = AcmeBoard::global();
        for token in &self.http01 {
            board.close_http01(token);
        }
        for name in &self.tls_alpn01 {
            board.close_tls_alpn01(name);
        }
    }
}

/// Orders a certificate for `settings.names`: its chain and key, PEM.
pub async fn obtain(
    account: &Account,
    settings: &AcmeSettings,
) -> Result<(String, String), String> {
    let identifiers: Vec<Identifier> = settings
        .names
        .iter()
        .map(|name| Identifier::Dns(name.clone()))
        .collect();
    let mut order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(|e| format!("new order: {e}"))?;
    let mut open = OpenChallenges::default();
    let kind = match settings.challenge {
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
    };
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization.map_err(|e| format!("authorization: {e}"))?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("an authorization is {other:?}")),
        }
        let mut challenge = authorization
            .challenge(kind.clone())
            .ok_or_else(|| format!("the CA offers no {} challenge", settings.challenge.name()))?;
        let name = challenge.identifier().to_string();
        let key_authorization = challenge.key_authorization();
        match settings.challenge {
            ChallengeKind::Http01 => {
                AcmeBoard::global().open_http01(&challenge.token, key_authorization.as_str());
                open.http01.push(challenge.token.clone());
            }
            ChallengeKind::TlsAlpn01 => {
                let certificate =
                    tls_alpn01_certificate(&name, key_authorization.digest().as_ref())?;
                AcmeBoard::global().open_tls_alpn01(&name, certificate);
                open.tls_alpn01.push(name.clone());
            }
        }
        challenge
            .set_ready()
            .await
            .map_err(|e| format!("{name}: the challenge: {e}"))?;
    }
    let retries = RetryPolicy::new().timeout(VALIDATION_TIMEOUT);
    let status = order
        .poll_ready(&retries)
        .await
        .map_err(|e| format!("waiting for validation: {e}"))?;
    if status != OrderStatus::Ready {
        let why = order
            .state()
            .error
            .as_ref()
            .map_or_else(|| format!("{status:?}"), |problem| problem.to_string());
        return Err(format!("the CA did not validate the names: {why}"));
    }
    drop(open);
    let key_pem = order
        .finalize()
        .await
        .map_err(|e| format!("finalize: {e}"))?;
    let chain_pem = order
        .poll_certificate(&retries)
        .await
        .map_err(|e| format!("waiting for the certificate: {e}"))?;
    Ok((chain_pem, key_pem))
}

/// The self-signed certificate a TLS-ALPN-01 validator must be shown for `name` (RFC 8737 §3):
/// the name as its only subject alternative name, and the critical acmeIdentifier extension
/// holding the SHA-256 of the key authorization.
fn tls_alpn01_certificate(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
        .map_err(|e| format!("{name}: {e}"))?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let certificate = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
    let chain = vec![CertificateDer::from(certificate.der().to_vec())];
    // Not `CertifiedKey::from_der`: its check that key and certificate match parses the
    // certificate with webpki, which refuses the critical acmeIdentifier extension. The two
    // were made together just above.
    let signing_key = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("the TLS-ALPN-01 certificate's key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing_key)))
}

/// The CA's suggested renewal window for the certificate `leaf`, when its directory offers
/// renewal information (RFC 9773) and answers; `None` otherwise (the caller falls back to two
/// thirds of the lifetime).
pub async fn renewal_window(
    account: &Account,
    leaf: &CertificateDer<'_>,
) -> Option<(SystemTime, SystemTime)> {
    let id = CertificateIdentifier::try_from(leaf).ok()?;
    match account.renewal_info(&id).await {
        Ok((info, _retry_after)) => Some(window_of(&info)),
        Err(instant_acme::Error::Unsupported(_)) => None,
        Err(error) => {
            tracing::info!(%error, "the CA's renewal information did not come; renewing two thirds into the lifetime");
            None
        }
    }
}

/// The suggested window of a renewal information answer, as start and end.
fn window_of(info: &instant_acme::RenewalInfo) -> (SystemTime, SystemTime) {
    let window = &info.suggested_window;
    (system_time(window.start), system_time(window.end))
}

fn system_time(moment: time::OffsetDateTime) -> SystemTime {
    let seconds = moment.unix_timestamp();
    if seconds >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds as u64)
    } else {
        SystemTime::UNIX_EPOCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acme::schedule::renewal_time;

    /// Pebble 2.4 (Debian's) offers no renewal information, so the CA's answer is taken here
    /// from RFC 9773's own example (§4.2) and followed through to the renewal time.
    #[test]
    fn a_renewal_information_answer_gives_the_window_the_renewal_falls_in() {
        let answer = r#"{
            "suggestedWindow": {
                "start": "2025-01-02T04:00:00Z",
                "end": "2025-01-03T04:00:00Z"
            },
            "explanationURL": "https://acme.example.com/docs/ari"
        }"#;
        let info: instant_acme::RenewalInfo = serde_json::from_str(answer).unwrap();
        let (start, end) = window_of(&info);
        let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        assert_eq!(start, at(1_735_790_400));
        assert_eq!(end, at(1_735_876_800));
        // Whatever two thirds of the lifetime says, the window decides.
        let (not_before, not_after) = (at(1_730_000_000), at(1_740_000_000));
        let chosen = renewal_time(not_before, not_after, Some((start, end)), 0.5);
        assert_eq!(chosen, at(1_735_833_600));
        assert_ne!(chosen, renewal_time(not_before, not_after, None, 0.5));
    }
}
