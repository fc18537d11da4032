//! close-order: the classic delayed-task handler ("close order 42 in 30 minutes unless it
//! was paid").
//!
//! The payload is a JSON object such as `{"order_id": 42}` (other fields are ignored). The
//! job's params are the order service's base URL, e.g. `http://orders.internal:8080`, which
//! must be on the job's HTTP allow-list. The plugin asks the service
//! (`GET {service}/orders/42`, answered `{"paid": true|false}`) and, if the order is unpaid,
//! closes it (`POST {service}/orders/42/close`, with `Authorization: Bearer <secret>` when
//! the app has a secret named `ORDER_SERVICE_TOKEN`). It remembers closed orders in the
//! job's key-value state, so a retried run does not close an order twice. It logs
//! "order 42 was unpaid: closed it", "order 42 is paid: leaving it" or "order 42 was
//! closed already", and fails (exit 1) with the reason when the service cannot be asked.
//!
//! Without params (no service) it decides from the payload's `paid` field instead, and
//! only logs: `{"order_id": 42, "paid": false}` gives "order 42 is unpaid: closing it".
//!
//! There are no crates here (Debian's rustc 1.63 builds it with no cargo dependencies),
//! so the JSON is parsed by the small, strict parser below instead of serde.

#[path = "../../sdk/rust/rota.rs"]
mod rota;

fn main() {
    let payload = rota::payload();
    let order = match Order::from_json(&payload) {
        Ok(order) => order,
        Err(why) => rota::fail(&format!("payload is not an order: {}", why)),
    };
    let id = order.order_id;
    let service = match rota::params() {
        Some(url) => url.trim().trim_end_matches('/').to_string(),
        None => {
            // Offline: the payload says whether the order was paid.
            match order.paid {
                Some(true) => rota::log(&format!("order {} is paid: leaving it", id)),
                Some(false) => rota::log(&format!("order {} is unpaid: closing it", id)),
                None => rota::fail(
                    "no order service (the job's params) and no \"paid\" field in the payload",
                ),
            }
            return;
        }
    };
    let done_key = format!("closed:{}", id);
    match rota::kv_get(&done_key) {
        Ok(Some(_)) => {
            rota::log(&format!("order {} was closed already", id));
            return;
        }
        Ok(None) => {}
        Err(e) => rota::fail(&format!("cannot read this job's state: {}", e)),
    }
    let url = format!("{}/orders/{}", service, id);
    let answer = call("GET", &url, &[], b"");
    let paid = match json::parse(&answer.text()) {
        Ok(json::Value::Object(fields)) => fields.into_iter().find_map(|(k, v)| match (k.as_str(), v) {
            ("paid", json::Value::Bool(b)) => Some(b),
            _ => None,
        }),
        _ => None,
    };
    match paid {
        Some(true) => rota::log(&format!("order {} is paid: leaving it", id)),
        Some(false) => {
            let token = match rota::secret("ORDER_SERVICE_TOKEN") {
                Ok(token) => token,
                Err(e) => rota::fail(&format!("cannot read the service's token: {}", e)),
            };
            let bearer = token.map(|t| format!("Bearer {}", t));
            let headers: Vec<(&str, &str)> = match &bearer {
                Some(b) => vec![("Authorization", b.as_str())],
                None => Vec::new(),
            };
            call("POST", &format!("{}/close", url), &headers, b"");
            if let Err(e) = rota::kv_set(&done_key, b"1") {
                rota::log_err(&format!("closed, but cannot remember it: {}", e));
            }
            rota::log(&format!("order {} was unpaid: closed it", id));
        }
        None => rota::fail(&format!(
            "the order service answered GET {} with {:?}, not {{\"paid\": true|false}}",
            url,
            answer.text()
        )),
    }
}

/// One request to the order service; anything but a 2xx answer fails the run (and the
/// job's retry policy tries again later).
fn call(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> rota::Response {
    match rota::http_request(method, url, headers, body) {
        Ok(r) if (200..300).contains(&r.status) => r,
        Ok(r) => rota::fail(&format!(
            "the order service answered {} {} with status {}",
            method, url, r.status
        )),
        Err(e) => rota::fail(&format!("cannot reach the order service: {}", e.message)),
    }
}

#[derive(Debug, PartialEq)]
struct Order {
    order_id: i64,
    /// Whether it was paid, when the payload says so (used without an order service).
    paid: Option<bool>,
}

impl Order {
    fn from_json(text: &str) -> Result<Order, String> {
        if text.trim().is_empty() {
            return Err("it is empty; expected JSON like {\"order_id\": 42}".into());
        }
        let fields = match json::parse(text)? {
            json::Value::Object(fields) => fields,
            other => return Err(format!("expected a JSON object, found {}", other.kind())),
        };
        let mut order_id = None;
        let mut paid = None;
        for (key, value) in fields {
            match key.as_str() {
                "order_id" => {
                    if order_id.is_some() {
                        return Err("\"order_id\" appears twice".into());
                    }
                    order_id = Some(match &value {
                        json::Value::Number(n) => n.parse::<i64>().map_err(|_| {
                            format!("\"order_id\" must be an integer, found {}", n)
                        })?,
                        other => {
                            return Err(format!(
                                "\"order_id\" must be an integer, found {}",
                                other.kind()
                            ))
                        }
                    });
                }
                "paid" => {
                    if paid.is_some() {
                        return Err("\"paid\" appears twice".into());
                    }
                    paid = Some(match value {
                        json::Value::Bool(b) => b,
                        other => {
                            return Err(format!(
                                "\"paid\" must be true or false, found {}",
                                other.kind()
                            ))
                        }
                    });
                }
                _ => {}
            }
        }
        match order_id {
            Some(order_id) => Ok(Order { order_id, paid }),
            None => Err("it has no \"order_id\" field".into()),
        }
    }
}

/// A minimal, strict JSON (RFC 8259) parser: enough for small payloads, no dependencies.
mod json {
    /// Deepest nesting accepted, so a hostile payload cannot exhaust the stack.
    const MAX_DEPTH: usize = 64;

    #[derive(Debug, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        /// The number's text, as written (already checked to be a valid JSON number).
        Number(String),
        String(String),
        Array(Vec<Value>),
        /// Members in document order.
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn kind(&self) -> &'static str {
            match self {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
        }
    }

    pub fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        p.ws();
        let value = p.value(0)?;
        p.ws();
        if p.i < p.s.len() {
            return Err(p.error("unexpected text after the JSON value"));
        }
        Ok(value)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl<'a> Parser<'a> {
        fn error(&self, what: &str) -> String {
            format!("invalid JSON at byte {}: {}", self.i, what)
        }

        fn peek(&self) -> Option<u8> {
            self.s.get(self.i).copied()
        }

        fn ws(&mut self) {
            while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
                self.i += 1;
            }
        }

        fn eat(&mut self, b: u8) -> bool {
            if self.peek() == Some(b) {
                self.i += 1;
                true
            } else {
                false
            }
        }

        fn literal(&mut self, word: &str, value: Value) -> Result<Value, String> {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                Ok(value)
            } else {
                Err(self.error("expected a JSON value"))
            }
        }

        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > MAX_DEPTH {
                return Err(self.error("nested too deeply"));
            }
            match self.peek() {
                None => Err(self.error("unexpected end of input")),
                Some(b'{') => self.object(depth),
                Some(b'[') => self.array(depth),
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.literal("true", Value::Bool(true)),
                Some(b'f') => self.literal("false", Value::Bool(false)),
                Some(b'n') => self.literal("null", Value::Null),
                Some(b'-' | b'0'..=b'9') => self.number(),
                Some(_) => Err(self.error("expected a JSON value")),
            }
        }

        fn object(&mut self, depth: usize) -> Result<Value, String> {
            self.i += 1; // '{'
            let mut members = Vec::new();
            self.ws();
            if self.eat(b'}') {
                return Ok(Value::Object(members));
            }
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a string key"));
                }
                let key = self.string()?;
                self.ws();
                if !self.eat(b':') {
                    return Err(self.error("expected `:` after a key"));
                }
                self.ws();
                let value = self.value(depth + 1)?;
                members.push((key, value));
                self.ws();
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b'}') {
                    return Ok(Value::Object(members));
                }
                return Err(self.error("expected `,` or `}` in an object"));
            }
        }

        fn array(&mut self, depth: usize) -> Result<Value, String> {
            self.i += 1; // '['
            let mut items = Vec::new();
            self.ws();
            if self.eat(b']') {
                return Ok(Value::Array(items));
            }
            loop {
                self.ws();
                items.push(self.value(depth + 1)?);
                self.ws();
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b']') {
                    return Ok(Value::Array(items));
                }
                return Err(self.error("expected `,` or `]` in an array"));
            }
        }

        fn digits(&mut self) -> usize {
            let start = self.i;
            while let Some(b'0'..=b'9') = self.peek() {
                self.i += 1;
            }
            self.i - start
        }

        fn number(&mut self) -> Result<Value, String> {
            let start = self.i;
            self.eat(b'-');
            if self.eat(b'0') {
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.error("a number cannot have a leading zero"));
                }
            } else if self.digits() == 0 {
                return Err(self.error("expected digits"));
            }
            if self.eat(b'.') && self.digits() == 0 {
                return Err(self.error("expected digits after `.`"));
            }
            if self.eat(b'e') || self.eat(b'E') {
                if !self.eat(b'+') {
                    self.eat(b'-');
                }
                if self.digits() == 0 {
                    return Err(self.error("expected digits in the exponent"));
                }
            }
            // Only ASCII was consumed, so this slice is valid UTF-8.
            Ok(Value::Number(
                String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
            ))
        }

        fn hex4(&mut self) -> Result<u32, String> {
            let mut n = 0;
            for _ in 0..4 {
                let d = match self.peek() {
                    Some(c @ b'0'..=b'9') => c - b'0',
                    Some(c @ b'a'..=b'f') => c - b'a' + 10,
                    Some(c @ b'A'..=b'F') => c - b'A' + 10,
                    _ => return Err(self.error("expected 4 hex digits after `\\u`")),
                };
                n = n * 16 + u32::from(d);
                self.i += 1;
            }
            Ok(n)
        }

        fn string(&mut self) -> Result<String, String> {
            self.i += 1; // '"'
            let mut out: Vec<u8> = Vec::new();
            loop {
                let b = match self.peek() {
                    Some(b) => b,
                    None => return Err(self.error("unterminated string")),
                };
                match b {
                    b'"' => {
                        self.i += 1;
                        // The input is a &str and escapes add whole chars: valid UTF-8.
                        return String::from_utf8(out)
                            .map_err(|_| self.error("invalid UTF-8 in a string"));
                    }
                    b'\\' => {
                        self.i += 1;
                        let esc = match self.peek() {
                            Some(e) => e,
                            None => return Err(self.error("unterminated string")),
                        };
                        self.i += 1;
                        let c = match esc {
                            b'"' => '"',
                            b'\\' => '\\',
                            b'/' => '/',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'n' => '\n',
                            b'r' => '\r',
                            b't' => '\t',
                            b'u' => self.unicode_escape()?,
                            _ => {
                                self.i -= 1;
                                return Err(self.error("invalid escape in a string"));
                            }
                        };
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    0x00..=0x1f => {
                        return Err(self.error("control character in a string"));
                    }
                    _ => {
                        out.push(b);
                        self.i += 1;
                    }
                }
            }
        }

        /// After `\u`: one escaped char, joining a UTF-16 surrogate pair.
        fn unicode_escape(&mut self) -> Result<char, String> {
            let hi = self.hex4()?;
            let code = if (0xD800..0xDC00).contains(&hi) {
                if !(self.eat(b'\\') && self.eat(b'u')) {
                    return Err(self.error("expected a low surrogate `\\uDC00`..`\\uDFFF`"));
                }
                let lo = self.hex4()?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return Err(self.error("expected a low surrogate `\\uDC00`..`\\uDFFF`"));
                }
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            } else {
                hi
            };
            char::from_u32(code).ok_or_else(|| self.error("unpaired surrogate in a string"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: i64, paid: bool) -> Result<Order, String> {
        Ok(Order {
            order_id: id,
            paid: Some(paid),
        })
    }

    #[test]
    fn reads_orders() {
        assert_eq!(Order::from_json(r#"{"order_id": 42, "paid": false}"#), order(42, false));
        assert_eq!(Order::from_json(" {\"paid\":true,\n\"order_id\":7} "), order(7, true));
        assert_eq!(
            Order::from_json(r#"{"x": [1, {"y": "a\"\u00e9\ud83d\ude00"}], "order_id": -3, "paid": true, "z": null}"#),
            order(-3, true)
        );
        assert_eq!(
            Order::from_json(r#"{"order_id": 42}"#),
            Ok(Order {
                order_id: 42,
                paid: None
            })
        );
    }

    #[test]
    fn rejects_non_orders() {
        for bad in [
            "",
            "   ",
            "42",
            "[1]",
            "{",
            "{\"paid\": true}",
            "{\"order_id\": \"42\", \"paid\": true}",
            "{\"order_id\": 4.5, \"paid\": true}",
            "{\"order_id\": 42, \"paid\": 0}",
            "{\"order_id\": 42, \"paid\": false} x",
            "{\"order_id\": 042, \"paid\": false}",
            "{\"order_id\": 1, \"order_id\": 2, \"paid\": false}",
            "{\"order_id\": 99999999999999999999, \"paid\": false}",
            "{'order_id': 1, 'paid': false}",
            "{\"a\": \"\\ud800\", \"order_id\": 1, \"paid\": false}",
        ] {
            assert!(Order::from_json(bad).is_err(), "accepted {:?}", bad);
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(Order::from_json(&deep).unwrap_err().contains("nested too deeply"));
    }
}
