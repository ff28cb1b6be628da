//! The keys whose value is one of a few words (`intake`, `balance`, a server's `state`,
//! `access_log_format`, `retry_on`'s conditions, `[log] level` and `format`): each word with the value it
//! stands for, and the check that a key holds one of them.

use toml::Spanned;

use super::primitives::quoted;
use super::Checker;
use crate::config::acme::ChallengeKind;
use crate::config::certificates::UnknownName;
use crate::config::tls::{ClientAuth, TlsVersion};
use crate::config::{
    AccessLogFormat, Balance, IntakeMode, LogFormat, LogLevel, RetryCondition, ServerProtocol,
    ServerState,
};

/// The words a key accepts, each with the value it stands for.
pub(in crate::config) struct Words<T: 'static> {
    accepted: &'static [(&'static str, T)],
    /// The value when the key is not written.
    default: T,
}

impl<T: Copy + PartialEq> Words<T> {
    /// The word that stands for `value`, as `herdsman check` prints it.
    pub(in crate::config) fn word_for(&self, value: T) -> &'static str {
        self.accepted
            .iter()
            .find(|(_, candidate)| *candidate == value)
            .map_or("?", |(word, _)| *word)
    }

    /// Every accepted word, in the table's order.
    pub(in crate::config) fn words(&self) -> impl Iterator<Item = &'static str> {
        self.accepted.iter().map(|(word, _)| *word)
    }

    /// Every accepted word, in the table's order, separated by commas as a message lists them.
    pub(in crate::config) fn listed(&self) -> String {
        self.words().collect::<Vec<_>>().join(", ")
    }

    /// The value `word` stands for, if it is one of the accepted words.
    pub(in crate::config) fn value_of(&self, word: &str) -> Option<T> {
        self.accepted
            .iter()
            .find(|(candidate, _)| *candidate == word)
            .map(|(_, value)| *value)
    }
}

/// `intake`: how new connections reach workers.
pub(in crate::config) const INTAKE_MODES: Words<IntakeMode> = Words {
    accepted: &[
        ("balanced", IntakeMode::Balanced),
        ("reuseport", IntakeMode::ReusePort),
        ("exclusive", IntakeMode::Exclusive),
        ("shared", IntakeMode::Shared),
    ],
    // No herd and a spread by load; see src/intake/handoff.rs.
    default: IntakeMode::Balanced,
};

/// A pool's `protocol`.
pub(in crate::config) const SERVER_PROTOCOLS: Words<ServerProtocol> = Words {
    accepted: &[
        ("http1", ServerProtocol::Http1),
        ("h2", ServerProtocol::H2),
        ("h2c", ServerProtocol::H2c),
    ],
    default: ServerProtocol::Http1,
};

/// A pool's `balance`.
pub(in crate::config) const BALANCES: Words<Balance> = Words {
    accepted: &[
        ("round-robin", Balance::RoundRobin),
        ("least-conn", Balance::LeastConn),
        ("p2c", Balance::P2c),
        ("random", Balance::Random),
        ("hash", Balance::Hash),
        ("peak-ewma", Balance::PeakEwma),
    ],
    default: Balance::PeakEwma,
};

/// A server's `state`.
pub(in crate::config) const SERVER_STATES: Words<ServerState> = Words {
    accepted: &[
        ("ready", ServerState::Ready),
        ("drain", ServerState::Drain),
        ("maint", ServerState::Maint),
        ("test", ServerState::Test),
    ],
    default: ServerState::Ready,
};

/// A listener's `access_log_format`.
pub(in crate::config) const ACCESS_LOG_FORMATS: Words<AccessLogFormat> = Words {
    accepted: &[
        ("combined", AccessLogFormat::Combined),
        ("json", AccessLogFormat::Json),
    ],
    // What nginx and Apache write, and what log analysers read first.
    default: AccessLogFormat::Combined,
};

/// The conditions a pool's `retry_on` may list (beside 5xx statuses).
pub(in crate::config) const RETRY_CONDITIONS: Words<RetryCondition> = Words {
    accepted: &[
        ("connect-failure", RetryCondition::ConnectFailure),
        ("empty-response", RetryCondition::EmptyResponse),
        ("reset-before-response", RetryCondition::ResetBeforeResponse),
        ("response-timeout", RetryCondition::ResponseTimeout),
    ],
    // Unused: `retry_on` is a list, whose default is `RetryOn::default()`.
    default: RetryCondition::ConnectFailure,
};

/// `[log] format`.
pub(in crate::config) const LOG_FORMATS: Words<LogFormat> = Words {
    accepted: &[("text", LogFormat::Text), ("json", LogFormat::Json)],
    default: LogFormat::Text,
};

/// `[log] level`.
pub(in crate::config) const LOG_LEVELS: Words<LogLevel> = Words {
    accepted: &[
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ],
    // Starts, stops, reloads, listeners and server state changes; not one line per request.
    default: LogLevel::Info,
};

/// `[listener.tls] unknown_name`: what a client naming no host the listener has a certificate
/// for gets.
pub(in crate::config) const ACME_CHALLENGES: Words<ChallengeKind> = Words {
    accepted: &[
        ("tls-alpn-01", ChallengeKind::TlsAlpn01),
        ("http-01", ChallengeKind::Http01),
    ],
    // Answered on the TLS listener itself: it needs no other listener, and port 443 is the one
    // a site on the internet has open anyway.
    default: ChallengeKind::TlsAlpn01,
};

pub(in crate::config) const UNKNOWN_NAMES: Words<UnknownName> = Words {
    accepted: &[
        ("default", UnknownName::Default),
        ("refuse", UnknownName::Refuse),
    ],
    // As nginx and HAProxy: the first certificate, so that clients without SNI still connect.
    default: UnknownName::Default,
};

/// `[listener.tls] client_auth`: whether a client must present a certificate `client_ca` signed.
pub(in crate::config) const CLIENT_AUTH: Words<ClientAuth> = Words {
    accepted: &[
        ("required", ClientAuth::Required),
        ("optional", ClientAuth::Optional),
    ],
    // A CA named to check clients by is meant to keep others out.
    default: ClientAuth::Required,
};

/// `[listener.tls] min_version`.
pub(in crate::config) const TLS_VERSIONS: Words<TlsVersion> = Words {
    accepted: &[("1.2", TlsVersion::Tls12), ("1.3", TlsVersion::Tls13)],
    // What Mozilla's "intermediate" profile accepts: every browser of the last decade.
    default: TlsVersion::Tls12,
};

impl Checker {
    /// One of the words in `words`; its default when absent or refused.
    pub(super) fn word<T: Copy + PartialEq>(
        &mut self,
        key: &str,
        raw: &Option<Spanned<String>>,
        words: &Words<T>,
    ) -> T {
        let Some(raw) = raw else {
            return words.default;
        };
        let text = raw.get_ref().as_str();
        if let Some(value) = words.value_of(text) {
            return value;
        }
        self.reject(
            key,
            raw.span(),
            &quoted(text),
            format!("unknown; accepted: {}", words.listed()),
        );
        words.default
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures::{only_problem, problem, valid_with, MINIMAL};
    use crate::config::load::from_toml;

    #[test]
    fn an_unknown_balance_lists_the_accepted_ones() {
        assert_eq!(
            only_problem(&valid_with(r#""least-conn""#, r#""fastest""#)),
            problem(
                "pool[0].balance",
                31,
                r#"pool[0].balance = "fastest": unknown; accepted: round-robin, least-conn, p2c, random, hash, peak-ewma"#
            )
        );
    }

    #[test]
    fn every_intake_mode_is_accepted_and_others_are_named() {
        for (word, mode) in [
            ("balanced", IntakeMode::Balanced),
            ("reuseport", IntakeMode::ReusePort),
            ("exclusive", IntakeMode::Exclusive),
            ("shared", IntakeMode::Shared),
        ] {
            let text = valid_with(r#""reuseport""#, &format!("\"{word}\""));
            assert_eq!(from_toml(&text, "test.toml").unwrap().intake, mode);
            assert_eq!(mode.name(), word);
        }
        let unknown = only_problem(&valid_with(r#""reuseport""#, r#""fair""#));
        assert_eq!(
            unknown.message,
            r#"intake = "fair": unknown; accepted: balanced, reuseport, exclusive, shared"#
        );
    }

    #[test]
    fn the_log_level_is_one_of_tracings_levels() {
        assert_eq!(from_toml(MINIMAL, "t").unwrap().log.level, LogLevel::Info);
        let with = |level: &str| format!("{MINIMAL}\n[log]\nlevel = \"{level}\"\n");
        for (word, level) in [("error", LogLevel::Error), ("trace", LogLevel::Trace)] {
            assert_eq!(from_toml(&with(word), "t").unwrap().log.level, level);
            assert_eq!(level.name(), word);
        }
        assert_eq!(
            only_problem(&with("loud")),
            problem(
                "log.level",
                12,
                r#"log.level = "loud": unknown; accepted: error, warn, info, debug, trace"#
            )
        );
    }
}
