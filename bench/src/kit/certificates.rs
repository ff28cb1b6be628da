//! The two certificates the TLS benchmarks (`tls`, `tls-load`) serve, made with the `openssl`
//! command line at the start of a run into the scratch directory: self-signed leaves for
//! `bench.test`, one on an ECDSA P-256 key and one on an RSA-2048 key, each also written with its
//! key in one file for HAProxy's `crt`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::kit::process::run_with_timeout;
use crate::kit::proxies::TlsCertificate;
use crate::kit::tls_client::SERVER_NAME;

/// A certificate's key type: the figures of the full handshakes are taken for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    /// ECDSA with the P-256 curve (and SHA-256 signatures).
    Ecdsa,
    /// RSA with a 2048-bit modulus.
    Rsa,
}

impl KeyType {
    pub const ALL: [KeyType; 2] = [KeyType::Ecdsa, KeyType::Rsa];

    /// "ECDSA P-256", "RSA-2048".
    pub fn written(self) -> &'static str {
        match self {
            KeyType::Ecdsa => "ECDSA P-256",
            KeyType::Rsa => "RSA-2048",
        }
    }

    /// Its files' name: "ecdsa", "rsa".
    fn file_stem(self) -> &'static str {
        match self {
            KeyType::Ecdsa => "ecdsa",
            KeyType::Rsa => "rsa",
        }
    }

    /// openssl's arguments for a new key of this type.
    fn key_args(self) -> &'static [&'static str] {
        match self {
            KeyType::Ecdsa => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            KeyType::Rsa => &["-newkey", "rsa:2048"],
        }
    }
}

/// The run's two certificates, and the commands that made them.
#[derive(Debug, Clone)]
pub struct Certificates {
    pub ecdsa: TlsCertificate,
    pub rsa: TlsCertificate,
    /// Each command as run, its directory left out, for the results file.
    pub commands: Vec<String>,
}

/// A certificate is made in well under a second; the bound only keeps a stuck openssl from hanging
/// the run.
const MAKE_LIMIT: Duration = Duration::from_secs(60);

/// Makes both certificates in `dir` (an absolute path) with `openssl`.
pub fn make(openssl: &Path, dir: &Path) -> anyhow::Result<Certificates> {
    let mut commands = Vec::new();
    let mut made = Vec::new();
    for key in KeyType::ALL {
        let (certificate, command) = make_one(openssl, dir, key)?;
        made.push(certificate);
        commands.push(command);
    }
    let rsa = made.pop().context("the RSA certificate")?;
    let ecdsa = made.pop().context("the ECDSA certificate")?;
    Ok(Certificates {
        ecdsa,
        rsa,
        commands,
    })
}

/// One self-signed leaf for `SERVER_NAME`, valid for 30 days, its key unencrypted.
fn make_one(openssl: &Path, dir: &Path, key: KeyType) -> anyhow::Result<(TlsCertificate, String)> {
    let stem = key.file_stem();
    let chain = dir.join(format!("{stem}.pem"));
    let key_file = dir.join(format!("{stem}.key"));
    let args = request_args(key, &format!("{stem}.pem"), &format!("{stem}.key"));
    let mut command = Command::new(openssl);
    command.args(&args).current_dir(dir);
    let output = run_with_timeout(command, MAKE_LIMIT)?;
    if !output.status.success() {
        bail!(
            "openssl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let combined = dir.join(format!("{stem}.combined.pem"));
    let text = [std::fs::read(&chain)?, std::fs::read(&key_file)?].concat();
    std::fs::write(&combined, text).with_context(|| format!("writing {}", combined.display()))?;
    let shown = format!("openssl {}", args.join(" "));
    Ok((
        TlsCertificate {
            chain,
            key: key_file,
            combined,
        },
        shown,
    ))
}

/// `req -x509 …`: a new key and a self-signed certificate for it in one step.
fn request_args(key: KeyType, chain: &str, key_file: &str) -> Vec<String> {
    let mut args: Vec<String> = ["req", "-x509"].map(String::from).to_vec();
    args.extend(key.key_args().iter().map(|a| a.to_string()));
    args.extend(
        [
            "-nodes",
            "-days",
            "30",
            "-subj",
            &format!("/CN={SERVER_NAME}"),
            "-addext",
            &format!("subjectAltName=DNS:{SERVER_NAME}"),
            "-keyout",
            key_file,
            "-out",
            chain,
        ]
        .map(String::from),
    );
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_type_makes_its_own_key() {
        let ecdsa = request_args(KeyType::Ecdsa, "ecdsa.pem", "ecdsa.key").join(" ");
        assert_eq!(
            ecdsa,
            "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
             -subj /CN=bench.test -addext subjectAltName=DNS:bench.test -keyout ecdsa.key \
             -out ecdsa.pem"
        );
        let rsa = request_args(KeyType::Rsa, "rsa.pem", "rsa.key").join(" ");
        assert!(
            rsa.starts_with("req -x509 -newkey rsa:2048 -nodes"),
            "{rsa}"
        );
    }
}
