//! Reloading pools from the config file, over real sockets: a broken file changes nothing and a
//! valid one applies, and the states, weights and servers set at run time survive a reload
//! unless the file names them.

mod common;

use std::collections::HashMap;

use common::*;
use herdsman::config::ServerState;
use herdsman::upstream::registry::{ChangeError, Registry};

/// (name, address, state, weight) of every server of every pool, and the generation: what a
/// reload that changes nothing must leave as it was.
fn pools_summary(registry: &Registry) -> (u64, Vec<(String, String, String, u32)>) {
    let view = registry.pools();
    let servers = view
        .pools
        .iter()
        .flat_map(|pool| {
            pool.servers.iter().map(move |server| {
                (
                    format!("{}/{}", pool.name, server.name),
                    server.addr.clone(),
                    server.state.to_string(),
                    server.weight,
                )
            })
        })
        .collect();
    (view.generation, servers)
}

#[test]
fn a_broken_reload_changes_nothing_and_a_valid_one_applies() {
    let (a, b, o) = (Mock::named("a"), Mock::named("b"), Mock::named("o"));
    let pools = |b_more: &str| {
        format!(
            "{}{}",
            pool_table("app", "", &[("a", a.addr, ""), ("b", b.addr, b_more)], None),
            pool_table("other", "", &[("o", o.addr, "")], None)
        )
    };
    let text = pools_config(&pools(""));
    let herd = Proxy::start_from_file(&text);
    let registry = herd.registry();
    let answers = |herd: &Proxy, path: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| answered_by(&herd.get_from_host("app.test", path, "")))
            .collect()
    };
    let before = answers(&herd, "/other/x", 6);
    assert_eq!(
        tally(&before),
        HashMap::from([("a".into(), 3), ("b".into(), 3)])
    );
    let summary = pools_summary(&registry);

    let out_of_range = pools_config(&pools(", weight = 300"));
    let syntax_error = format!("{text}[[route]\npool = \"other\"\n");
    let misnamed_pool = format!("{text}[[route]]\npath_prefix = \"/other/\"\npool = \"nope\"\n");
    for (what, broken, marker) in [
        ("weight out of range", &out_of_range, "weight = 300"),
        ("syntax error", &syntax_error, "[[route]"),
        ("route to no pool", &misnamed_pool, "\"nope\""),
    ] {
        let line = broken
            .lines()
            .position(|l| l.contains(marker))
            .expect("marker")
            + 1;
        let error = herd
            .reload_with(broken)
            .expect_err(&format!("{what}: the reload was accepted"));
        let message = error.to_string();
        assert!(
            message.contains(&format!("line {line}")),
            "{what}: the error does not name line {line}: {message}"
        );
        match &error {
            ChangeError::Refused(config_error) => assert!(
                config_error
                    .problems
                    .iter()
                    .any(|problem| problem.line == Some(line)),
                "{what}: {config_error:?}"
            ),
            other => panic!("{what}: not a refusal: {other:?}"),
        }
        assert_eq!(
            pools_summary(&registry),
            summary,
            "{what} changed the pools"
        );
        let after = answers(&herd, "/other/x", 6);
        assert_eq!(after, before, "{what}: requests go elsewhere now");
    }

    // A valid file: b's weight to 3, and /other/ routed to pool "other".
    let changed = pools_config(&format!(
        "[[route]]\npath_prefix = \"/other/\"\npool = \"other\"\n\n{}",
        pools(", weight = 3")
    ));
    let generation = herd.reload_with(&changed).expect("a valid reload");
    assert!(generation > summary.0, "the generation did not move");
    assert_eq!(
        app_servers(&registry),
        [
            ("a".to_string(), "ready".to_string(), 1),
            ("b".to_string(), "ready".to_string(), 3)
        ]
    );
    let weighted = answers(&herd, "/x", 8);
    assert_eq!(
        tally(&weighted),
        HashMap::from([("a".into(), 2), ("b".into(), 6)]),
        "{weighted:?}"
    );
    assert_eq!(answers(&herd, "/other/x", 3), ["o", "o", "o"]);
}

#[test]
fn a_drain_set_at_run_time_survives_a_reload_of_the_same_file() {
    let names = ["a", "b"];
    let (_mocks, herd) = app_pool_of(names, "", Some(""));
    let registry = herd.registry();
    let cookies = cookies_for(&herd, &names);
    registry.set_state("app", "b", ServerState::Drain).unwrap();

    let generation = registry
        .reload()
        .expect("reload of the same file")
        .generation;
    assert!(generation > 1);
    assert_eq!(
        app_servers(&registry),
        [
            ("a".to_string(), "ready".to_string(), 1),
            ("b".to_string(), "drain".to_string(), 1)
        ]
    );
    for _ in 0..8 {
        let response = herd.get_with_cookie(None);
        assert_eq!(
            answered_by(&response),
            "a",
            "a new session reached draining b"
        );
        assert_eq!(sticky_cookie_set(&response).as_ref(), Some(&cookies["a"]));
    }
    // b's sessions still reach it: the drain kept, and the pool's generated key with it.
    for _ in 0..4 {
        let response = herd.get_with_cookie(Some(&cookies["b"]));
        assert_eq!(answered_by(&response), "b", "b's session after the reload");
        assert_eq!(sticky_cookie_set(&response), None);
    }
}

#[test]
fn a_reload_keeps_run_time_servers_and_weights_unless_the_file_names_them() {
    let [a, b, c, c2] = named_mocks(["a", "b", "c", "c2"]);
    let text = pools_config(&pool_table(
        "app",
        "",
        &[("a", a.addr, ""), ("b", b.addr, "")],
        None,
    ));
    let herd = Proxy::start_from_file(&text);
    let registry = herd.registry();
    registry
        .add_server("app", ready_server("c", c.addr))
        .unwrap();
    registry.set_weight("app", "b", 2).unwrap();

    herd.reload_with(&text).expect("reload of the same file");
    let expected = [
        ("a".to_string(), "ready".to_string(), 1),
        ("b".to_string(), "ready".to_string(), 2),
        ("c".to_string(), "ready".to_string(), 1),
    ];
    assert_eq!(app_servers(&registry), expected);
    let answers: Vec<String> = (0..8)
        .map(|_| answered_by(&herd.get_from_host("app.test", "/", "")))
        .collect();
    assert_eq!(
        tally(&answers),
        HashMap::from([("a".into(), 2), ("b".into(), 4), ("c".into(), 2)]),
        "{answers:?}"
    );

    // Once the file defines a "c" of its own, the file's c is the one.
    let with_c = pools_config(&pool_table(
        "app",
        "",
        &[
            ("a", a.addr, ""),
            ("b", b.addr, ""),
            ("c", c2.addr, ", weight = 2"),
        ],
        None,
    ));
    herd.reload_with(&with_c).expect("a valid reload");
    let view = registry.pools();
    let c_view = view.pools[0]
        .servers
        .iter()
        .find(|server| server.name == "c")
        .expect("c");
    assert_eq!(
        (
            c_view.addr.as_str(),
            c_view.weight,
            c_view.added_at_run_time
        ),
        (c2.addr.to_string().as_str(), 2, false)
    );
    let before = c.requests().len();
    let answers: Vec<String> = (0..10)
        .map(|_| answered_by(&herd.get_from_host("app.test", "/", "")))
        .collect();
    assert_eq!(
        tally(&answers),
        HashMap::from([("a".into(), 2), ("b".into(), 4), ("c2".into(), 4)]),
        "{answers:?}"
    );
    assert_eq!(
        c.requests().len(),
        before,
        "the run-time c still gets requests"
    );
}
