//! `herdsman_rule_answers_total`: the requests each rule answered instead of a server (a route's
//! redirect or fixed response, an access rule's refusal), from the counters the snapshot in
//! force carries (`stats::rules`), each summed over the workers.

use crate::stats::rules::{RuleCounts, Site};

use super::exposition::Exposition;

/// A counted rule as one scrape reports it: which label names its site, the site, the answer,
/// and the count.
pub(super) struct RuleAnswers {
    samples: Vec<(&'static str, String, &'static str, u64)>,
}

impl RuleAnswers {
    /// The counts as of now.
    pub(super) fn of(counts: &RuleCounts) -> RuleAnswers {
        let samples = counts
            .rules()
            .iter()
            .map(|rule| {
                let site = match rule.site {
                    Site::Route(_) => "route",
                    Site::Listener(_) => "listener",
                };
                let answered = rule.answered.name();
                (site, rule.label.clone(), answered, rule.count.total())
            })
            .collect();
        RuleAnswers { samples }
    }

    /// The family, with a sample per rule; nothing while no rule is counted.
    pub(super) fn write(&self, out: &mut Exposition) {
        if self.samples.is_empty() {
            return;
        }
        let name = "herdsman_rule_answers_total";
        out.family(
            name,
            "counter",
            "Requests a rule answered instead of a server, by route (route[N]) or listener and \
             rule: redirect, respond, deny.",
        );
        for (site, label, rule, count) in &self.samples {
            out.sample(name, &[(*site, label.as_str()), ("rule", *rule)], count);
        }
    }
}
