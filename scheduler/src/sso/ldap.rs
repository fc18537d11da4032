//! The LDAP directory: checks a user's password by binding as the user, after finding the
//! user's entry with the node's own bind DN, and reads the user's groups.
//!
//! One connection per sign-in (sign-ins are rare; a pooled connection would hold a bind
//! that must not leak between users). `ldaps://` is TLS from the first byte; `ldap://`
//! with StartTLS upgrades before anything is sent, and plain `ldap://` without it is
//! refused at start-up unless the server is on a loopback address (a password must never
//! cross a network in clear). Certificates are checked against the system's roots and the
//! node's `--tls-ca`. The password is never logged or stored.

use std::sync::Arc;
use std::time::Duration;

use ldap3::{LdapConnAsync, LdapConnSettings, Scope, SearchEntry, ldap_escape};

use super::{Group, Identity};

/// How long one directory operation (connect, bind, search) may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The result code of a bind with a wrong password (RFC 4511).
const INVALID_CREDENTIALS: u32 = 49;
/// The result code of a read of an entry that does not exist.
const NO_SUCH_OBJECT: u32 = 32;

/// Where and how the node asks the directory (the `--ldap-*` flags).
#[derive(Clone, PartialEq, Eq)]
pub struct Settings {
    /// `ldap://host:389` or `ldaps://host:636`.
    pub url: String,
    /// Upgrade an `ldap://` connection with StartTLS before binding.
    pub start_tls: bool,
    /// The node's own identity, to search for users (and groups).
    pub bind_dn: String,
    pub bind_password: String,
    /// Where users are, and the filter that finds one: `{user}` stands for the name typed
    /// at sign-in, escaped (RFC 4515).
    pub user_base: String,
    pub user_filter: String,
    /// Groups by a search under this base with `group_filter` (`{dn}` stands for the user's
    /// DN, `{user}` for the name), or — without a base — by the user entry's `memberOf`.
    pub group_base: Option<String>,
    pub group_filter: String,
}

impl std::fmt::Debug for Settings {
    /// Everything but the bind password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("start_tls", &self.start_tls)
            .field("bind_dn", &self.bind_dn)
            .field("user_base", &self.user_base)
            .field("user_filter", &self.user_filter)
            .field("group_base", &self.group_base)
            .field("group_filter", &self.group_filter)
            .finish()
    }
}

impl Settings {
    /// The mistakes of these settings, each naming its flag; none when they can be used.
    pub fn check(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        match url::Url::parse(&self.url) {
            Ok(u) if u.scheme() == "ldaps" => {
                if self.start_tls {
                    wrong.push(
                        "--ldap-start-tls: an ldaps:// URL is TLS already; StartTLS is for ldap://"
                            .to_owned(),
                    );
                }
            }
            Ok(u) if u.scheme() == "ldap" => {
                let loopback = u
                    .host_str()
                    .and_then(|h| h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok())
                    .is_some_and(|ip| ip.is_loopback());
                if !self.start_tls && !loopback {
                    wrong.push(format!(
                        "--ldap-url `{}`: passwords would cross the network in clear; use \
                         ldaps:// or --ldap-start-tls",
                        self.url
                    ));
                }
            }
            Ok(u) => wrong.push(format!(
                "--ldap-url `{}`: the scheme is `{}`; expected ldap:// or ldaps://",
                self.url,
                u.scheme()
            )),
            Err(e) => wrong.push(format!("--ldap-url `{}`: {e}", self.url)),
        }
        if !self.user_filter.contains("{user}") {
            wrong.push(format!(
                "--ldap-user-filter `{}`: it must contain {{user}} (the name typed at sign-in)",
                self.user_filter
            ));
        }
        for (flag, filter) in [
            ("--ldap-user-filter", &self.user_filter),
            ("--ldap-group-filter", &self.group_filter),
        ] {
            if !(filter.starts_with('(') && filter.ends_with(')')) {
                wrong.push(format!(
                    "{flag} `{filter}`: an LDAP filter is in parentheses, e.g. (uid={{user}})"
                ));
            }
        }
        if self.group_base.is_some()
            && !(self.group_filter.contains("{dn}") || self.group_filter.contains("{user}"))
        {
            wrong.push(format!(
                "--ldap-group-filter `{}`: it must contain {{dn}} or {{user}}, or every user \
                 would be in every group it finds",
                self.group_filter
            ));
        }
        if self.user_base.trim().is_empty() {
            wrong.push("--ldap-user-base: name where the users are (ou=people,dc=corp)".into());
        }
        wrong
    }
}

/// Why the directory could not say yes or no.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// The directory, with the TLS client settings the node trusts.
pub struct Directory {
    settings: Settings,
    tls: Arc<rustls::ClientConfig>,
}

impl Directory {
    pub fn new(settings: Settings, tls: Arc<rustls::ClientConfig>) -> Directory {
        Directory { settings, tls }
    }

    /// The directory of the node's settings, if it signs users in through one.
    pub fn of(config: &crate::config::Config) -> anyhow::Result<Option<Arc<Directory>>> {
        use anyhow::Context;
        let Some(settings) = &config.ldap else {
            return Ok(None);
        };
        let tls = config
            .tls
            .client_config()
            .context("the TLS settings of the LDAP directory")?;
        Ok(Some(Arc::new(Directory::new(settings.clone(), tls))))
    }

    /// Says in the log, once the directory answered (or did not), whether directory
    /// sign-in works: if it does not, local users still sign in, and directory users learn
    /// why from the operator rather than by trying.
    pub fn announce(directory: Option<Arc<Self>>) {
        let Some(directory) = directory else {
            return;
        };
        tokio::spawn(async move {
            match directory.probe().await {
                Ok(()) => tracing::info!(url = %directory.settings.url, "LDAP sign-in is on"),
                Err(e) => tracing::warn!(
                    url = %directory.settings.url,
                    error = %e,
                    "LDAP sign-in is configured but the directory does not answer: directory \
                     users cannot sign in until it does; local users can"
                ),
            }
        });
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Who `user` is if `password` is theirs: `Ok(None)` for an unknown user or a wrong
    /// password (alike: the answer says nothing of which), `Err` when the directory could
    /// not be asked (down, refused the node's own bind, TLS failed).
    pub async fn authenticate(
        &self,
        user: &str,
        password: &str,
    ) -> Result<Option<Identity>, Unavailable> {
        // An empty password is an unauthenticated bind, which directories accept as anyone.
        if user.trim().is_empty() || password.is_empty() {
            return Ok(None);
        }
        let s = &self.settings;
        let mut ldap = self.bound().await?;
        let filter = s.user_filter.replace("{user}", &ldap_escape(user));
        let attrs = match s.group_base {
            Some(_) => vec!["1.1"],
            None => vec!["memberOf"],
        };
        let (entries, _) = ldap
            .with_timeout(TIMEOUT)
            .search(&s.user_base, Scope::Subtree, &filter, attrs)
            .await
            .and_then(|r| r.success())
            .map_err(|e| unavailable("searching for the user", e))?;
        let mut entries: Vec<SearchEntry> =
            entries.into_iter().map(SearchEntry::construct).collect();
        if entries.len() != 1 {
            if entries.len() > 1 {
                tracing::warn!(
                    filter,
                    found = entries.len(),
                    "--ldap-user-filter finds several entries for one name; nobody signs in with it"
                );
            }
            let _ = ldap.unbind().await;
            return Ok(None);
        }
        let entry = entries.remove(0);
        let bound = ldap
            .with_timeout(TIMEOUT)
            .simple_bind(&entry.dn, password)
            .await
            .map_err(|e| unavailable("binding as the user", e))?;
        if bound.rc == INVALID_CREDENTIALS {
            let _ = ldap.unbind().await;
            return Ok(None);
        }
        bound
            .success()
            .map_err(|e| unavailable("binding as the user", e))?;
        let groups = self.groups(&mut ldap, &entry, user, true).await?;
        let _ = ldap.unbind().await;
        Ok(Some(Identity {
            provider: "ldap",
            subject: entry.dn,
            groups,
        }))
    }

    /// The groups the directory gives the user of entry `subject` (named `user` at
    /// sign-in) now, asked with the node's own identity (no password): when one of the
    /// user's API tokens is used. `Ok(None)`: the entry is gone.
    pub async fn groups_of(
        &self,
        subject: &str,
        user: &str,
    ) -> Result<Option<Vec<Group>>, Unavailable> {
        let mut ldap = self.bound().await?;
        let attrs = match self.settings.group_base {
            Some(_) => vec!["1.1"],
            None => vec!["memberOf"],
        };
        let found = ldap
            .with_timeout(TIMEOUT)
            .search(subject, Scope::Base, "(objectClass=*)", attrs)
            .await
            .map_err(|e| unavailable("reading the user's entry", e))?;
        if found.1.rc == NO_SUCH_OBJECT {
            let _ = ldap.unbind().await;
            return Ok(None);
        }
        let (entries, _) = found
            .success()
            .map_err(|e| unavailable("reading the user's entry", e))?;
        let Some(entry) = entries.into_iter().next().map(SearchEntry::construct) else {
            let _ = ldap.unbind().await;
            return Ok(None);
        };
        let groups = self.groups(&mut ldap, &entry, user, false).await?;
        let _ = ldap.unbind().await;
        Ok(Some(groups))
    }

    /// The groups of user `entry` (named `user`): its `memberOf`, or a search under the
    /// group base as the node's identity (`rebind`: the connection is bound as the user).
    async fn groups(
        &self,
        ldap: &mut ldap3::Ldap,
        entry: &SearchEntry,
        user: &str,
        rebind: bool,
    ) -> Result<Vec<Group>, Unavailable> {
        let s = &self.settings;
        let Some(base) = &s.group_base else {
            return Ok(entry
                .attrs
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("memberOf"))
                .flat_map(|(_, v)| v.iter().map(|dn| Group::of_dn(dn)))
                .collect());
        };
        if rebind {
            // A user may not be allowed to read groups: the node searches as itself.
            ldap.with_timeout(TIMEOUT)
                .simple_bind(&s.bind_dn, &s.bind_password)
                .await
                .and_then(|r| r.success())
                .map_err(|e| unavailable("binding as --ldap-bind-dn", e))?;
        }
        let filter = s
            .group_filter
            .replace("{dn}", &ldap_escape(&entry.dn))
            .replace("{user}", &ldap_escape(user));
        let (found, _) = ldap
            .with_timeout(TIMEOUT)
            .search(base, Scope::Subtree, &filter, vec!["1.1"])
            .await
            .and_then(|r| r.success())
            .map_err(|e| unavailable("searching for the user's groups", e))?;
        Ok(found
            .into_iter()
            .map(|e| Group::of_dn(&SearchEntry::construct(e).dn))
            .collect())
    }

    /// Whether the directory answers and takes the node's own bind (at start-up, and for
    /// `/readyz`-style checks): the reason when it does not.
    pub async fn probe(&self) -> Result<(), Unavailable> {
        let mut ldap = self.bound().await?;
        let _ = ldap.unbind().await;
        Ok(())
    }

    /// A connection bound as `--ldap-bind-dn`.
    async fn bound(&self) -> Result<ldap3::Ldap, Unavailable> {
        let s = &self.settings;
        let settings = LdapConnSettings::new()
            .set_conn_timeout(TIMEOUT)
            .set_starttls(s.start_tls)
            .set_config(self.tls.clone());
        let (conn, mut ldap) = LdapConnAsync::with_settings(settings, &s.url)
            .await
            .map_err(|e| unavailable(&format!("connecting to {}", s.url), e))?;
        tokio::spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::debug!(error = %e, "LDAP connection ended");
            }
        });
        ldap.with_timeout(TIMEOUT)
            .simple_bind(&s.bind_dn, &s.bind_password)
            .await
            .and_then(|r| r.success())
            .map_err(|e| unavailable("binding as --ldap-bind-dn", e))?;
        Ok(ldap)
    }
}

fn unavailable(doing: &str, e: ldap3::LdapError) -> Unavailable {
    Unavailable(format!("the directory failed {doing}: {e}"))
}
