//! Requests the operator's rules answered instead of a server — a route's redirect or fixed
//! response, an access rule's refusal — counted per rule where the config writes it (a route, a
//! listener): a cache line per worker (a relaxed load and store, no locked instruction), summed
//! when read. Only requests a rule answers touch them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where a rule is written: a route (its index in the config) or a listener (its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    Route(usize),
    Listener(usize),
}

/// What a rule answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answered {
    /// `[route.redirect]`.
    Redirect,
    /// `[route.respond]`.
    Respond,
    /// `[listener.access]` or `[route.access]` refused the client (403, or the connection
    /// closed with `refuse = "close"`).
    Deny,
}

impl Answered {
    /// As the metrics and the access log name it.
    pub fn name(self) -> &'static str {
        match self {
            Answered::Redirect => "redirect",
            Answered::Respond => "respond",
            Answered::Deny => "deny",
        }
    }
}

/// One worker's count, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Line(AtomicU64);

/// One rule's answers: a line per worker.
#[derive(Debug)]
pub struct RuleCount {
    workers: Box<[Line]>,
}

impl RuleCount {
    fn new(workers: usize) -> RuleCount {
        RuleCount {
            workers: (0..workers.max(1)).map(|_| Line::default()).collect(),
        }
    }

    /// One more, on `worker`'s line (only that worker writes it).
    fn add(&self, worker: usize) {
        let line = &self.workers[worker % self.workers.len()].0;
        line.store(line.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Every worker's, summed.
    pub fn total(&self) -> u64 {
        self.workers
            .iter()
            .map(|line| line.0.load(Ordering::Relaxed))
            .sum()
    }
}

/// A rule that is counted, and how the metrics label it.
#[derive(Debug)]
pub struct CountedRule {
    pub site: Site,
    pub answered: Answered,
    /// `route[N]` for a route, the listener's name for a listener.
    pub label: String,
    pub count: Arc<RuleCount>,
}

/// The counted rules of one snapshot, sorted by site and answer.
#[derive(Debug, Default)]
pub struct RuleCounts {
    rules: Vec<CountedRule>,
}

/// Each rule's count by its label and answer, kept from one snapshot to the next so that a
/// reload which keeps a rule keeps its count.
pub type KeptCounts = HashMap<(Site, String, Answered), Arc<RuleCount>>;

impl RuleCounts {
    /// The counts of `rules` (site, answer, label), each the one `kept` had under the same
    /// label and answer, else a new one; `kept` then holds these alone.
    pub fn new(
        rules: Vec<(Site, Answered, String)>,
        kept: &mut KeptCounts,
        workers: usize,
    ) -> RuleCounts {
        let mut next = KeptCounts::with_capacity(rules.len());
        let mut counted: Vec<CountedRule> = rules
            .into_iter()
            .map(|(site, answered, label)| {
                // A listener's slot is its identity; a route's is its place in the file.
                let key = (site, label, answered);
                let count = kept
                    .remove(&key)
                    .unwrap_or_else(|| Arc::new(RuleCount::new(workers)));
                next.insert(key.clone(), Arc::clone(&count));
                CountedRule {
                    site,
                    answered,
                    label: key.1,
                    count,
                }
            })
            .collect();
        *kept = next;
        counted.sort_by_key(|rule| (rule.site, rule.answered));
        RuleCounts { rules: counted }
    }

    /// A request `site`'s rule answered with `answered`, on `worker`.
    pub fn count(&self, site: Site, answered: Answered, worker: usize) {
        let found = self
            .rules
            .binary_search_by_key(&(site, answered), |rule| (rule.site, rule.answered));
        if let Ok(at) = found {
            self.rules[at].count.add(worker);
        }
    }

    /// Every counted rule.
    pub fn rules(&self) -> &[CountedRule] {
        &self.rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_add_up_and_a_kept_rule_keeps_its_count() {
        let mut kept = KeptCounts::new();
        let rules = || {
            vec![
                (Site::Route(3), Answered::Redirect, "route[3]".to_string()),
                (Site::Listener(0), Answered::Deny, "web".to_string()),
            ]
        };
        let first = RuleCounts::new(rules(), &mut kept, 2);
        first.count(Site::Route(3), Answered::Redirect, 0);
        first.count(Site::Route(3), Answered::Redirect, 1);
        first.count(Site::Listener(0), Answered::Deny, 1);
        // Not counted: no such rule.
        first.count(Site::Route(3), Answered::Deny, 1);
        let totals = |counts: &RuleCounts| {
            counts
                .rules()
                .iter()
                .map(|rule| (rule.label.clone(), rule.count.total()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            totals(&first),
            [("route[3]".to_string(), 2), ("web".to_string(), 1)]
        );
        let second = RuleCounts::new(rules()[..1].to_vec(), &mut kept, 2);
        assert_eq!(totals(&second), [("route[3]".to_string(), 2)]);
        let third = RuleCounts::new(rules(), &mut kept, 2);
        assert_eq!(
            totals(&third),
            [("route[3]".to_string(), 2), ("web".to_string(), 0)]
        );
    }
}
