//! Users and their API tokens: who may sign in, with which role over which apps, and the
//! tokens each holds. Managing users is an admin's; everyone manages their own tokens (an
//! admin anyone's). Every change is audited with its actor.

use super::{Error, Result, validate};
use crate::access::{Apps, Principal, Role};
use crate::credentials::{hash_password, random_token, token_hash};
use crate::ports::Ports;
use crate::store::{self, ApiToken, TokenUser, User};

/// How long a console sign-in lasts.
pub const SESSION_MS: crate::model::Millis = 12 * 3600 * 1000;

/// The shortest password a user may choose.
pub const MIN_PASSWORD_CHARS: usize = 10;

/// Every user, for an admin.
pub async fn list(ports: &Ports, who: &Principal) -> Result<Vec<User>> {
    who.check_admin("managing users")?;
    Ok(ports.store().list_users().await?)
}

/// A new user `name` with `password`, `role` over `apps` (an admin's apps are all).
/// A taken name is a conflict naming the field.
pub async fn create(
    ports: &Ports,
    who: &Principal,
    name: &str,
    password: &str,
    role: Role,
    apps: Apps,
) -> Result<()> {
    who.check_admin("managing users")?;
    validate::name("name", name)?;
    check_password("password", password)?;
    let apps = if role == Role::Admin { Apps::All } else { apps };
    let hash = hash_password(password.to_owned())
        .await
        .map_err(Error::Internal)?;
    match ports
        .store()
        .insert_user(
            name,
            &hash,
            role.as_str(),
            &apps.to_text(),
            ports.clock().now_ms(),
        )
        .await
    {
        Ok(_) => {}
        Err(store::Error::Conflict(_)) => {
            return Err(Error::Conflict(format!("name: a user `{name}` exists")));
        }
        Err(e) => return Err(e.into()),
    }
    ports
        .audit(&who.name, "create user", &format!("{name} ({role})"))
        .await;
    Ok(())
}

/// A password long enough, or a 422 about `field`.
pub fn check_password(field: &str, password: &str) -> Result<()> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(validate::invalid(
            field,
            format!("use at least {MIN_PASSWORD_CHARS} characters"),
        ));
    }
    Ok(())
}

/// Gives user `id` `role` over `apps`. The last admin keeps the role.
pub async fn set_access(
    ports: &Ports,
    who: &Principal,
    id: i64,
    role: Role,
    apps: Apps,
) -> Result<()> {
    who.check_admin("managing users")?;
    let store = ports.store();
    let user = store.get_user(id).await?;
    if user.source != "local" {
        return Err(Error::Unprocessable(format!(
            "user `{}` signs in with the {} directory: its groups set its role and apps \
             (--sso-map), at each sign-in",
            user.name, user.source
        )));
    }
    if role != Role::Admin {
        keep_an_admin(ports, &user).await?;
    }
    let apps = if role == Role::Admin { Apps::All } else { apps };
    store
        .set_user_access(id, role.as_str(), &apps.to_text())
        .await?;
    let target = format!("{} → {role} of {}", user.name, apps.to_text());
    ports.audit(&who.name, "change user access", &target).await;
    Ok(())
}

/// Deletes user `id`: not oneself, not the last admin.
pub async fn delete(ports: &Ports, who: &Principal, id: i64) -> Result<()> {
    who.check_admin("managing users")?;
    let store = ports.store();
    let user = store.get_user(id).await?;
    if user.name == who.name {
        return Err(Error::Conflict("you cannot delete yourself".into()));
    }
    keep_an_admin(ports, &user).await?;
    store.delete_user(id).await?;
    ports.audit(&who.name, "delete user", &user.name).await;
    Ok(())
}

/// The last admin cannot be demoted or deleted: nobody could manage users after.
async fn keep_an_admin(ports: &Ports, user: &User) -> Result<()> {
    if user.principal().is_admin() {
        let admins = ports
            .store()
            .list_users()
            .await?
            .iter()
            .filter(|u| u.principal().is_admin())
            .count();
        if admins <= 1 {
            return Err(Error::Conflict(format!(
                "`{}` is the only admin; make another user admin first",
                user.name
            )));
        }
    }
    Ok(())
}

/// Sets user `user_id`'s (who is `who`) password to `new` (the caller checked the
/// current one) and ends their sessions but the one of hash `keep_session`.
pub async fn change_password(
    ports: &Ports,
    who: &Principal,
    user_id: i64,
    new: &str,
    keep_session: &str,
) -> Result<()> {
    check_password("new", new)?;
    let hash = hash_password(new.to_owned())
        .await
        .map_err(Error::Internal)?;
    ports
        .store()
        .set_password(user_id, &hash, keep_session)
        .await?;
    ports.audit(&who.name, "change password", &who.name).await;
    Ok(())
}

/// The tokens `who` (user `user_id`) may see: their own; an admin's, everyone's.
pub async fn tokens(ports: &Ports, who: &Principal, user_id: i64) -> Result<Vec<ApiToken>> {
    let whose = (!who.is_admin()).then_some(user_id);
    Ok(ports.store().list_tokens(whose).await?)
}

/// Issues user `user_id` (who is `who`) a token named `name`: `rota_` and 40 hex digits,
/// returned this once; only its hash is stored.
pub async fn create_token(
    ports: &Ports,
    who: &Principal,
    user_id: i64,
    name: &str,
) -> Result<String> {
    validate::name("name", name)?;
    let token = format!("rota_{}", random_token(20));
    ports
        .store()
        .insert_token(user_id, name, &token_hash(&token), ports.clock().now_ms())
        .await?;
    ports.audit(&who.name, "create API token", name).await;
    Ok(token)
}

/// Revokes token `id`: one of `who`'s own (user `user_id`), or anyone's for an admin.
pub async fn revoke_token(ports: &Ports, who: &Principal, user_id: i64, id: i64) -> Result<()> {
    let whose = (!who.is_admin()).then_some(user_id);
    if !ports
        .store()
        .revoke_token(id, whose, ports.clock().now_ms())
        .await?
    {
        return Err(Error::NotFound(format!("no live token {id} of yours")));
    }
    ports
        .audit(&who.name, "revoke API token", &id.to_string())
        .await;
    Ok(())
}

/// The user behind an API token, by the token's hash; `None` for an unknown or revoked
/// one. A directory user's, with the access its groups give now ([`recheck`]).
pub async fn token_user(ports: &Ports, hash: &str) -> Result<Option<TokenUser>> {
    let Some(mut user) = ports.store().token_user(hash).await? else {
        return Ok(None);
    };
    recheck(ports, &mut user).await?;
    Ok(Some(TokenUser {
        name: user.name,
        role: user.role,
        apps: user.apps,
    }))
}

/// For a directory or provider user, what its groups give now, kept: a token or a session
/// stops acting for someone who left a group (or the company), or whom the node's
/// `--sso-map` no longer lets in, without waiting for their next sign-in.
/// - LDAP: the directory is asked again once it last said so longer ago than the node's
///   `--ldap-recheck-ms` (five minutes); with the directory down, the last answer holds.
/// - OIDC: a provider cannot be asked between sign-ins; the groups it named at the last
///   one are mapped again by the node's rules now, for `--oidc-max-age-ms` (a week) after
///   it. A user who has not signed in since may do nothing until they do: someone removed
///   at the provider keeps no working token for longer.
///
/// With neither configured (any more), nothing vouches for the user: it may do nothing.
async fn recheck(ports: &Ports, user: &mut User) -> Result<()> {
    let now = ports.clock().now_ms();
    let vouched = match user.source.as_str() {
        "local" => return Ok(()),
        "oidc" => ports.provider().is_some(),
        _ => ports.directory().is_some(),
    };
    let stale = user.source == "oidc"
        && user
            .checked_at
            .is_none_or(|at| now - at >= ports.config().oidc_max_age_ms);
    let Some(subject) = user.subject.clone().filter(|_| vouched && !stale) else {
        user.role = Role::Viewer.as_str().into();
        user.apps = String::new();
        return Ok(());
    };
    let groups = if user.source == "oidc" {
        Some(crate::sso::groups_from_json(
            user.sso_groups.as_deref().unwrap_or("[]"),
        ))
    } else {
        if user
            .checked_at
            .is_some_and(|at| now - at < ports.config().ldap_recheck_ms)
        {
            return Ok(());
        }
        let directory = ports.directory().expect("vouched for by the directory");
        match directory.groups_of(&subject, &user.name).await {
            Ok(groups) => groups,
            Err(e) => {
                tracing::warn!(user = %user.name, error = %e, "the directory could not re-check a user's access; its last known access holds");
                return Ok(());
            }
        }
    };
    let (role, apps) = match groups.and_then(|g| crate::sso::grant(&ports.config().sso_rules, &g)) {
        Some((role, apps)) => (role.as_str().to_owned(), apps.to_text()),
        None => (Role::Viewer.as_str().to_owned(), String::new()),
    };
    let changed = (role.as_str(), apps.as_str()) != (user.role.as_str(), user.apps.as_str());
    // A provider's user is written only when the rules changed what it has, and keeps the
    // time of its last sign-in: nothing was asked of the provider.
    if user.source == "oidc" && !changed {
        return Ok(());
    }
    let checked_at = match user.source.as_str() {
        "oidc" => user.checked_at.unwrap_or(now),
        _ => now,
    };
    ports
        .store()
        .set_directory_access(user.id, &role, &apps, checked_at)
        .await?;
    user.checked_at = Some(checked_at);
    if changed {
        ports
            .audit(
                &user.name,
                match user.source.as_str() {
                    "ldap" => "access changed by the directory",
                    _ => "access changed by the sign-in rules",
                },
                &format!(
                    "{}:{subject}: {} on {} → {role} on {apps}",
                    user.source, user.role, user.apps
                ),
            )
            .await;
        if lost_access((&user.role, &user.apps), (&role, &apps)) {
            ports.store().end_sessions(user.id).await?;
        }
    }
    user.role = role;
    user.apps = apps;
    Ok(())
}

/// The user of a live console session, by the session cookie's hash.
pub async fn session_user(ports: &Ports, session_hash: &str) -> Result<Option<User>> {
    let Some(mut user) = ports
        .store()
        .session_user(session_hash, ports.clock().now_ms())
        .await?
    else {
        return Ok(None);
    };
    let had = (user.role.clone(), user.apps.clone());
    recheck(ports, &mut user).await?;
    // A recheck that narrowed the user's access ended this session too.
    if lost_access((&had.0, &had.1), (&user.role, &user.apps)) {
        return Ok(None);
    }
    Ok(Some(user))
}

/// The user named `name`, for signing in.
pub async fn named(ports: &Ports, name: &str) -> Result<Option<User>> {
    Ok(ports.store().user_by_name(name).await?)
}

/// How a sign-in went: with a name and a password, or through a provider.
#[derive(Debug)]
pub enum SignIn {
    /// It is this user: open a session ([`sign_in`]).
    User(User),
    /// Unknown name or wrong password (alike, on purpose).
    Wrong,
    /// The directory knows the user, and none of its groups gives access here.
    NoAccess,
    /// Local sign-in is turned off (`--sso-only`) and this is a local user.
    LocalOff,
    /// The directory could not be asked: the reason, for the log (the page says less).
    DirectoryDown(String),
    /// The user cannot have the name it signs in with: another source's user holds it (a
    /// local user, or the other directory's), another of a provider's users does, or the
    /// provider named it by nothing the console takes. The reason, naming it.
    NameTaken(String),
}

/// Checks `password` for user `name`: a local user's against its hash here (unless local
/// sign-in is off); anyone else's with the directory, whose groups then set the user's
/// role and apps (created at the first sign-in, updated at each; a user who lost access
/// since their last sign-in has their sessions ended). A name belongs to one source: a
/// local user is never checked against the directory, nor a directory user here.
pub async fn sign_in_with_password(ports: &Ports, name: &str, password: &str) -> Result<SignIn> {
    let config = ports.config();
    let known = ports.store().user_by_name(name).await?;
    let directory = ports.directory();
    match (&known, directory) {
        (Some(user), _) if user.source == "local" => {
            let ok = crate::credentials::verify_password(
                password.to_owned(),
                user.password_hash.clone(),
            )
            .await
            .map_err(Error::Internal)?;
            if !ok {
                return Ok(SignIn::Wrong);
            }
            if config.sso_only {
                return Ok(SignIn::LocalOff);
            }
            Ok(SignIn::User(user.clone()))
        }
        (_, None) => {
            // No directory: as slow as a real check, so timing says nothing of the name.
            crate::credentials::verify_nobody(password.to_owned())
                .await
                .map_err(Error::Internal)?;
            Ok(SignIn::Wrong)
        }
        (_, Some(directory)) => {
            // As slow as a local check, so timing does not tell local names from others.
            crate::credentials::verify_nobody(password.to_owned())
                .await
                .map_err(Error::Internal)?;
            let identity = match directory.authenticate(name, password).await {
                Ok(Some(identity)) => identity,
                Ok(None) => return Ok(SignIn::Wrong),
                Err(e) => return Ok(SignIn::DirectoryDown(e.to_string())),
            };
            admit(ports, name, &identity).await
        }
    }
}

/// Signs in the user the provider vouched for (after [`crate::sso::oidc::Provider::finish`]),
/// named by the first of its names the console takes at its first sign-in: what its groups give now, as for a directory user.
pub async fn sign_in_with_provider(
    ports: &Ports,
    signed_in: &crate::sso::oidc::SignedIn,
) -> Result<SignIn> {
    // The first of its names the console takes (not empty, not too long, nothing invisible).
    let Some(name) = signed_in
        .names
        .iter()
        .find(|n| validate::name("name", n).is_ok())
    else {
        return Ok(SignIn::NameTaken(
            "the provider names you by nothing usable as a name here".into(),
        ));
    };
    admit(ports, name, &signed_in.identity).await
}

/// The user `identity` is (named `name` at its first sign-in), with the role and apps its
/// groups give now: created at the first sign-in, updated at each. No mapped group: refused,
/// and what it had ends. Less than before: its sessions end.
async fn admit(ports: &Ports, name: &str, identity: &crate::sso::Identity) -> Result<SignIn> {
    let config = ports.config();
    // The user as it was, found by its identity (the name typed may differ in case).
    let before = ports
        .store()
        .directory_user(identity.provider, &identity.subject)
        .await?;
    let now = ports.clock().now_ms();
    let Some((role, apps)) = crate::sso::grant(&config.sso_rules, &identity.groups) else {
        // What it had ends now, not at its sessions' expiry.
        if let Some(user) = &before {
            ports.store().end_sessions(user.id).await?;
            ports
                .store()
                .set_directory_access(user.id, Role::Viewer.as_str(), "", now)
                .await?;
            ports
                .audit(
                    &user.name,
                    "sign-in refused: no mapped group",
                    &subject_of(identity),
                )
                .await;
        }
        return Ok(SignIn::NoAccess);
    };
    // Directories match names without regard to case: the first sign-in names the
    // user in lower case, later ones find it by its identity.
    let name = name.trim().to_lowercase();
    let groups = crate::sso::groups_to_json(&identity.groups);
    let user = match ports
        .store()
        .upsert_directory_user(
            &name,
            identity.provider,
            &identity.subject,
            // A directory's name belongs to one entry at a time (a reused uid moves to its
            // new owner); a provider's `preferred_username` is no such promise (a person
            // may choose it): a name another of its users holds is refused, not taken.
            identity.provider == "ldap",
            &groups,
            role.as_str(),
            &apps.to_text(),
            now,
        )
        .await
    {
        Ok(user) => user,
        Err(store::Error::Conflict(why)) => return Ok(SignIn::NameTaken(why)),
        Err(e) => return Err(e.into()),
    };
    if let Some(before) = &before
        && lost_access((&before.role, &before.apps), (&user.role, &user.apps))
    {
        let ended = ports.store().end_sessions(user.id).await?;
        ports
            .audit(
                &user.name,
                match identity.provider {
                    "ldap" => "access narrowed by the directory",
                    _ => "access narrowed by the provider",
                },
                &format!(
                    "{}: {} on {} → {} on {} ({ended} sessions ended)",
                    subject_of(identity),
                    before.role,
                    before.apps,
                    user.role,
                    user.apps
                ),
            )
            .await;
    }
    Ok(SignIn::User(user))
}

/// `ldap:<DN>` or `oidc:<issuer> <sub>`: the provider and subject an audit note names.
fn subject_of(identity: &crate::sso::Identity) -> String {
    format!("{}:{}", identity.provider, identity.subject)
}

/// Whether access `after` (role, apps) is less than `before`: a lower role, or an app it
/// no longer has.
fn lost_access(before: (&str, &str), after: (&str, &str)) -> bool {
    if Role::parse(after.0).ok() < Role::parse(before.0).ok() {
        return true;
    }
    match (Apps::parse(before.1), Apps::parse(after.1)) {
        (Ok(Apps::All), Ok(Apps::All)) => false,
        (Ok(Apps::All), _) => true,
        (Ok(Apps::Only(had)), Ok(now)) => had.iter().any(|a| !now.contains(a)),
        _ => true,
    }
}

/// Opens a console session of hash `session_hash` for `user`, whom the caller signed in
/// (a password, a directory or a provider), for [`SESSION_MS`]; audited.
pub async fn sign_in(ports: &Ports, user: &User, session_hash: &str) -> Result<()> {
    let at = ports.clock().now_ms();
    ports
        .store()
        .insert_session(session_hash, user.id, at, at + SESSION_MS)
        .await?;
    // A directory user's note names the provider and its subject there.
    let through = match &user.subject {
        Some(subject) => format!("{}:{subject}", user.source),
        None => String::new(),
    };
    ports.audit(&user.name, "login", &through).await;
    Ok(())
}

/// Ends the console session of hash `session_hash` (if any) of user `name`, audited.
pub async fn sign_out(ports: &Ports, name: &str, session_hash: Option<&str>) -> Result<()> {
    if let Some(hash) = session_hash {
        ports.store().delete_session(hash).await?;
    }
    ports.audit(name, "logout", "").await;
    Ok(())
}
