//! Every connection's opening: the TLS handshake (quinn and rustls check the certificate
//! against the cluster CA), the identity the certificate names, one bidirectional stream,
//! and the `Hello` exchange — version, role and name must agree with the certificate.
//! A certificate the revocation list names is refused; then the connection is an agent
//! link or a client session, closed when a reloaded list revokes its certificate.

use std::time::Duration;

use hyperplan_net::hello::check_hello;
use hyperplan_net::identity::CertRole;
use hyperplan_net::messages::{Hello, Role};
use hyperplan_net::revocation::peer_issued_at;
use hyperplan_net::{peer_identity, read_frame, write_frame};
use tokio::sync::mpsc;

use super::inbox::ToCore;
use super::link::refuse;
use super::{agent, client, close, revoked};

/// How long a peer may take to open its stream and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(
    incoming: quinn::Incoming,
    id: u64,
    to_core: mpsc::UnboundedSender<ToCore>,
    mut revoked: revoked::Shared,
    max_frame: usize,
) {
    let peer = incoming.remote_address();
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            crate::metrics::refused("tls");
            super::quiet::warn_limited!(format!("refused: TLS handshake failed: {e}"), %peer, "refused: TLS handshake failed: {e}");
            return;
        }
    };
    let identity = match peer_identity(&conn) {
        Ok(i) => i,
        Err(e) => return refuse(&conn, close::REFUSED, &format!("certificate: {e}")),
    };
    let issued = peer_issued_at(&conn);
    if let Some(r) = revoked::check(&mut revoked, &identity, issued) {
        return refuse(&conn, close::REFUSED, &r.to_string());
    }
    tracing::debug!(%peer, who = %identity, "connected");
    let opened = tokio::time::timeout(HELLO_TIMEOUT, conn.accept_bi()).await;
    let (mut send, mut recv) = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::info!(%peer, "closed before opening a stream: {e}");
            return;
        }
        Err(_) => return refuse(&conn, close::PROTOCOL, "no stream opened within 10 s"),
    };
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_frame::<Hello, _>(&mut recv, max_frame)).await {
        Ok(Ok(Some(h))) => h,
        Ok(Ok(None)) => return refuse(&conn, close::PROTOCOL, "stream ended before Hello"),
        Ok(Err(e)) => return refuse(&conn, close::PROTOCOL, &format!("expected Hello: {e}")),
        Err(_) => return refuse(&conn, close::PROTOCOL, "no Hello within 10 s"),
    };
    if let Err(e) = check_hello(&hello, &identity) {
        return refuse(&conn, e.close_code(), &e.to_string());
    }
    if let Err(e) = write_frame(
        &mut send,
        &Hello::new(Role::Planner, hyperplan_net::certs::PLANNER_SERVER_NAME),
        max_frame,
    )
    .await
    {
        tracing::info!(%peer, "lost before our Hello: {e}");
        return;
    }
    let session = {
        let (conn, identity) = (conn.clone(), identity.clone());
        async move {
            match identity.role {
                CertRole::Agent => agent::serve(conn, id, identity.name, send, recv, to_core, max_frame).await,
                CertRole::Admin | CertRole::User => {
                    let admin = identity.role == CertRole::Admin;
                    client::serve(conn, identity.name, admin, send, recv, to_core, max_frame).await;
                }
                CertRole::Planner => refuse(
                    &conn,
                    close::REFUSED,
                    "a planner certificate cannot connect to a planner",
                ),
            }
        }
    };
    tokio::pin!(session);
    tokio::select! {
        () = &mut session => {}
        r = revoked::until_revoked(&mut revoked, &identity, issued) => {
            // Closing ends the session the usual way (an agent's link reports Gone).
            refuse(&conn, close::REFUSED, &r.to_string());
            session.await;
        }
    }
}
