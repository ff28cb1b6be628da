//! A config template (`config::template`) written out for one request: each variable's value
//! appended straight into the head being written, no allocation. Header rules (`headers.rs`)
//! and a redirect's Location (`route_answer.rs`) render through it.

use crate::config::template::{Part, Template, Variable};

/// What a template's variables stand for, for one request. A use leaves empty what its
/// templates cannot name (the check refused it there).
#[derive(Clone, Copy)]
pub struct Values<'a> {
    /// The client's address as herdsman serves it (`[real_ip]` applied), as text.
    pub client: &'a [u8],
    /// The TCP peer's port.
    pub client_port: u16,
    /// The request's id; empty without one.
    pub request_id: &'a [u8],
    pub host: &'a [u8],
    /// The target as received, its path (without the query) and its query (without the `?`).
    pub target: &'a [u8],
    pub path: &'a [u8],
    pub query: &'a [u8],
    /// A redirect's: the path after the route's `path_prefix`.
    pub path_rest: &'a [u8],
    pub method: &'a [u8],
    /// It came over TLS.
    pub secure: bool,
    /// The route that took it.
    pub route: Option<usize>,
    /// The server that answered; empty on the request side and for a cached answer.
    pub server: &'a [u8],
    /// The client's TLS version, cipher suite and the name it asked for (SNI); empty in
    /// cleartext.
    pub tls_version: &'a str,
    pub tls_cipher: &'a str,
    pub sni: &'a str,
}

impl Values<'_> {
    /// Appends `template` with each variable's value. Every value comes from a head the parse
    /// checked (no byte that could end a field) or from herdsman itself.
    #[inline]
    pub fn render(&self, template: &Template, out: &mut Vec<u8>) {
        for part in template.parts.iter() {
            match part {
                Part::Literal(text) => out.extend_from_slice(text.as_bytes()),
                Part::Variable(variable) => self.write(*variable, out),
            }
        }
    }

    /// Appends `variable`'s value.
    fn write(&self, variable: Variable, out: &mut Vec<u8>) {
        match variable {
            Variable::Client => out.extend_from_slice(self.client),
            Variable::ClientPort => write_decimal(u64::from(self.client_port), out),
            Variable::RequestId => out.extend_from_slice(self.request_id),
            Variable::Host => out.extend_from_slice(self.host),
            Variable::Target => out.extend_from_slice(self.target),
            Variable::Path => out.extend_from_slice(self.path),
            Variable::PathRest => out.extend_from_slice(self.path_rest),
            Variable::Query => out.extend_from_slice(self.query),
            Variable::Method => out.extend_from_slice(self.method),
            Variable::Scheme => out.extend_from_slice(match self.secure {
                true => b"https",
                false => b"http",
            }),
            Variable::Route => {
                if let Some(route) = self.route {
                    out.extend_from_slice(b"route[");
                    write_decimal(route as u64, out);
                    out.push(b']');
                }
            }
            Variable::Server => out.extend_from_slice(self.server),
            Variable::TlsVersion => out.extend_from_slice(self.tls_version.as_bytes()),
            Variable::TlsCipher => out.extend_from_slice(self.tls_cipher.as_bytes()),
            Variable::Sni => out.extend_from_slice(self.sni.as_bytes()),
        }
    }
}

/// `value` in decimal, appended.
fn write_decimal(value: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_writes_its_value_and_literals_stay() {
        let values = Values {
            client: b"192.0.2.7",
            client_port: 40312,
            request_id: b"00ff",
            host: b"shop.example:8443",
            target: b"/old/a?x=1",
            path: b"/old/a",
            path_rest: b"a",
            query: b"x=1",
            method: b"GET",
            secure: true,
            route: Some(3),
            server: b"app-1",
            tls_version: "TLSv1.3",
            tls_cipher: "TLS13_AES_128_GCM_SHA256",
            sni: "shop.example",
        };
        let text = "{client}:{client_port} {request_id} {host}{path} {path_rest}?{query} {target} {method} \
                    {scheme} {route} {server} {tls_version} {tls_cipher} {sni} {{}}";
        let template = Template::parse(text, |_| true).unwrap();
        let mut out = Vec::new();
        values.render(&template, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "192.0.2.7:40312 00ff shop.example:8443/old/a a?x=1 /old/a?x=1 GET https route[3] app-1 TLSv1.3 \
             TLS13_AES_128_GCM_SHA256 shop.example {}"
        );
        let cleartext = Values {
            secure: false,
            route: None,
            tls_version: "",
            tls_cipher: "",
            sni: "",
            ..values
        };
        let template =
            Template::parse("{scheme}[{route}][{tls_version}][{sni}]", |_| true).unwrap();
        let mut out = Vec::new();
        cleartext.render(&template, &mut out);
        assert_eq!(out, b"http[][][]");
    }
}
