//! Fuzzes the choice of a TLS listener's certificate by SNI against the rule as written: a
//! certificate naming the host exactly (the first listed to name it), else one whose wildcard
//! covers exactly its first label, else the listener's default or none; case and a trailing dot
//! ignored. Names are what rustls hands on: DNS names of at most 253 bytes.
#![no_main]

mod names;

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use herdsman::config::certificates::{Certificate, CertificateStore, UnknownName};
use libfuzzer_sys::fuzz_target;
use rustls::sign::CertifiedKey;

const LABELS: [&str; 6] = ["a", "B", "b", "x-1", "*", "c"];

/// One real key for every certificate: the choice reads only the names.
fn key() -> Arc<CertifiedKey> {
    static KEY: OnceLock<Arc<CertifiedKey>> = OnceLock::new();
    Arc::clone(KEY.get_or_init(|| {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["fuzz.test".to_string()]).unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(signing_key.serialize_der()).unwrap();
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let signer = provider.key_provider.load_private_key(der).unwrap();
        Arc::new(CertifiedKey::new(vec![cert.der().clone()], signer))
    }))
}

fn name(bytes: &[u8]) -> String {
    names::name(&LABELS, bytes)
}

/// The rule as documented.
fn reference(
    certificates: &[Certificate],
    unknown: UnknownName,
    sni: Option<&str>,
) -> Option<usize> {
    let found = sni.and_then(|sni| {
        let host = sni.strip_suffix('.').unwrap_or(sni).to_ascii_lowercase();
        if host.is_empty() {
            return None;
        }
        let exact = certificates.iter().position(|c| c.names.contains(&host));
        exact.or_else(|| {
            let (first, parent) = host.split_once('.')?;
            if first.is_empty() || parent.is_empty() {
                return None;
            }
            let wildcard = format!("*.{parent}");
            certificates
                .iter()
                .position(|c| c.names.contains(&wildcard))
        })
    });
    match (found, unknown) {
        (Some(index), _) => Some(index),
        (None, UnknownName::Default) if !certificates.is_empty() => Some(0),
        _ => None,
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&first, rest)) = input.split_first() else {
        return;
    };
    let unknown = match first & 1 {
        0 => UnknownName::Default,
        _ => UnknownName::Refuse,
    };
    // Certificates of up to three names of up to three labels (a name per 3 bytes, a
    // certificate per 9), up to 6 certificates; then SNI names of 3 bytes each.
    let (certs_part, names_part) = rest.split_at(rest.len().min(54));
    let certificates: Vec<Certificate> = certs_part
        .chunks(9)
        .enumerate()
        .map(|(index, piece)| Certificate {
            key: key(),
            // Lowercase, as they are read from a certificate.
            names: piece
                .chunks(3)
                .map(|n| name(n).to_ascii_lowercase())
                .collect(),
            // Which one it is, to tell the choice.
            issuer: index.to_string(),
            not_after: SystemTime::UNIX_EPOCH,
            chain_file: Default::default(),
            key_file: Default::default(),
        })
        .collect();
    let store = CertificateStore::new(certificates.clone(), unknown);
    let chosen = |sni: Option<&str>| {
        store
            .select(sni)
            .map(|certificate| certificate.issuer.parse::<usize>().unwrap())
    };
    assert_eq!(chosen(None), reference(&certificates, unknown, None));
    for piece in names_part.chunks(3) {
        let mut sni = name(piece);
        if piece[0] & 0x80 != 0 {
            sni.push('.');
        }
        assert_eq!(
            chosen(Some(&sni)),
            reference(&certificates, unknown, Some(&sni)),
            "{sni:?} among {:?}",
            certificates.iter().map(|c| &c.names).collect::<Vec<_>>()
        );
    }
});
