//! Console sign-in through the company's directory (SPEC §14), against a real OpenLDAP
//! `slapd` started by the test: users and groups loaded from LDIF, reached over StartTLS
//! with the test CA (`--tls-ca`). Groups give roles and apps; a group removed takes effect
//! at the next sign-in and ends the user's sessions; wrong passwords, users in no mapped
//! group and a directory that is down are refused with a clear page, nothing signed in; the
//! local `admin` stays the way in. Bad settings are named by `rota config check`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use support::*;

const SUFFIX: &str = "dc=corp,dc=example";
const ROOT_DN: &str = "cn=admin,dc=corp,dc=example";
const ROOT_PW: &str = "directory-admin-pw";
const ADMIN_PW: &str = "local-admin-pass-1";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../net/tests/fixtures")
        .join(name)
}

/// The directory: people `alice` (in `ops` and `devs`), `bob` (in `platform`), `carol` (in
/// `interns`, which no rule maps), each with password `<name>-pass-1`. A `groupOfNames`
/// needs a member: the directory's root is one of each group someone leaves.
const PEOPLE: &str = "\
dn: dc=corp,dc=example
objectClass: dcObject
objectClass: organization
o: Corp
dc: corp

dn: ou=people,dc=corp,dc=example
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=corp,dc=example
objectClass: organizationalUnit
ou: groups

dn: uid=alice,ou=people,dc=corp,dc=example
objectClass: inetOrgPerson
uid: alice
cn: Alice
sn: A
userPassword: alice-pass-1

dn: uid=bob,ou=people,dc=corp,dc=example
objectClass: inetOrgPerson
uid: bob
cn: Bob
sn: B
userPassword: bob-pass-1

dn: uid=carol,ou=people,dc=corp,dc=example
objectClass: inetOrgPerson
uid: carol
cn: Carol
sn: C
userPassword: carol-pass-1

dn: cn=ops,ou=groups,dc=corp,dc=example
objectClass: groupOfNames
cn: ops
member: uid=alice,ou=people,dc=corp,dc=example
member: cn=admin,dc=corp,dc=example

dn: cn=devs,ou=groups,dc=corp,dc=example
objectClass: groupOfNames
cn: devs
member: uid=alice,ou=people,dc=corp,dc=example
member: cn=admin,dc=corp,dc=example

dn: cn=platform,ou=groups,dc=corp,dc=example
objectClass: groupOfNames
cn: platform
member: uid=bob,ou=people,dc=corp,dc=example
member: cn=admin,dc=corp,dc=example

dn: cn=interns,ou=groups,dc=corp,dc=example
objectClass: groupOfNames
cn: interns
member: uid=carol,ou=people,dc=corp,dc=example
";

/// A running `slapd` on a loopback port (killed on drop).
struct Slapd {
    process: KillOnDrop,
    url: String,
}

impl Slapd {
    /// Loads [`PEOPLE`] and starts slapd serving `ldap://` with StartTLS on the test
    /// certificate; `None` (recorded missing) without OpenLDAP.
    fn start(dir: &Path) -> Option<Slapd> {
        if !Path::new("/usr/sbin/slapd").exists()
            || Command::new("ldapmodify").arg("-VV").output().is_err()
        {
            rota_testkit::missing("OpenLDAP is not installed (apt-get install slapd ldap-utils)");
            return None;
        }
        let db = dir.join("db");
        std::fs::create_dir_all(&db).unwrap();
        let conf = dir.join("slapd.conf");
        std::fs::write(
            &conf,
            format!(
                "include /etc/ldap/schema/core.schema\n\
                 include /etc/ldap/schema/cosine.schema\n\
                 include /etc/ldap/schema/inetorgperson.schema\n\
                 modulepath /usr/lib/ldap\n\
                 moduleload back_mdb\n\
                 pidfile {pid}\n\
                 TLSCACertificateFile {ca}\n\
                 TLSCertificateFile {cert}\n\
                 TLSCertificateKeyFile {key}\n\
                 database mdb\n\
                 suffix \"{SUFFIX}\"\n\
                 rootdn \"{ROOT_DN}\"\n\
                 rootpw {ROOT_PW}\n\
                 directory {db}\n",
                pid = dir.join("slapd.pid").display(),
                ca = fixture("ca.pem").display(),
                cert = fixture("server.pem").display(),
                key = fixture("server.key").display(),
                db = db.display(),
            ),
        )
        .unwrap();
        let ldif = dir.join("people.ldif");
        std::fs::write(&ldif, PEOPLE).unwrap();
        let loaded = Command::new("slapadd")
            .arg("-f")
            .arg(&conf)
            .arg("-l")
            .arg(&ldif)
            .output()
            .unwrap();
        assert!(loaded.status.success(), "slapadd: {loaded:?}");
        let port = free_port();
        let url = format!("ldap://127.0.0.1:{port}");
        let log = dir.join("slapd.log");
        let child = Command::new("/usr/sbin/slapd")
            .arg("-f")
            .arg(&conf)
            .args(["-h", &format!("{url}/"), "-d", "0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting slapd");
        let slapd = Slapd {
            process: KillOnDrop::logged(child, &log),
            url,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "slapd did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(slapd)
    }

    /// Applies an LDIF change as the directory's root.
    fn modify(&self, ldif: &str) {
        let mut child = Command::new("ldapmodify")
            .args(["-x", "-H", &self.url, "-D", ROOT_DN, "-w", ROOT_PW])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(ldif.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "ldapmodify: {out:?}");
    }
}

/// A console page with session `cookie`: its status and text.
async fn page(base: &str, path: &str, cookie: &str) -> (StatusCode, String) {
    let resp = no_redirects()
        .get(format!("{base}{path}"))
        .header("cookie", cookie)
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    (resp.status(), resp.text().await.unwrap())
}

/// Starts a node signing in through `slapd`, with the test CA trusted unless `trust_ca`
/// is false.
fn node_on(
    slapd: &Slapd,
    dir: &Path,
    db: &str,
    port: u16,
    trust_ca: bool,
    more: &[(&str, &str)],
) -> KillOnDrop {
    let ca = fixture("ca.pem").display().to_string();
    let mut env = vec![
        ("ROTA_ADMIN_PASSWORD", ADMIN_PW),
        ("ROTA_LDAP_URL", slapd.url.as_str()),
        ("ROTA_LDAP_START_TLS", "true"),
        ("ROTA_LDAP_BIND_DN", ROOT_DN),
        ("ROTA_LDAP_BIND_PASSWORD", ROOT_PW),
        ("ROTA_LDAP_USER_BASE", "ou=people,dc=corp,dc=example"),
        ("ROTA_LDAP_GROUP_BASE", "ou=groups,dc=corp,dc=example"),
        (
            "ROTA_SSO_MAP",
            "ops=operator:orders;devs=viewer:*;cn=platform,ou=groups,dc=corp,dc=example=admin",
        ),
    ];
    if trust_ca {
        env.push(("ROTA_TLS_CA", ca.as_str()));
    }
    env.extend_from_slice(more);
    spawn_server_env(db, port, &dir.join(format!("node-{port}.log")), "sso", &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_users_sign_in_with_the_role_and_apps_their_groups_give() {
    let dir = tempfile::tempdir().unwrap();
    let Some(slapd) = Slapd::start(dir.path()) else {
        return;
    };
    let (db, _db_dir) = sqlite_url();
    let port = free_port();
    let _node = node_on(&slapd, dir.path(), &db, port, true, &[]);
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    let base = api.base.clone();
    let login = reqwest::get(format!("{base}/login"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(login.contains("company directory (LDAP)"), "{login}");

    // Alice: ops (operator on orders) and devs (viewer of every app): operator wins, on orders.
    let alice = console_sign_in(&base, "alice", "alice-pass-1").await;
    assert_eq!(alice.status, StatusCode::SEE_OTHER, "{}", alice.page);
    let alice_cookie = alice.cookie.expect("alice has a session");
    assert_eq!(
        page(&base, "/console", &alice_cookie).await.0,
        StatusCode::OK
    );
    // Bob: platform, named by its DN: admin. He sees the users page, with where each signs in.
    let bob = console_sign_in(&base, "bob", "bob-pass-1").await;
    let bob_cookie = bob.cookie.expect("bob has a session");
    let (status, users) = page(&base, "/console/users", &bob_cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert!(users.contains("operator · orders"), "{users}");
    assert!(
        users.contains("uid=alice,ou=people,dc=corp,dc=example"),
        "{users}"
    );
    assert!(users.contains("admin · *"), "{users}");
    let (_, users) = page(&base, "/console/users", &bob_cookie).await;
    assert_eq!(users.matches("<td>alice").count(), 1, "{users}");
    // Alice is no admin.
    assert_eq!(
        page(&base, "/console/users", &alice_cookie).await.0,
        StatusCode::FORBIDDEN
    );
    // Directories match names without regard to case: `Alice` is the same user.
    let same = console_sign_in(&base, "Alice", "alice-pass-1").await;
    assert!(same.cookie.is_some(), "{}", same.page);

    // Refused, nothing signed in: a wrong password, an unknown name, an empty password (an
    // anonymous bind to LDAP), and carol, whose only group no rule maps.
    for (user, password) in [
        ("alice", "wrong-pass-1"),
        ("nobody", "whatever-pass"),
        ("alice", ""),
    ] {
        let a = console_sign_in(&base, user, password).await;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{user}: {}", a.page);
        assert!(a.cookie.is_none());
        assert!(
            a.page.contains("Wrong user name or password."),
            "{}",
            a.page
        );
    }
    let carol = console_sign_in(&base, "carol", "carol-pass-1").await;
    assert_eq!(carol.status, StatusCode::FORBIDDEN, "{}", carol.page);
    assert!(carol.cookie.is_none());
    assert!(
        carol.page.contains("in no group that gives access"),
        "{}",
        carol.page
    );
    let (_, users) = page(&base, "/console/users", &bob_cookie).await;
    assert!(
        !users.contains("carol"),
        "a refused user was created: {users}"
    );

    // The audit log names the provider and the subject of each sign-in.
    let audit = api.ok("GET", "/api/v1/audit?limit=50", None).await;
    assert!(
        audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["user"] == "alice"
                && e["action"] == "login"
                && e["target"] == "ldap:uid=alice,ou=people,dc=corp,dc=example"),
        "{audit}"
    );

    // Alice leaves ops: at her next sign-in she is a viewer, and her old session is over.
    slapd.modify(
        "dn: cn=ops,ou=groups,dc=corp,dc=example\nchangetype: modify\ndelete: member\nmember: uid=alice,ou=people,dc=corp,dc=example\n",
    );
    assert_eq!(
        page(&base, "/console", &alice_cookie).await.0,
        StatusCode::OK,
        "until she signs in again"
    );
    let again = console_sign_in(&base, "alice", "alice-pass-1").await;
    let new_cookie = again.cookie.expect("alice signs in as a viewer");
    assert_eq!(page(&base, "/console", &new_cookie).await.0, StatusCode::OK);
    assert_eq!(
        page(&base, "/console", &alice_cookie).await.0,
        StatusCode::SEE_OTHER,
        "her session from before the change ended"
    );
    let (_, users) = page(&base, "/console/users", &bob_cookie).await;
    assert!(users.contains("viewer · *"), "{users}");
    // Out of every mapped group: refused, and the session she had ends too.
    slapd.modify(
        "dn: cn=devs,ou=groups,dc=corp,dc=example\nchangetype: modify\ndelete: member\nmember: uid=alice,ou=people,dc=corp,dc=example\n",
    );
    let refused = console_sign_in(&base, "alice", "alice-pass-1").await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.page);
    assert_eq!(
        page(&base, "/console", &new_cookie).await.0,
        StatusCode::SEE_OTHER
    );

    // The local admin signs in as before; a local name is never asked of the directory.
    let admin = console_sign_in(&base, "admin", ADMIN_PW).await;
    assert!(admin.cookie.is_some(), "{}", admin.page);

    // The directory goes away: directory users are told so, the local admin still gets in.
    let mut slapd = slapd;
    slapd.process.0.kill().unwrap();
    slapd.process.0.wait().unwrap();
    let down = console_sign_in(&base, "bob", "bob-pass-1").await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.page
    );
    assert!(down.cookie.is_none());
    assert!(
        down.page.contains("The directory cannot be reached"),
        "{}",
        down.page
    );
    assert!(
        console_sign_in(&base, "admin", ADMIN_PW)
            .await
            .cookie
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_whose_certificate_is_not_trusted_signs_nobody_in() {
    let dir = tempfile::tempdir().unwrap();
    let Some(slapd) = Slapd::start(dir.path()) else {
        return;
    };
    let (db, _db_dir) = sqlite_url();
    let port = free_port();
    let node = node_on(&slapd, dir.path(), &db, port, false, &[]);
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    let a = console_sign_in(&api.base, "bob", "bob-pass-1").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.page);
    assert!(a.cookie.is_none());
    // The node says why, naming the certificate.
    let line = eventually(Duration::from_secs(10), "the node to log why", || async {
        let log = std::fs::read_to_string(dir.path().join(format!("node-{port}.log"))).unwrap();
        log.lines()
            .find(|l| l.contains("the directory could not check a sign-in"))
            .map(str::to_owned)
    })
    .await;
    assert!(line.to_lowercase().contains("certificate"), "{line}");
    drop(node);
}

/// A new API token of the user of console session `cookie`, made on the tokens page.
async fn new_token(base: &str, cookie: &str) -> String {
    let between = |text: &str, from: &str, to: &str| -> String {
        let start = text
            .find(from)
            .unwrap_or_else(|| panic!("no {from} in {text}"))
            + from.len();
        text[start..][..text[start..].find(to).unwrap()].to_owned()
    };
    let (_, tokens) = page(base, "/console/tokens", cookie).await;
    let csrf = between(&tokens, "name=\"csrf\" value=\"", "\"");
    let made = no_redirects()
        .post(format!("{base}/console/tokens"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("name=ci&csrf={csrf}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    between(&made, "id=\"new-token\" class=\"token\">", "<")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_users_token_and_session_follow_their_groups_between_sign_ins() {
    let dir = tempfile::tempdir().unwrap();
    let Some(slapd) = Slapd::start(dir.path()) else {
        return;
    };
    let (db, _db_dir) = sqlite_url();
    let port = free_port();
    // The directory is asked again at every use (the default: every five minutes).
    let more = [("ROTA_LDAP_RECHECK_MS", "0")];
    let _node = node_on(&slapd, dir.path(), &db, port, true, &more);
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    let base = api.base.clone();
    let bob = console_sign_in(&base, "bob", "bob-pass-1").await;
    let cookie = bob.cookie.expect("bob signs in");
    let token = new_token(&base, &cookie).await;
    let audit_as = |token: String| {
        let base = base.clone();
        async move {
            reqwest::Client::new()
                .get(format!("{base}/api/v1/audit"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(
        audit_as(token.clone()).await,
        StatusCode::OK,
        "an admin's token"
    );
    // Bob leaves platform and does not sign in again: his token and his session lose what
    // it gave at their next use.
    slapd.modify(
        "dn: cn=platform,ou=groups,dc=corp,dc=example\nchangetype: modify\ndelete: member\nmember: uid=bob,ou=people,dc=corp,dc=example\n",
    );
    assert_eq!(audit_as(token.clone()).await, StatusCode::FORBIDDEN);
    assert_eq!(
        page(&base, "/console", &cookie).await.0,
        StatusCode::SEE_OTHER
    );
    let notes = api.ok("GET", "/api/v1/audit?limit=50", None).await;
    assert!(
        notes["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["user"] == "bob" && e["action"] == "access changed by the directory"),
        "{notes}"
    );
}

#[test]
fn config_check_names_wrong_sign_in_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rota.toml");
    std::fs::write(
        &file,
        "[server]\n\
         database-url = \"sqlite:rota.db\"\n\
         executor-secret = \"0123456789abcdef0123\"\n\
         ldap-url = \"ldap://ldap.corp.example\"\n\
         ldap-user-base = \"ou=people,dc=corp\"\n\
         ldap-user-filter = \"(uid=alice)\"\n\
         ldap-group-base = \"ou=groups,dc=corp\"\n\
         ldap-group-filter = \"(objectClass=groupOfNames)\"\n\
         sso-map = [\"ops=boss\", \"platform=admin:orders\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    for wrong in [
        "--sso-map `ops=boss`: role `boss`",
        "`platform=admin:orders`: an admin sees every app",
        "--ldap-url `ldap://ldap.corp.example`: passwords would cross the network in clear",
        "--ldap-user-filter `(uid=alice)`: it must contain {user}",
        "--ldap-group-filter `(objectClass=groupOfNames)`: it must contain {dn} or {user}",
    ] {
        assert!(said.contains(wrong), "not named: {wrong}\n{said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_wrong_sign_in_settings_starts_with_local_sign_in_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _db_dir) = sqlite_url();
    let port = free_port();
    let log = dir.path().join("node.log");
    let _node = spawn_server_env(
        &db,
        port,
        &log,
        "sso-off",
        &[
            ("ROTA_ADMIN_PASSWORD", ADMIN_PW),
            ("ROTA_LDAP_URL", "ldaps://ldap.corp.example"),
            ("ROTA_LDAP_USER_BASE", "ou=people,dc=corp"),
            ("ROTA_SSO_MAP", "ops=boss"),
        ],
    );
    let api = Api::new(format!("http://127.0.0.1:{port}"));
    wait_healthy(&api).await;
    assert!(
        console_sign_in(&api.base, "admin", ADMIN_PW)
            .await
            .cookie
            .is_some()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("sign-in through the directory and the provider is off"),
        "{said}"
    );
    assert!(said.contains("role `boss`"), "{said}");
}

#[test]
fn a_node_told_to_sign_in_only_through_a_directory_it_cannot_use_does_not_start() {
    let (db, _db_dir) = sqlite_url();
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["server", "--database-url", &db, "--listen", "127.0.0.1:0"])
        .env("ROTA_EXECUTOR_SECRET", "0123456789abcdef0123")
        .env("ROTA_LDAP_URL", "ldaps://ldap.corp.example")
        .env("ROTA_LDAP_USER_BASE", "ou=people,dc=corp")
        .env("ROTA_SSO_MAP", "ops=boss")
        .env("ROTA_SSO_ONLY", "true")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("--sso-only, but sign-in through the directory or the provider cannot work")
            && said.contains("role `boss`"),
        "{said}"
    );
}
