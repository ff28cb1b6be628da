//! Which pool and server a request reaches, over real sockets: routes (host, wildcard, path
//! prefix, first match wins), absolute-form targets routed by their own host and path, and
//! `balance = "hash"` on a header or a cookie (and how few keys move when a server comes or
//! goes).

mod common;

use std::collections::{HashMap, HashSet};

use common::*;

/// Which server each of `users` (sent as `X-User`) reaches.
fn hash_placement(herd: &Proxy, users: &[String]) -> HashMap<String, String> {
    let mut conn = herd.connect();
    users
        .iter()
        .map(|user| {
            let header = format!("X-User: {user}\r\n");
            let response = conn.roundtrip(&get_request_to("app.test", "/", &header));
            (user.clone(), answered_by(&response))
        })
        .collect()
}

#[test]
fn routes_pick_the_pool_by_host_and_path_and_the_first_match_wins() {
    let names = ["app", "api", "static", "wild", "adm"];
    let mocks = named_mocks(names);
    let routes = "\
[[route]]
host = \"api.example.com\"
pool = \"api\"

[[route]]
host = \"*.example.com\"
path_prefix = \"/static/\"
pool = \"static\"

[[route]]
host = \"*.example.com\"
pool = \"wild\"

[[route]]
path_prefix = \"/admin/\"
pool = \"adm\"

";
    let pools = pool_per_mock(&names, &mocks);
    let herd = Proxy::start_from_file(&pools_config(&format!("{routes}{pools}")));

    let cases = [
        ("api.example.com", "/v1/users", "api"),
        ("API.Example.COM:8080", "/v1/users", "api"),
        // Route 2 matches too, but route 1 comes first.
        ("api.example.com", "/static/logo.png", "api"),
        ("www.example.com", "/static/logo.png", "static"),
        ("WWW.EXAMPLE.COM:8080", "/static/logo.png", "static"),
        ("www.example.com", "/stat", "wild"),
        ("Shop.Eu.Example.Com:8080", "/", "wild"),
        // Route 3 matches before route 4.
        ("www.example.com", "/admin/users", "wild"),
        ("other.org", "/admin/users", "adm"),
        ("other.org:8080", "/admin/", "adm"),
        // "/admin" is not under the prefix "/admin/".
        ("other.org", "/admin", "app"),
        // The wildcard wants a name under example.com, not example.com itself or a look-alike.
        ("example.com", "/", "app"),
        ("notexample.com", "/static/x", "app"),
        ("www.example.com.evil.org", "/", "app"),
        ("other.org", "/", "app"),
    ];
    let mut conn = herd.connect();
    for (host, path, expected) in cases {
        let response = herd.get_from_host(host, path, "");
        assert_eq!(
            answered_by(&response),
            expected,
            "Host: {host}, path {path}"
        );
        // The same on one kept connection, host after host.
        let response = conn.roundtrip(&get_request_to(host, path, ""));
        assert_eq!(
            answered_by(&response),
            expected,
            "Host: {host}, path {path} (keep-alive)"
        );
    }
    // An HTTP/1.0 request may have no Host: host routes cannot match it, path routes still do.
    for (path, expected) in [("/admin/users", "adm"), ("/static/x", "app")] {
        let response = herd
            .connect()
            .roundtrip(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
        assert_eq!(
            answered_by(&response),
            expected,
            "HTTP/1.0 {path} without Host"
        );
    }
}

/// RFC 9112 §3.2.2: an absolute-form target's own host and path are what is routed, not the
/// Host field (else a client could reach, or dodge, a path route's pool by its choice of form).
#[test]
fn an_absolute_form_request_is_routed_by_its_target() {
    let names = ["app", "api", "adm"];
    let mocks = named_mocks(names);
    let routes = "[[route]]\nhost = \"api.example.com\"\npool = \"api\"\n\n\
                  [[route]]\npath_prefix = \"/admin/\"\npool = \"adm\"\n\n";
    let pools = pool_per_mock(&names, &mocks);
    let herd = Proxy::start_from_file(&pools_config(&format!("{routes}{pools}")));
    for (target, host, expected) in [
        ("http://api.example.com/v1", "api.example.com", "api"),
        // The target's authority wins over Host.
        ("http://api.example.com/v1", "other.org", "api"),
        ("http://other.org/admin/users", "other.org", "adm"),
        ("http://other.org/static/x", "other.org", "app"),
    ] {
        let response =
            herd.connect()
                .roundtrip(&get_request_to(host, target, "Connection: close\r\n"));
        assert_eq!(
            answered_by(&response),
            expected,
            "GET {target} with Host: {host}"
        );
    }
}

#[test]
fn hash_on_a_header_sends_each_value_to_one_server_and_spreads_values() {
    let names = ["a", "b", "c"];
    let (_mocks, herd) = app_pool_of(
        names,
        "balance = \"hash\"\nhash_key = \"header:X-User\"\n",
        None,
    );

    let mut conn = herd.connect();
    let mut server_of_user: HashMap<String, String> = HashMap::new();
    for user in 0..50 {
        let header = format!("X-User: user-{user}@example.com\r\n");
        let mut answers = Vec::new();
        for i in 0..5 {
            // Alternate new connections and one kept connection (which may sit on either
            // worker): the choice must not depend on the connection.
            let response = if i % 2 == 0 {
                herd.get_from_host("app.test", &format!("/u/{i}"), &header)
            } else {
                conn.roundtrip(&get_request_to("app.test", &format!("/u/{i}"), &header))
            };
            answers.push(answered_by(&response));
        }
        let first = answers[0].clone();
        assert!(
            answers.iter().all(|a| *a == first),
            "user-{user} went to {answers:?}"
        );
        server_of_user.insert(format!("user-{user}"), first);
    }
    let used = tally(&server_of_user.values().cloned().collect::<Vec<_>>());
    assert!(
        used.len() > 1,
        "50 users all hashed to one server: {used:?}"
    );
    // The header name is matched whatever its case.
    for user in 0..10 {
        let header = format!("x-user: user-{user}@example.com\r\n");
        let response = herd.get_from_host("app.test", "/lower", &header);
        assert_eq!(
            answered_by(&response),
            server_of_user[&format!("user-{user}")],
            "user-{user} with a lower-case header name"
        );
    }
    // Without the header, the client's address is hashed: from 127.0.0.1, always one server.
    let without: HashSet<String> = (0..10)
        .map(|_| answered_by(&herd.get_from_host("app.test", "/anonymous", "")))
        .collect();
    assert_eq!(
        without.len(),
        1,
        "requests without X-User went to {without:?}"
    );
}

#[test]
fn hash_moves_only_the_keys_it_must_when_a_server_comes_or_goes() {
    let [a, b, c, d] = named_mocks(["a", "b", "c", "d"]);
    let herd = Proxy::start_from_file(&pools_config(&pool_table(
        "app",
        "balance = \"hash\"\nhash_key = \"header:X-User\"\n",
        &[("a", a.addr, ""), ("b", b.addr, ""), ("c", c.addr, "")],
        None,
    )));
    let registry = herd.registry();
    let users: Vec<String> = (0..300).map(|i| format!("user-{i}")).collect();
    let start = hash_placement(&herd, &users);

    registry
        .add_server("app", ready_server("d", d.addr))
        .unwrap();
    let with_d = hash_placement(&herd, &users);
    let mut moved = 0;
    for user in &users {
        if with_d[user] != start[user] {
            assert_eq!(
                with_d[user], "d",
                "{user} moved from {} to {}",
                start[user], with_d[user]
            );
            moved += 1;
        }
    }
    // About a quarter of the keys move to the fourth server.
    assert!(
        (30..=135).contains(&moved),
        "{moved} of 300 keys moved when a fourth server came"
    );

    registry.remove_server("app", "d").unwrap();
    assert_eq!(hash_placement(&herd, &users), start, "removing d again");

    registry.remove_server("app", "a").unwrap();
    let without_a = hash_placement(&herd, &users);
    for user in &users {
        if start[user] != "a" {
            assert_eq!(
                without_a[user], start[user],
                "{user} moved though its server stayed"
            );
        }
    }
    let a_users: HashSet<&String> = users
        .iter()
        .filter(|user| start[*user] == "a")
        .map(|user| &without_a[user])
        .collect();
    assert!(a_users.len() > 1, "a's keys all went to {a_users:?}");
}

#[test]
fn hash_on_a_cookie_sends_each_value_to_one_server() {
    let names = ["a", "b", "c"];
    let (_mocks, herd) = app_pool_of(
        names,
        "balance = \"hash\"\nhash_key = \"cookie:session\"\n",
        None,
    );
    let mut used = HashSet::new();
    for id in 0..30 {
        let cookie = format!("Cookie: theme=dark; session=s{id}x; lang=en\r\n");
        let answers: HashSet<String> = (0..4)
            .map(|_| answered_by(&herd.get_from_host("app.test", "/", &cookie)))
            .collect();
        assert_eq!(answers.len(), 1, "session s{id}x went to {answers:?}");
        used.extend(answers);
    }
    assert!(used.len() > 1, "30 sessions all hashed to {used:?}");
}

/// A reload of 10,000 host routes while requests keep coming: every request meets either the old
/// table or the new one, whole — a routed host never falls through to the listener's pool, and an
/// unknown host always does.
#[test]
fn requests_during_reloads_of_many_routes_meet_one_whole_table() {
    const ROUTES: usize = 10_000;
    let names = ["app", "one", "two"];
    let mocks = named_mocks(names);
    let pools = pool_per_mock(&names, &mocks);
    let config = |pool: &str| {
        let routes: String = (0..ROUTES)
            .map(|i| format!("[[route]]\nhost = \"h{i}.test\"\npool = \"{pool}\"\n\n"))
            .collect();
        pools_config(&format!("{routes}{pools}"))
    };
    let herd = Proxy::start_from_file(&config("one"));
    let addr = herd.addr;
    let reloading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let client = {
        let reloading = std::sync::Arc::clone(&reloading);
        std::thread::spawn(move || {
            let mut conn = Conn::connect(addr);
            let mut seen = HashSet::new();
            let mut requests = 0;
            while reloading.load(std::sync::atomic::Ordering::Relaxed) || requests < 100 {
                for (host, may_be) in [
                    ("h0.test", &["one", "two"][..]),
                    (&format!("h{}.test", ROUTES - 1), &["one", "two"][..]),
                    ("unknown.test", &["app"][..]),
                ] {
                    let response = conn.roundtrip(&get_request_to(host, "/", ""));
                    let pool = answered_by(&response);
                    assert!(may_be.contains(&pool.as_str()), "{host} reached {pool}");
                    seen.insert(pool);
                    requests += 1;
                }
            }
            (requests, seen)
        })
    };
    for round in 0..6 {
        let generation = herd
            .reload_with(&config(["two", "one"][round % 2]))
            .unwrap();
        assert!(generation > 0);
    }
    reloading.store(false, std::sync::atomic::Ordering::Relaxed);
    let (requests, seen) = client.join().expect("every request met a whole table");
    assert!(
        seen.contains("one") && seen.contains("two"),
        "{seen:?} over {requests} requests"
    );
    // The last table is the one in force.
    assert_eq!(answered_by(&herd.get_from_host("h5.test", "/", "")), "one");
}
