//! A route's `[route.rewrite]`: the target its server is sent, made from the client's (the
//! request was routed, and is logged, by the client's).

use crate::config::answers::Rewrite;

/// The target a request for `target` (origin-form, or an absolute-form target's part after the
/// authority) goes to its server with under `rewrite`, on a route whose `path_prefix` is
/// `route_prefix`; the query kept (after a `?` the rewrite wrote itself, joined with `&`). What
/// is made always starts with `/`.
pub fn rewritten_target(rewrite: &Rewrite, target: &str, route_prefix: Option<&str>) -> String {
    let (path, query) = match target.find('?') {
        Some(mark) => target.split_at(mark),
        None => (target, ""),
    };
    let path = if path.is_empty() { "/" } else { path };
    let mut rewritten = String::with_capacity(target.len() + 16);
    match rewrite {
        Rewrite::Prefix(replacement) => {
            let rest = path
                .strip_prefix(route_prefix.unwrap_or_default())
                .unwrap_or(path);
            rewritten.push_str(replacement);
            rewritten.push_str(rest);
        }
        Rewrite::Regex { pattern, path: to } => {
            rewritten.push_str(&pattern.0.replacen(path, 1, &**to));
        }
    }
    if !rewritten.starts_with('/') {
        rewritten.insert(0, '/');
    }
    match query.strip_prefix('?') {
        Some(parameters) if rewritten.contains('?') => {
            if !parameters.is_empty() {
                rewritten.push('&');
                rewritten.push_str(parameters);
            }
        }
        _ => rewritten.push_str(query),
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::answers::PathPattern;

    #[test]
    fn a_prefix_is_replaced_or_stripped_and_the_query_kept() {
        let to_v2 = Rewrite::Prefix("/v2/".into());
        assert_eq!(
            rewritten_target(&to_v2, "/api/users?id=1", Some("/api/")),
            "/v2/users?id=1"
        );
        let strip = Rewrite::Prefix("".into());
        assert_eq!(
            rewritten_target(&strip, "/api/users", Some("/api/")),
            "/users"
        );
        assert_eq!(rewritten_target(&strip, "/api", Some("/api")), "/");
    }

    #[test]
    fn a_regex_replaces_its_first_match_with_captures() {
        let regex = |text| PathPattern(regex::Regex::new(text).unwrap());
        let users = Rewrite::Regex {
            pattern: regex(r"^/user/(\d+)$"),
            path: "/users/$1".into(),
        };
        assert_eq!(
            rewritten_target(&users, "/user/42?tab=a", None),
            "/users/42?tab=a"
        );
        let with_query = Rewrite::Regex {
            pattern: regex(r"^/user/(\d+)$"),
            path: "/users?id=$1".into(),
        };
        assert_eq!(
            rewritten_target(&with_query, "/user/42?tab=a", None),
            "/users?id=42&tab=a"
        );
        // No match: the path as it was.
        assert_eq!(rewritten_target(&users, "/user/x", None), "/user/x");
        let named = Rewrite::Regex {
            pattern: regex(r"/(?P<lang>[a-z]{2})/"),
            path: "/${lang}-docs/".into(),
        };
        assert_eq!(
            rewritten_target(&named, "/x/en/y/fr/", None),
            "/x/en-docs/y/fr/"
        );
    }
}
