//! TLS for Rota's nodes, one setting per process ([`Tls`]): whether it serves HTTPS (a
//! certificate chain and its key, PEM files) and which extra roots its HTTP clients trust
//! (a PEM bundle, for a private CA) on top of the system's.
//!
//! - A scheduler node serves its API and console over HTTPS with `--tls-cert/--tls-key`;
//!   an executor serves the schedulers' calls likewise. Their advertised URLs become
//!   `https://…`, and the peers' clients check the certificates.
//! - Every client a node makes (scheduler → executor, executor → scheduler, scheduler →
//!   scheduler, a plugin's `http_request`, the CLI) speaks HTTPS to an `https://` URL,
//!   trusting the system's roots plus `--tls-ca`.
//!
//! rustls with aws-lc does the cryptography; nothing here is hand-rolled. Handshakes run
//! off the accept loop, bounded by [`HANDSHAKE_TIMEOUT`], so a client that connects and
//! says nothing holds up no one else.
//!
//! Layout:
//! - this file: [`Tls`], the HTTPS [`Listener`] and the clients' roots;
//! - [`egress`]: the admin's egress policy, and the clients that obey it, for every
//!   request a node makes on a job's behalf (webhooks, alarm channels, plugins' HTTP);
//! - [`trace`]: a task's W3C trace context as it crosses from node to executor to service.

pub mod egress;
pub mod trace;

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once, and from one client address; a connection beyond either
/// is closed at once, so a flood of idle connections costs bounded memory and one client
/// cannot take every slot.
pub const MAX_HANDSHAKES: usize = 1024;
pub const MAX_HANDSHAKES_PER_IP: usize = 64;

/// One handshake's place in the per-address count, given back when dropped.
struct IpSlot {
    counts: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl IpSlot {
    fn take(counts: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<IpSlot> {
        let mut map = counts.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= MAX_HANDSHAKES_PER_IP {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// A process's TLS settings. The default serves plain HTTP and trusts the system's roots.
#[derive(Clone, Default)]
pub struct Tls {
    server: Option<Arc<rustls::ServerConfig>>,
    roots: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("serves_https", &self.server.is_some())
            .field("extra_roots", &self.roots.len())
            .finish()
    }
}

impl Tls {
    /// Reads the PEM files: `cert` and `key` (both or neither) to serve HTTPS, `ca` to
    /// trust more roots. Each error names the file and what is wrong with it.
    pub fn load(cert: Option<&Path>, key: Option<&Path>, ca: Option<&Path>) -> anyhow::Result<Tls> {
        let server = match (cert, key) {
            (Some(cert), Some(key)) => Some(Arc::new(server_config(cert, key)?)),
            (None, None) => None,
            (Some(_), None) => {
                anyhow::bail!("--tls-cert needs --tls-key (the certificate's private key)")
            }
            (None, Some(_)) => anyhow::bail!("--tls-key needs --tls-cert (the certificate chain)"),
        };
        let roots = match ca {
            Some(ca) => trust_anchors(ca)?,
            None => Vec::new(),
        };
        Ok(Tls { server, roots })
    }

    /// Whether this process serves HTTPS.
    pub fn serves_https(&self) -> bool {
        self.server.is_some()
    }

    /// `https` or `http`: the scheme of this process's own URL.
    pub fn scheme(&self) -> &'static str {
        if self.serves_https() { "https" } else { "http" }
    }

    /// A client builder that trusts the system's roots and the extra ones.
    pub fn client(&self) -> reqwest::ClientBuilder {
        let roots = self
            .roots
            .iter()
            .filter_map(|der| reqwest::Certificate::from_der(der).ok());
        reqwest::Client::builder().tls_certs_merge(roots)
    }

    /// A rustls client configuration that trusts the system's roots and the extra ones,
    /// for clients that are not reqwest (the LDAP directory).
    pub fn client_config(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = rustls_platform_verifier::Verifier::new_with_extra_roots(
            self.roots.iter().cloned(),
            provider.clone(),
        )
        .context("loading the system's trusted roots")?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("choosing TLS versions")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        Ok(Arc::new(config))
    }

    /// Serves on `tcp`: plain, or TLS with the certificate.
    pub fn listener(&self, tcp: TcpListener) -> Listener {
        match &self.server {
            None => Listener::Plain(tcp),
            Some(config) => Listener::Tls(TlsListener::new(tcp, TlsAcceptor::from(config.clone()))),
        }
    }
}

fn server_config(cert: &Path, key: &Path) -> anyhow::Result<rustls::ServerConfig> {
    let chain = certificates(cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no PEM private key readable in it ({e})",
            key.display()
        )
    })?;
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| {
            format!(
                "--tls-cert {} and its key do not make a usable certificate",
                cert.display()
            )
        })
}

/// The certificates of a `--tls-ca` file, each checked to be one a client can trust: a
/// PEM block that is not an X.509 certificate would otherwise be dropped without a word
/// when the clients are built, and the peers it was meant for refused as untrusted.
fn trust_anchors(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = certificates(path)?;
    for (i, der) in certs.iter().enumerate() {
        rustls::RootCertStore::empty()
            .add(der.clone())
            .map_err(|e| {
                anyhow::anyhow!(
                    "--tls-ca {}: certificate {} of {} cannot be trusted ({e})",
                    path.display(),
                    i + 1,
                    certs.len()
                )
            })?;
    }
    Ok(certs)
}

/// Every certificate in a PEM file; none is an error.
fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: not a readable PEM certificate file ({e})",
                path.display()
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!("{}: holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// The client's address of a connection, for handlers that want it
/// (`into_make_service_with_connect_info::<ClientAddr>()`, then `ConnectInfo<ClientAddr>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, Listener>>
    for ClientAddr
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, Listener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

/// What a node serves on: plain TCP, or TLS over it. An [`axum::serve::Listener`].
pub enum Listener {
    Plain(TcpListener),
    Tls(TlsListener),
}

/// Either kind of accepted connection.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl axum::serve::Listener for Listener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        match self {
            Listener::Plain(tcp) => {
                let (stream, addr) = axum::serve::Listener::accept(tcp).await;
                (Conn::Plain(stream), addr)
            }
            Listener::Tls(tls) => {
                let (stream, addr) = tls.accept().await;
                (Conn::Tls(Box::new(stream)), addr)
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Listener::Plain(tcp) => tcp.local_addr(),
            Listener::Tls(tls) => Ok(tls.local_addr),
        }
    }
}

/// Accepts TCP connections and hands on those whose TLS handshake completed; handshakes
/// run in their own tasks, each bounded by [`HANDSHAKE_TIMEOUT`], at most
/// [`MAX_HANDSHAKES`] at once and [`MAX_HANDSHAKES_PER_IP`] from one address.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local_addr: SocketAddr,
    acceptor_task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        let local_addr = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, ready) = mpsc::channel(64);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let per_ip: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Arc::default();
        let acceptor_task = tokio::spawn(async move {
            let mut tcp = tcp;
            loop {
                let (stream, addr) = tokio::select! {
                    accepted = axum::serve::Listener::accept(&mut tcp) => accepted,
                    () = tx.closed() => return,
                };
                // Full, overall or for this client: the connection is closed at once rather
                // than queued behind handshakes that may never finish.
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::debug!(%addr, "too many TLS handshakes in progress; connection closed");
                    continue;
                };
                let Some(ip_slot) = IpSlot::take(&per_ip, addr.ip()) else {
                    tracing::debug!(%addr, "too many TLS handshakes from this address; connection closed");
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slots = (slot, ip_slot);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener {
            ready,
            local_addr,
            acceptor_task,
        }
    }

    async fn accept(&mut self) -> (TlsStream<TcpStream>, SocketAddr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop ended: the listener is being dropped; never yield again.
            None => std::future::pending().await,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

macro_rules! delegate {
    ($self:ident, $method:ident ( $($arg:expr),* )) => {
        match $self.get_mut() {
            Conn::Plain(s) => std::pin::Pin::new(s).$method($($arg),*),
            Conn::Tls(s) => std::pin::Pin::new(s.as_mut()).$method($($arg),*),
        }
    };
}

impl tokio::io::AsyncRead for Conn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        delegate!(self, poll_read(cx, buf))
    }
}

impl tokio::io::AsyncWrite for Conn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        delegate!(self, poll_write(cx, buf))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        delegate!(self, poll_flush(cx))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        delegate!(self, poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        delegate!(self, poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// Whether `check` holds within 5 s, asking every 20 ms.
    async fn eventually<F, Fut>(check: F) -> bool
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline {
            if check().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// An HTTPS server and a client that trusts the test CA; one that does not is refused.
    #[tokio::test]
    async fn serves_https_to_clients_that_trust_its_ca() {
        let server = Tls::load(
            Some(&fixture("server.pem")),
            Some(&fixture("server.key")),
            None,
        )
        .unwrap();
        assert_eq!(server.scheme(), "https");
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "over tls" }));
        let listener = server.listener(tcp);
        tokio::spawn(async move { axum::serve(listener, app).await });

        // A client that says nothing holds up no one: the next handshake goes through.
        let _silent = TcpStream::connect(addr).await.unwrap();

        let trusting = Tls::load(None, None, Some(&fixture("ca.pem"))).unwrap();
        let client = trusting.client().build().unwrap();
        let url = format!("https://127.0.0.1:{}/", addr.port());
        let body = client.get(&url).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "over tls");

        // One address cannot take every slot: past its share, its connections are closed
        // at once, and once its idle ones go, it is served again.
        let mut idle = Vec::new();
        for _ in 0..MAX_HANDSHAKES_PER_IP {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Fresh clients: the first one keeps its connection, which is past its handshake.
        let fresh = || trusting.client().build().unwrap();
        // The server takes the idle connections in as they come; wait until it has.
        let refused = eventually(|| async { fresh().get(&url).send().await.is_err() }).await;
        assert!(refused, "over the per-address cap");
        drop(idle);
        let served = eventually(|| async { fresh().get(&url).send().await.is_ok() }).await;
        assert!(served, "served again once the idle connections are gone");
        let body = fresh()
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(body, "over tls");

        let untrusting = Tls::default().client().build().unwrap();
        let err = untrusting.get(&url).send().await.unwrap_err();
        assert!(err.is_connect(), "{err}");
        // Plain HTTP to the TLS port gets nothing.
        let plain = format!("http://127.0.0.1:{}/", addr.port());
        assert!(untrusting.get(&plain).send().await.is_err());
    }

    #[test]
    fn bad_files_are_named() {
        let missing = Path::new("/nonexistent/cert.pem");
        let err = Tls::load(Some(missing), Some(missing), None).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/cert.pem"), "{err:#}");
        let err = Tls::load(Some(&fixture("server.pem")), None, None).unwrap_err();
        assert!(err.to_string().contains("--tls-key"), "{err}");
        // A key given as the certificate.
        let err = Tls::load(
            Some(&fixture("server.key")),
            Some(&fixture("server.key")),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("server.key"), "{err:#}");
        // A certificate with another's key.
        let err =
            Tls::load(Some(&fixture("ca.pem")), Some(&fixture("server.key")), None).unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err:#}");
        // A PEM block labelled CERTIFICATE that holds no certificate.
        let dir = std::env::temp_dir().join(format!("rota-net-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bogus = dir.join("bogus-ca.pem");
        std::fs::write(
            &bogus,
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = Tls::load(None, None, Some(&bogus)).unwrap_err();
        assert!(
            err.to_string().contains("bogus-ca.pem")
                && err.to_string().contains("certificate 1 of 1"),
            "{err:#}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let shown = format!(
            "{:?}",
            Tls::load(None, None, Some(&fixture("ca.pem"))).unwrap()
        );
        assert_eq!(shown, "Tls { serves_https: false, extra_roots: 1 }");
    }
}
