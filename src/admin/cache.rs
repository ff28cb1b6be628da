//! The admin API's cache routes, each answered with how many responses went: `POST
//! /api/cache/purge` `{"url": …}` (one URL with all its variants, for both schemes unless the URL
//! names one, in every caching pool unless `"pool"` names one), `POST /api/cache/ban` `{"host":
//! …, "path_prefix": …}` (every response for the host whose target starts with the prefix) and
//! `POST /api/cache/purge-tag` `{"tag": …}` (every response whose `Surrogate-Key` or `Cache-Tag`
//! carried the tag). The keys are written by `cache::key`, as the exchange writes them.
//!
//! Also the pools as `GET /api/pools` and `/metrics` report them: the registry's view, with what
//! the store holds of each caching pool.

use serde_json::json;

use super::answer::Answer;
use super::pools::{ApiError, Field, JsonObject};
use crate::cache::key::{check_host, check_path, write_path_prefix, write_primary, PurgeUrl};
use crate::cache::shared::SharedStore;
use crate::cache::Store;
use crate::config::is_valid_name;
use crate::upstream::registry::{PoolsView, Registry};

/// Examples of each body, for the messages that refuse one.
const PURGE_EXAMPLE: &str = r#"{"url":"http://example.com/a?b=1"} (a URL without a scheme, e.g. "example.com/a", purges both; "pool" optional)"#;
const BAN_EXAMPLE: &str = r#"{"host":"example.com","path_prefix":"/images/"} ("path_prefix" default "/"; "pool" optional)"#;
const TAG_EXAMPLE: &str = r#"{"tag":"product-42"}"#;

/// `POST /api/cache/purge` → `{"url", "pools", "purged"}`.
pub(super) fn purge(
    cache: &SharedStore,
    registry: &Registry,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(body, &["url", "pool"], PURGE_EXAMPLE)?;
    let url_field = fields.required("url")?;
    let text = url_field.string("a URL such as \"http://example.com/a\"")?;
    let url = PurgeUrl::parse(text).map_err(|why| url_field.refuse(&why.to_string()))?;
    let pools = caching_pools(registry, fields.optional("pool"))?;
    let store = store_of(cache)?;
    let mut prefixes = Vec::new();
    for pool in &pools {
        for &secure in url.schemes() {
            let mut prefix = Vec::new();
            write_primary(
                &mut prefix,
                pool,
                secure,
                url.host.as_bytes(),
                url.target.as_bytes(),
            );
            prefixes.push(prefix);
        }
    }
    let purged = store.remove_prefixed(&prefixes);
    Ok(Answer::json(
        200,
        &json!({ "url": text, "pools": pools, "purged": purged }),
    ))
}

/// `POST /api/cache/ban` → `{"host", "path_prefix", "pools", "purged"}`.
pub(super) fn ban(
    cache: &SharedStore,
    registry: &Registry,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(body, &["host", "path_prefix", "pool"], BAN_EXAMPLE)?;
    let host_field = fields.required("host")?;
    let host = host_field.string("a host as clients send it, e.g. \"example.com\"")?;
    check_host(host).map_err(|why| host_field.refuse(&why.to_string()))?;
    let prefix_field = fields.optional("path_prefix");
    let path_prefix = match &prefix_field {
        Some(field) => {
            let prefix = field.string("the beginning of a path, e.g. \"/images/\"")?;
            check_path(prefix).map_err(|why| field.refuse(&why.to_string()))?;
            prefix
        }
        None => "/",
    };
    let pools = caching_pools(registry, fields.optional("pool"))?;
    let store = store_of(cache)?;
    let mut prefixes = Vec::new();
    for pool in &pools {
        for secure in [false, true] {
            let mut prefix = Vec::new();
            write_path_prefix(
                &mut prefix,
                pool,
                secure,
                host.as_bytes(),
                path_prefix.as_bytes(),
            );
            prefixes.push(prefix);
        }
    }
    let purged = store.remove_prefixed(&prefixes);
    Ok(Answer::json(
        200,
        &json!({ "host": host, "path_prefix": path_prefix, "pools": pools, "purged": purged }),
    ))
}

/// `POST /api/cache/purge-tag` → `{"tag", "purged"}`.
pub(super) fn purge_tag(cache: &SharedStore, body: &[u8]) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(body, &["tag"], TAG_EXAMPLE)?;
    let tag_field = fields.required("tag")?;
    let tag = tag_field.string("one surrogate key, e.g. \"product-42\"")?;
    // Tags are read split at spaces and commas (`cache::fields`): a tag holds neither.
    let one_tag = !tag.is_empty()
        && tag
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && byte != b',');
    if !one_tag {
        return Err(tag_field.refuse(
            "is not one tag: a tag is visible ASCII without spaces or commas, as Surrogate-Key and Cache-Tag separate them",
        ));
    }
    let store = store_of(cache)?;
    let purged = store.remove_tagged(tag.as_bytes());
    Ok(Answer::json(200, &json!({ "tag": tag, "purged": purged })))
}

/// The store, or a refusal when no pool caches.
fn store_of(cache: &SharedStore) -> Result<std::sync::Arc<Store>, ApiError> {
    cache.current().ok_or_else(|| ApiError {
        status: 409,
        message: "nothing is cached: no pool has [pool.cache] enabled".to_string(),
        problems: Vec::new(),
    })
}

/// The pools a purge looks in: the one `pool` names (which must cache), or every pool that
/// caches.
fn caching_pools(registry: &Registry, pool: Option<Field>) -> Result<Vec<String>, ApiError> {
    let snapshot = registry.snapshot_handle().load_full();
    let caching = snapshot.pools.iter().filter(|pool| pool.caches);
    let Some(field) = pool else {
        return Ok(caching.map(|pool| pool.name.clone()).collect());
    };
    let name = field.string("a pool's name")?;
    if !is_valid_name(name) {
        return Err(
            field.refuse("is not a valid name; use up to 255 letters, digits, '_', '.' and '-'")
        );
    }
    if !snapshot.pools.iter().any(|pool| pool.name == name) {
        return Err(ApiError {
            status: 404,
            message: format!("no pool named {name:?}"),
            problems: Vec::new(),
        });
    }
    if !caching.clone().any(|pool| pool.name == name) {
        return Err(field.refuse("names a pool without [pool.cache]: nothing of it is cached"));
    }
    Ok(vec![name.to_string()])
}

/// The registry's view of the pools, with each caching pool's objects, bytes and evictions from
/// the store's index (zero when no store is made yet).
pub(super) fn pools_with_cache(registry: &Registry, cache: &SharedStore) -> PoolsView {
    let mut view = registry.pools();
    let Some(store) = cache.current() else {
        return view;
    };
    let held_by_pool = store.held_by_pool();
    for pool in &mut view.pools {
        let held = held_by_pool.iter().find(|(name, _)| *name == pool.name);
        if let (Some(cache), Some((_, held))) = (&mut pool.cache, held) {
            cache.held = *held;
        }
    }
    view
}
