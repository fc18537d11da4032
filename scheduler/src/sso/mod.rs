//! Sign-in with the company's directory (SPEC §14): who a directory says a user is, and
//! what the node's rules make of the groups it names.
//!
//! - [`Rule`]: one `--sso-map GROUP=ROLE[:APPS]` — members of a group get a role, scoped to
//!   apps. A user in several mapped groups gets the highest role, and the apps of the rules
//!   that gave it (`*` if one of them gives every app); in none, no access.
//! - [`ldap`]: the LDAP directory (a bind DN, a user search, LDAPS or StartTLS, groups by
//!   the user's `memberOf` or by a group search).
//! - [`oidc`]: an OpenID provider (the authorization-code flow with PKCE; groups from a
//!   claim of the ID token).
//!
//! The use cases that sign users in (`usecase::users::sign_in_with_password`, and
//! `sign_in_with_provider` after [`oidc::Provider::finish`]) keep the user (source `ldap`
//! with its DN, or `oidc` with its `sub`) with what [`grant`] gives it at each sign-in.

pub mod ldap;
pub mod oidc;

use std::sync::Arc;

use crate::access::{Apps, Role};

/// The directory and the provider of the node's settings, those it signs users in through.
#[allow(clippy::type_complexity)]
pub fn of(
    config: &crate::config::Config,
) -> anyhow::Result<(Option<Arc<ldap::Directory>>, Option<Arc<oidc::Provider>>)> {
    Ok((ldap::Directory::of(config)?, oidc::Provider::of(config)?))
}

/// Says in the log, once each answered (or did not), whether sign-in through the directory
/// and through the provider works.
pub fn announce(directory: Option<Arc<ldap::Directory>>, provider: Option<Arc<oidc::Provider>>) {
    ldap::Directory::announce(directory);
    oidc::Provider::announce(provider);
}

/// One mapping rule: members of `group` get `role` on `apps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// A group's name (its `cn`) or its whole DN; compared without regard to case.
    pub group: String,
    pub role: Role,
    pub apps: Apps,
}

impl Rule {
    /// `GROUP=ROLE` (every app) or `GROUP=ROLE:APP,APP` — `ops=operator:orders,billing`,
    /// `platform=admin`, `cn=auditors,ou=groups,dc=corp=viewer:*`. The role is after the
    /// last `=`, so a group named by its DN keeps its own.
    pub fn parse(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        let Some((group, grant)) = text.rsplit_once('=') else {
            return Err(format!(
                "`{text}`: expected GROUP=ROLE or GROUP=ROLE:APP,APP (e.g. ops=operator:orders)"
            ));
        };
        let group = group.trim();
        if group.is_empty() {
            return Err(format!("`{text}`: the group is empty"));
        }
        let (role, apps) = match grant.split_once(':') {
            Some((role, apps)) => (role, apps),
            None => (grant, "*"),
        };
        let role = Role::parse(role).map_err(|e| format!("`{text}`: {e}"))?;
        let apps = Apps::parse(apps).map_err(|e| format!("`{text}`: {e}"))?;
        if role == Role::Admin && apps != Apps::All {
            return Err(format!(
                "`{text}`: an admin sees every app; leave the apps out"
            ));
        }
        Ok(Rule {
            group: group.to_owned(),
            role,
            apps,
        })
    }

    /// Does a group the directory named (its name or its DN) match this rule?
    fn matches(&self, group: &Group) -> bool {
        self.group.eq_ignore_ascii_case(&group.name) || self.group.eq_ignore_ascii_case(&group.dn)
    }
}

/// A group a directory says a user is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its DN (`cn=ops,ou=groups,dc=corp`).
    pub dn: String,
    /// Its name: the value of its DN's first part (`ops`).
    pub name: String,
}

impl Group {
    /// A group a provider names by a plain name (a value of its groups claim).
    pub fn named(name: &str) -> Group {
        Group {
            dn: name.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The group of DN `dn`, named by the value of its first part.
    pub fn of_dn(dn: &str) -> Group {
        let first = dn.split(',').next().unwrap_or(dn);
        let name = first.split_once('=').map_or(first, |(_, v)| v).trim();
        Group {
            dn: dn.trim().to_owned(),
            name: name.to_owned(),
        }
    }
}

/// Who a directory says signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Where it signed in: `ldap` or `oidc`.
    pub provider: &'static str,
    /// The user's identity there: the entry's DN, or the ID token's `sub`.
    pub subject: String,
    pub groups: Vec<Group>,
}

/// `groups` as a user's row keeps them: a JSON array of their names (a DN for LDAP's).
pub fn groups_to_json(groups: &[Group]) -> String {
    serde_json::to_string(&groups.iter().map(|g| g.dn.as_str()).collect::<Vec<_>>())
        .expect("strings serialize")
}

/// The groups of a provider's user as its row keeps them ([`groups_to_json`]); nothing
/// from text that is not.
pub fn groups_from_json(text: &str) -> Vec<Group> {
    serde_json::from_str::<Vec<String>>(text)
        .unwrap_or_default()
        .iter()
        .map(|name| Group::named(name))
        .collect()
}

/// What the rules give a member of `groups`: the highest role any matching rule gives, on
/// the union of those rules' apps; `None` when no rule matches.
pub fn grant(rules: &[Rule], groups: &[Group]) -> Option<(Role, Apps)> {
    let matching: Vec<&Rule> = rules
        .iter()
        .filter(|r| groups.iter().any(|g| r.matches(g)))
        .collect();
    let role = matching.iter().map(|r| r.role).max()?;
    let mut names: Vec<String> = Vec::new();
    for rule in matching.iter().filter(|r| r.role == role) {
        match &rule.apps {
            Apps::All => return Some((role, Apps::All)),
            Apps::Only(apps) => names.extend(apps.iter().cloned()),
        }
    }
    names.sort();
    names.dedup();
    Some((role, Apps::Only(names)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(dns: &[&str]) -> Vec<Group> {
        dns.iter().map(|d| Group::of_dn(d)).collect()
    }

    #[test]
    fn rules_parse_with_their_apps_and_name_what_is_wrong() {
        let r = Rule::parse("ops=operator:orders,billing").unwrap();
        assert_eq!(r.group, "ops");
        assert_eq!(r.role, Role::Operator);
        assert_eq!(r.apps, Apps::Only(vec!["billing".into(), "orders".into()]));
        assert_eq!(Rule::parse("platform=admin").unwrap().apps, Apps::All);
        let by_dn = Rule::parse("cn=auditors,ou=groups,dc=corp=viewer:*").unwrap();
        assert_eq!(by_dn.group, "cn=auditors,ou=groups,dc=corp");
        assert_eq!(by_dn.role, Role::Viewer);
        for (bad, says) in [
            ("ops", "expected GROUP=ROLE"),
            ("=viewer", "the group is empty"),
            ("ops=boss", "role `boss`"),
            ("ops=operator:", "name at least one app"),
            ("ops=admin:orders", "an admin sees every app"),
        ] {
            let e = Rule::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_highest_role_wins_with_the_apps_of_its_rules() {
        let rules: Vec<Rule> = [
            "devs=viewer:*",
            "ops=operator:orders",
            "cn=billing-ops,ou=groups,dc=corp=operator:billing",
            "platform=admin",
        ]
        .iter()
        .map(|r| Rule::parse(r).unwrap())
        .collect();
        let in_ = |dns: &[&str]| grant(&rules, &groups(dns));
        assert_eq!(in_(&["cn=nobody,dc=corp"]), None);
        assert_eq!(in_(&["cn=devs,dc=corp"]), Some((Role::Viewer, Apps::All)));
        assert_eq!(
            in_(&[
                "cn=devs,dc=corp",
                "cn=OPS,ou=groups,dc=corp",
                "cn=billing-ops,ou=groups,dc=corp"
            ]),
            Some((
                Role::Operator,
                Apps::Only(vec!["billing".into(), "orders".into()])
            ))
        );
        assert_eq!(
            in_(&["cn=ops,dc=corp", "cn=platform,dc=corp"]),
            Some((Role::Admin, Apps::All))
        );
    }
}
