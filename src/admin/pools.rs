//! The admin API's pool routes: each reads its JSON body field by field, so that a refusal names
//! the field and what would be accepted, calls the [`Registry`], and turns the registry's
//! refusals into statuses (no such pool or server 404, a name taken 409, a bad value 400).
//!
//! The shapes of the bodies are checked here even though the registry checks names and weights
//! again: the registry does not know which JSON field a value came from.

use serde::Serialize;
use serde_json::{Map, Value};

use super::answer::Answer;
use crate::config::{is_valid_name, ServerAddr, ServerState};
use crate::process::notify;
use crate::upstream::registry::{ChangeError, NewServer, Registry, MAX_WEIGHT};

/// The header a request carries a test token in, as `GET …/test-token` tells clients to send it.
const TEST_TOKEN_HEADER: &str = "X-Herdsman-Test";

/// Every state, in the order the API lists them.
const STATES: [ServerState; 4] = [
    ServerState::Ready,
    ServerState::Drain,
    ServerState::Maint,
    ServerState::Test,
];

/// Examples of each body, for the messages that refuse one.
const ADD_EXAMPLE: &str = r#"{"name":"c","addr":"127.0.0.1:9003","weight":1,"state":"ready"} (weight and state optional)"#;
const STATE_EXAMPLE: &str = r#"{"state":"drain"}"#;
const WEIGHT_EXAMPLE: &str = r#"{"weight":3}"#;

/// A refused call: the status and the `{"error": …}` body, with a reload's problems.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ApiError {
    pub status: u16,
    pub message: String,
    /// One line per problem found in the config file (a refused reload only).
    pub problems: Vec<String>,
}

/// The JSON of an [`ApiError`].
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    problems: &'a [String],
}

impl ApiError {
    pub(super) fn bad_request(message: String) -> ApiError {
        ApiError {
            status: 400,
            message,
            problems: Vec::new(),
        }
    }

    pub(super) fn into_answer(self) -> Answer {
        let body = ErrorBody {
            error: &self.message,
            problems: &self.problems,
        };
        Answer::json(self.status, &body)
    }
}

impl From<ChangeError> for ApiError {
    fn from(error: ChangeError) -> ApiError {
        let status = match &error {
            ChangeError::NoPool(_) | ChangeError::NoServer { .. } => 404,
            ChangeError::Exists { .. } => 409,
            // A new listener that cannot bind refuses the file as a bad value would.
            ChangeError::Invalid(_) | ChangeError::Refused(_) | ChangeError::Bind { .. } => 400,
            // The request is fine; this herdsman cannot do it (started from text, not a file).
            ChangeError::NoConfigFile => 409,
            ChangeError::Snapshot(_) => 500,
        };
        match error {
            ChangeError::Refused(config_error) => ApiError {
                status,
                message: "the new config was refused; the running one stays".to_string(),
                problems: config_error
                    .problems
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            },
            ChangeError::Snapshot(_) => {
                tracing::error!("admin API: {error}");
                ApiError {
                    status,
                    message: error.to_string(),
                    problems: Vec::new(),
                }
            }
            other => ApiError {
                status,
                message: other.to_string(),
                problems: Vec::new(),
            },
        }
    }
}

/// `POST /api/pools/{pool}/servers` → 201 and the server.
pub(super) fn add_server(registry: &Registry, pool: &str, body: &[u8]) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(
        body,
        &["name", "addr", "weight", "state", "max_connections"],
        ADD_EXAMPLE,
    )?;
    let name = name_field(fields.required("name")?)?;
    let addr = addr_field(fields.required("addr")?)?;
    // Defaults as in the config file: weight 1, ready.
    let weight = fields.optional("weight").map(weight_field).transpose()?;
    let state = fields.optional("state").map(state_field).transpose()?;
    let max_connections = fields
        .optional("max_connections")
        .map(max_connections_field)
        .transpose()?;
    let server = NewServer {
        name,
        addr,
        weight: weight.unwrap_or(1),
        state: state.unwrap_or(ServerState::Ready),
        max_connections: max_connections.unwrap_or(0),
    };
    Ok(Answer::json(201, &registry.add_server(pool, server)?))
}

/// `DELETE /api/pools/{pool}/servers/{server}` → the server as it was.
pub(super) fn remove_server(
    registry: &Registry,
    pool: &str,
    server: &str,
) -> Result<Answer, ApiError> {
    Ok(Answer::json(200, &registry.remove_server(pool, server)?))
}

/// `PUT /api/pools/{pool}/servers/{server}/state` `{"state":"drain"}` → the server.
pub(super) fn set_state(
    registry: &Registry,
    pool: &str,
    server: &str,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(body, &["state"], STATE_EXAMPLE)?;
    let state = state_field(fields.required("state")?)?;
    Ok(Answer::json(200, &registry.set_state(pool, server, state)?))
}

/// `PUT /api/pools/{pool}/servers/{server}/weight` `{"weight":3}` → the server.
pub(super) fn set_weight(
    registry: &Registry,
    pool: &str,
    server: &str,
    body: &[u8],
) -> Result<Answer, ApiError> {
    let mut fields = JsonObject::parse(body, &["weight"], WEIGHT_EXAMPLE)?;
    let weight = weight_field(fields.required("weight")?)?;
    Ok(Answer::json(
        200,
        &registry.set_weight(pool, server, weight)?,
    ))
}

/// `GET /api/pools/{pool}/servers/{server}/test-token` → the header and token that reach the
/// server while it is in the `test` state.
pub(super) fn test_token(
    registry: &Registry,
    pool: &str,
    server: &str,
) -> Result<Answer, ApiError> {
    let token = registry.test_token(pool, server)?;
    let body = serde_json::json!({ "header": TEST_TOKEN_HEADER, "token": token });
    Ok(Answer::json(200, &body))
}

/// `POST /api/reload` → the new generation, and the keys the file changes that wait for a
/// restart (`restart_required`, empty when none). A body, if any, is ignored.
pub(super) fn reload(registry: &Registry) -> Result<Answer, ApiError> {
    let reloaded = notify::announce_reload(|| registry.reload())?;
    Ok(Answer::json(200, &reloaded))
}

/// A body that must be one JSON object with only the `accepted` fields (the cache routes read
/// theirs with it too).
pub(super) struct JsonObject {
    fields: Map<String, Value>,
    example: &'static str,
}

impl JsonObject {
    pub(super) fn parse(
        body: &[u8],
        accepted: &[&str],
        example: &'static str,
    ) -> Result<JsonObject, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(format!(
                "the body is empty; send a JSON object such as {example}"
            )));
        }
        let value: Value = serde_json::from_slice(body).map_err(|error| {
            ApiError::bad_request(format!(
                "the body is not valid JSON ({error}); send a JSON object such as {example}"
            ))
        })?;
        let Value::Object(fields) = value else {
            return Err(ApiError::bad_request(format!(
                "the body must be a JSON object such as {example}, not {}",
                describe(&value)
            )));
        };
        if let Some(unknown) = fields.keys().find(|key| !accepted.contains(&key.as_str())) {
            let accepted = accepted
                .iter()
                .map(|key| format!("{key:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::bad_request(format!(
                "unknown field {unknown:?}; accepted: {accepted}"
            )));
        }
        Ok(JsonObject { fields, example })
    }

    /// The field's value, or a refusal saying it is missing.
    pub(super) fn required(&mut self, key: &'static str) -> Result<Field, ApiError> {
        self.optional(key).ok_or_else(|| {
            ApiError::bad_request(format!(
                "the field {key:?} is missing; send e.g. {}",
                self.example
            ))
        })
    }

    pub(super) fn optional(&mut self, key: &'static str) -> Option<Field> {
        self.fields.remove(key).map(|value| Field { key, value })
    }
}

/// One field of a body, named in the refusals of its value.
pub(super) struct Field {
    key: &'static str,
    value: Value,
}

impl Field {
    pub(super) fn refuse(&self, why: &str) -> ApiError {
        ApiError::bad_request(format!("{:?}: {} {why}", self.key, self.value))
    }

    pub(super) fn string(&self, what: &str) -> Result<&str, ApiError> {
        self.value.as_str().ok_or_else(|| {
            self.refuse(&format!(
                "is {}; send a string: {what}",
                describe(&self.value)
            ))
        })
    }
}

/// A server name: up to 255 of `[A-Za-z0-9_.-]`, as in the config file.
fn name_field(field: Field) -> Result<String, ApiError> {
    let name = field.string("the server's name")?;
    if !is_valid_name(name) {
        return Err(field.refuse(
            "is not a valid name; use up to 255 letters, digits, '_', '.' and '-', e.g. \"c\"",
        ));
    }
    Ok(name.to_string())
}

/// An IP address and port, or `unix:` and a socket's path. Host names are not looked up, as in
/// the config file: the address must not change under a running proxy.
fn addr_field(field: Field) -> Result<ServerAddr, ApiError> {
    let text = field.string(
        "an IP address and port, e.g. \"127.0.0.1:9003\", or a UNIX socket, e.g. \"unix:/run/app.sock\"",
    )?;
    match ServerAddr::parse(text) {
        Some(Ok(addr)) => Ok(addr),
        Some(Err(why)) => Err(field.refuse(&format!("is refused: {why}"))),
        None => Err(field.refuse(
            "is not an IP address and port; host names are not looked up, write e.g. \"127.0.0.1:9003\", \"[::1]:9003\" or \"unix:/run/app.sock\"",
        )),
    }
}

/// A weight: a whole number from 0 (no new requests) to `MAX_WEIGHT`.
fn weight_field(field: Field) -> Result<u32, ApiError> {
    let accepted = format!("a whole number from 0 to {MAX_WEIGHT} (0 takes no new requests)");
    whole_number_field(field, MAX_WEIGHT, &accepted)
}

/// A server's `max_connections`.
fn max_connections_field(field: Field) -> Result<u32, ApiError> {
    whole_number_field(
        field,
        1_000_000,
        "a whole number from 0 (no limit) to 1000000",
    )
}

/// A whole number from 0 to `max`; `accepted` says so in a refusal.
fn whole_number_field(field: Field, max: u32, accepted: &str) -> Result<u32, ApiError> {
    let Value::Number(number) = &field.value else {
        return Err(field.refuse(&format!("is {}; send {accepted}", describe(&field.value))));
    };
    match number.as_u64() {
        Some(value) if value <= u64::from(max) => Ok(value as u32),
        Some(_) => Err(field.refuse(&format!("is out of range; accepted: {accepted}"))),
        None if number.is_i64() => {
            Err(field.refuse(&format!("is out of range; accepted: {accepted}")))
        }
        None => Err(field.refuse(&format!("is not a whole number; send {accepted}"))),
    }
}

/// A state: one of the words of [`STATES`].
fn state_field(field: Field) -> Result<ServerState, ApiError> {
    let words = STATES.map(ServerState::word).join(", ");
    let word = field.string(&format!("one of {words}"))?;
    ServerState::from_word(word)
        .ok_or_else(|| field.refuse(&format!("is not a state; accepted: {words}")))
}

/// What kind of JSON value this is, for messages: "a number", "null", ….
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal of `body` by `parse` then `read`; panics if they accept it.
    fn refusal_of(body: &str, read: impl Fn(&mut JsonObject) -> Result<(), ApiError>) -> ApiError {
        JsonObject::parse(
            body.as_bytes(),
            &["name", "addr", "weight", "state"],
            ADD_EXAMPLE,
        )
        .and_then(|mut fields| read(&mut fields))
        .expect_err(body)
    }

    fn read_all(fields: &mut JsonObject) -> Result<(), ApiError> {
        name_field(fields.required("name")?)?;
        addr_field(fields.required("addr")?)?;
        fields.optional("weight").map(weight_field).transpose()?;
        fields.optional("state").map(state_field).transpose()?;
        Ok(())
    }

    #[test]
    fn refusals_name_the_field_and_what_is_accepted() {
        for (body, expected) in [
            ("", "the body is empty"),
            ("{\"name\":", "not valid JSON"),
            ("[1]", "must be a JSON object"),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","colour":"red"}"#,
                r#"unknown field "colour"; accepted: "name", "addr", "weight", "state""#,
            ),
            (
                r#"{"addr":"127.0.0.1:1"}"#,
                r#"the field "name" is missing"#,
            ),
            (
                r#"{"name":7,"addr":"127.0.0.1:1"}"#,
                r#""name": 7 is a number; send a string"#,
            ),
            (
                r#"{"name":"a b","addr":"127.0.0.1:1"}"#,
                r#""name": "a b" is not a valid name"#,
            ),
            (
                r#"{"name":"c","addr":"localhost:80"}"#,
                r#""addr": "localhost:80" is not an IP address and port"#,
            ),
            (r#"{"name":"c","addr":"127.0.0.1:0"}"#, "port 0"),
            (
                r#"{"name":"c","addr":"unix:app.sock"}"#,
                r#""addr": "unix:app.sock" is refused: a UNIX socket's path must be absolute"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","weight":300}"#,
                r#""weight": 300 is out of range; accepted: a whole number from 0 to 256"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","weight":-1}"#,
                r#""weight": -1 is out of range"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","weight":1.5}"#,
                r#""weight": 1.5 is not a whole number"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","weight":"3"}"#,
                r#""weight": "3" is a string"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","state":"asleep"}"#,
                r#""state": "asleep" is not a state; accepted: ready, drain, maint, test"#,
            ),
            (
                r#"{"name":"c","addr":"127.0.0.1:1","state":null}"#,
                r#""state": null is null"#,
            ),
        ] {
            let refusal = refusal_of(body, read_all);
            assert_eq!(refusal.status, 400, "{body}");
            assert!(
                refusal.message.contains(expected),
                "{body}: {:?} does not contain {expected:?}",
                refusal.message
            );
        }
    }

    #[test]
    fn well_formed_bodies_are_read() {
        let mut fields = JsonObject::parse(
            br#" {"state":"test","weight":0,"addr":"[::1]:9003","name":"c"} "#,
            &["name", "addr", "weight", "state"],
            ADD_EXAMPLE,
        )
        .unwrap();
        assert_eq!(name_field(fields.required("name").unwrap()).unwrap(), "c");
        assert_eq!(
            addr_field(fields.required("addr").unwrap()).unwrap(),
            "[::1]:9003".parse().unwrap()
        );
        assert_eq!(weight_field(fields.optional("weight").unwrap()).unwrap(), 0);
        assert_eq!(
            state_field(fields.optional("state").unwrap()).unwrap(),
            ServerState::Test
        );
    }

    #[test]
    fn registry_refusals_become_statuses() {
        let status = |error| ApiError::from(error).status;
        assert_eq!(status(ChangeError::NoPool("x".into())), 404);
        assert_eq!(
            status(ChangeError::NoServer {
                pool: "app".into(),
                server: "x".into()
            }),
            404
        );
        assert_eq!(
            status(ChangeError::Exists {
                pool: "app".into(),
                server: "a".into()
            }),
            409
        );
        assert_eq!(status(ChangeError::Invalid("bad".into())), 400);
        let refused =
            crate::Config::from_toml("workers = 0\n[[pool]]\nname = 1\n", "h.toml").unwrap_err();
        let count = refused.problems.len();
        let error = ApiError::from(ChangeError::Refused(refused));
        assert_eq!(error.status, 400);
        assert_eq!(
            error.message,
            "the new config was refused; the running one stays"
        );
        assert_eq!(error.problems.len(), count);
        assert!(
            error.problems[0].starts_with("line "),
            "{:?}",
            error.problems
        );
        let json: Value = serde_json::from_slice(&error.into_answer().body).unwrap();
        assert_eq!(json["problems"].as_array().unwrap().len(), count, "{json}");
    }
}
