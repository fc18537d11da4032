//! Who may do what: roles, the apps a user is scoped to, and the principal behind a request.
//!
//! | role | reads | changes jobs, tasks and runs; uploads plugins | deletes plugins; users; everyone's tokens |
//! |---|---|---|---|
//! | `viewer` | its apps | — | — |
//! | `operator` | its apps | its apps | — |
//! | `admin` | every app | every app | yes |
//!
//! A user's apps are `*` (every app) or a list of app names; an admin is never scoped.
//! Plugins are shared by all apps, so every principal may list them; executors, jobs,
//! tasks, runs, secrets and the dashboard's counts are limited to the user's apps. The
//! node's own API token (`ROTA_API_TOKEN`) acts as an admin named `root`; a token issued to
//! a user acts as that user, with the user's role and apps as they are when it is used.

use std::fmt;

use crate::names::excerpt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Admin, Role::Operator, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Result<Role, String> {
        match text.trim() {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "role `{}` is not one of admin, operator, viewer",
                excerpt(other)
            )),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The apps a user may see and act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Apps {
    All,
    /// Sorted, without duplicates.
    Only(Vec<String>),
}

/// Most apps one user may be scoped to.
pub const MAX_SCOPED_APPS: usize = 100;
/// Longest stored list (the column's width).
const MAX_APPS_TEXT: usize = 4000;

impl Apps {
    /// `*`, or app names separated by commas, spaces or new lines.
    pub fn parse(text: &str) -> Result<Apps, String> {
        let mut names: Vec<String> = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if names.iter().any(|n| n == "*") {
            return Ok(Apps::All);
        }
        if names.is_empty() {
            return Err("apps: name at least one app, or `*` for every app".into());
        }
        if let Some(long) = names.iter().find(|n| n.chars().count() > 200) {
            return Err(format!(
                "apps: `{}` is longer than 200 characters",
                excerpt(long)
            ));
        }
        names.sort();
        names.dedup();
        if names.len() > MAX_SCOPED_APPS {
            return Err(format!(
                "apps: at most {MAX_SCOPED_APPS} apps, or `*` for every app"
            ));
        }
        let apps = Apps::Only(names);
        if apps.to_text().chars().count() > MAX_APPS_TEXT {
            return Err(format!(
                "apps: the list is longer than {MAX_APPS_TEXT} characters"
            ));
        }
        Ok(apps)
    }

    /// What the store keeps: `*` or the names joined by commas.
    pub fn to_text(&self) -> String {
        match self {
            Apps::All => "*".into(),
            Apps::Only(names) => names.join(","),
        }
    }

    pub fn contains(&self, app: &str) -> bool {
        match self {
            Apps::All => true,
            Apps::Only(names) => names.binary_search_by(|n| n.as_str().cmp(app)).is_ok(),
        }
    }
}

/// A principal may not do what it asked. The use cases answer it as their own not-found
/// or forbidden (`usecase::Error`).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Out of the principal's apps: told like something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// In its apps, without the role.
    #[error("{0}")]
    Forbidden(String),
}

/// What a request does to what it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Read,
    Change,
}

/// Who is asking: a console user, the user behind an API token, or `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    pub apps: Apps,
}

impl Principal {
    /// The node's configured API token.
    pub fn root() -> Principal {
        Principal {
            name: "root".into(),
            role: Role::Admin,
            apps: Apps::All,
        }
    }

    /// A stored user's principal; an unreadable role or scope grants the least.
    pub fn of_user(name: &str, role: &str, apps: &str) -> Principal {
        let role = Role::parse(role).unwrap_or(Role::Viewer);
        let apps = if role == Role::Admin {
            Apps::All
        } else {
            Apps::parse(apps).unwrap_or(Apps::Only(Vec::new()))
        };
        Principal {
            name: name.to_owned(),
            role,
            apps,
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    pub fn sees(&self, app: &str) -> bool {
        self.is_admin() || self.apps.contains(app)
    }

    pub fn may_change(&self, app: &str) -> bool {
        self.role >= Role::Operator && self.sees(app)
    }

    /// The apps a listing must be limited to; `None` for all of them.
    pub fn app_filter(&self) -> Option<&[String]> {
        match (&self.apps, self.is_admin()) {
            (_, true) | (Apps::All, _) => None,
            (Apps::Only(names), false) => Some(names),
        }
    }

    /// May this principal read (or change) something of `app`? Out of its apps is a
    /// not-found naming `what`, as for something that does not exist, so a scoped user
    /// cannot learn what other apps hold; in them without the role to change, a 403.
    pub fn check(&self, app: &str, need: Need, what: &str) -> Result<(), Denied> {
        if !self.sees(app) {
            return Err(Denied::NotFound(format!("{what} not found")));
        }
        if need == Need::Change && !self.may_change(app) {
            return Err(Denied::Forbidden(format!(
                "`{}` is a {}: changing {what} needs the operator or admin role",
                self.name, self.role
            )));
        }
        Ok(())
    }

    /// Creating or moving something into `app`.
    pub fn check_app(&self, app: &str) -> Result<(), Denied> {
        if self.may_change(app) {
            return Ok(());
        }
        Err(Denied::Forbidden(if self.sees(app) {
            format!(
                "`{}` is a {}: changing app `{app}` needs the operator or admin role",
                self.name, self.role
            )
        } else {
            format!("`{}` has no access to app `{app}`", self.name)
        }))
    }

    /// Uploading a plugin: an operator of any app, or an admin.
    pub fn check_operator(&self, action: &str) -> Result<(), Denied> {
        if self.role >= Role::Operator {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "`{}` is a viewer: {action} needs the operator or admin role",
                self.name
            )))
        }
    }

    pub fn check_admin(&self, action: &str) -> Result<(), Denied> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "`{}` is a {}: {action} needs the admin role",
                self.name, self.role
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_scopes_decide_reads_and_changes() {
        let viewer = Principal::of_user("v", "viewer", "shop,billing");
        let operator = Principal::of_user("o", "operator", "shop");
        let admin = Principal::of_user("a", "admin", "shop");
        assert!(viewer.sees("billing") && !viewer.sees("hr"));
        assert!(!viewer.may_change("shop"));
        assert!(operator.may_change("shop") && !operator.may_change("billing"));
        assert!(admin.may_change("anything") && admin.app_filter().is_none());
        assert_eq!(
            viewer.app_filter(),
            Some(&["billing".to_owned(), "shop".to_owned()][..])
        );
        assert!(matches!(
            operator.check("billing", Need::Change, "job `x`"),
            Err(Denied::NotFound(m)) if m == "job `x` not found"
        ));
        assert!(viewer.check("shop", Need::Read, "job `x`").is_ok());
        assert!(matches!(
            viewer.check("shop", Need::Change, "job `x`"),
            Err(Denied::Forbidden(m)) if m.contains("viewer")
        ));
        assert!(operator.check_app("shop").is_ok());
        assert!(matches!(
            operator.check_app("hr"),
            Err(Denied::Forbidden(m)) if m.contains("no access to app `hr`")
        ));
        assert!(operator.check_admin("deleting a plugin").is_err());
        assert!(Principal::root().check_admin("anything").is_ok());
    }

    #[test]
    fn app_scopes_parse_and_print() {
        assert_eq!(Apps::parse(" * ").unwrap(), Apps::All);
        assert_eq!(
            Apps::parse("shop, billing\nshop").unwrap(),
            Apps::Only(vec!["billing".into(), "shop".into()])
        );
        assert_eq!(Apps::parse("b,a").unwrap().to_text(), "a,b");
        assert!(Apps::parse(" , ").unwrap_err().contains("at least one app"));
        assert!(
            Role::parse("root")
                .unwrap_err()
                .contains("admin, operator, viewer")
        );
        // Whatever is stored, an unreadable value grants the least.
        assert_eq!(Principal::of_user("x", "??", "*").role, Role::Viewer);
        assert!(!Principal::of_user("x", "viewer", "").sees("shop"));
    }
}
