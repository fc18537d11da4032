//! A job's HTTP allow-list: which URLs its plugin may reach through the `rota` import
//! `http_request`. Checked by the scheduler when a job is saved (so a bad entry is a 422
//! naming it) and by the executor before every request and redirect.
//!
//! An entry is an origin (`https://api.example.com`, `http://10.0.0.5:8080`) or a URL
//! prefix (`https://api.example.com/v1/orders`). A URL is allowed when its scheme, host
//! and port (the scheme's default port if none is written) equal an entry's, and its path
//! is the entry's path or below it (`/v1/orders` allows `/v1/orders` and `/v1/orders/42`,
//! not `/v1/orders-archive`). Query strings do not matter. Hosts compare as the URL
//! standard normalises them (lower case, IDNA), so `HTTP://API.Example.com` is the same
//! origin; no DNS is involved, so an allowed name is allowed whatever it resolves to.

use url::Url;

/// Most entries in one list.
pub const MAX_ENTRIES: usize = 32;
/// Longest entry, in bytes.
pub const MAX_ENTRY_LEN: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllowList {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    scheme: String,
    host: String,
    port: u16,
    /// `/` for an origin; else the prefix without a trailing `/`.
    path: String,
}

impl AllowList {
    /// Parses a list; the error names the entry at fault and why.
    pub fn parse(entries: &[String]) -> Result<AllowList, String> {
        if entries.len() > MAX_ENTRIES {
            return Err(format!(
                "has {} entries; at most {MAX_ENTRIES} are allowed",
                entries.len()
            ));
        }
        let entries = entries
            .iter()
            .enumerate()
            .map(|(i, e)| Entry::parse(e).map_err(|why| format!("entry {i} (`{e}`) {why}")))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a request to `url` is allowed.
    pub fn allows(&self, url: &Url) -> bool {
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return false;
        };
        self.entries.iter().any(|e| {
            e.scheme == url.scheme() && e.host == host && e.port == port && e.covers(url.path())
        })
    }
}

impl Entry {
    fn parse(text: &str) -> Result<Entry, String> {
        if text.len() > MAX_ENTRY_LEN {
            return Err(format!("is longer than {MAX_ENTRY_LEN} bytes"));
        }
        let url = Url::parse(text.trim()).map_err(|e| format!("is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "has scheme `{}`; only http and https URLs can be allowed",
                url.scheme()
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("contains credentials; put them in a secret instead".into());
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err("has a query or fragment; allow an origin or a path prefix".into());
        }
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
            return Err("has no host".into());
        };
        let path = match url.path().trim_end_matches('/') {
            "" => "/".to_owned(),
            p => p.to_owned(),
        };
        Ok(Entry {
            scheme: url.scheme().to_owned(),
            host: host.to_owned(),
            port,
            path,
        })
    }

    fn covers(&self, path: &str) -> bool {
        if self.path == "/" {
            return true;
        }
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowList {
        AllowList::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn allows(list: &AllowList, url: &str) -> bool {
        list.allows(&Url::parse(url).unwrap())
    }

    #[test]
    fn origins_allow_every_path_of_exactly_that_origin() {
        let l = list(&["http://127.0.0.1:8080", "https://API.example.com"]);
        assert!(allows(&l, "http://127.0.0.1:8080/orders/42?x=1"));
        assert!(allows(&l, "https://api.example.com/"));
        assert!(allows(&l, "https://api.example.com:443/v1"));
        assert!(!allows(&l, "http://127.0.0.1:8081/orders"), "another port");
        assert!(!allows(&l, "http://api.example.com/"), "another scheme");
        assert!(
            !allows(&l, "https://api.example.com.evil.net/"),
            "another host"
        );
        assert!(!allows(&l, "https://evil.net/?https://api.example.com"));
    }

    #[test]
    fn prefixes_allow_their_path_and_below_only() {
        let l = list(&["https://api.example.com/v1/orders/"]);
        assert!(allows(&l, "https://api.example.com/v1/orders"));
        assert!(allows(&l, "https://api.example.com/v1/orders/42"));
        assert!(!allows(&l, "https://api.example.com/v1/orders-archive"));
        assert!(!allows(&l, "https://api.example.com/v1"));
        assert!(!allows(&l, "https://api.example.com/v1/orders/../users"));
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        let l = AllowList::default();
        assert!(l.is_empty());
        assert!(!allows(&l, "http://127.0.0.1/"));
    }

    #[test]
    fn bad_entries_are_named() {
        for (entry, why) in [
            ("ftp://x.org", "only http and https"),
            ("not a url", "is not a URL"),
            ("https://user:pw@x.org", "credentials"),
            ("https://x.org/?q=1", "query"),
            ("file:///etc/passwd", "only http and https"),
        ] {
            let e = AllowList::parse(&["http://ok.org".into(), entry.into()]).unwrap_err();
            assert!(e.starts_with(&format!("entry 1 (`{entry}`)")), "{e}");
            assert!(e.contains(why), "{e}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("http://h{i}.org")).collect();
        assert!(AllowList::parse(&many).unwrap_err().contains("at most 32"));
    }
}
