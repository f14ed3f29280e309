//! The PostgreSQL harness of the accounting tests (`common::postgres`): a server made in a
//! temp dir answers `SELECT 1` through `psql` with its password, is stopped, starts again
//! on the same data dir and port with what was committed before still there, survives a
//! SIGKILL (crash recovery), and leaves no process behind once dropped. Skips, saying
//! why, where PostgreSQL cannot run (`make deps` installs Debian's `postgresql`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::postgres::Postgres;

#[test]
fn postgres_starts_stops_and_starts_again() {
    let Some(mut pg) = Postgres::start() else {
        return;
    };
    assert_eq!(pg.psql("postgres", "SELECT 1").unwrap(), "1", "{}", pg.log());
    assert!(pg.url().starts_with("postgres://hyperplan@127.0.0.1:"), "{}", pg.url());
    let pw = std::fs::read_to_string(pg.password_file()).unwrap();
    assert_eq!(pw.trim(), pg.password);

    // A wrong password is refused: the server asks for one (scram-sha-256).
    let out = std::process::Command::new(pg.psql_bin())
        .args(["-X", "-tA", "-h", "127.0.0.1", "-p", &pg.port.to_string()])
        .args(["-U", common::postgres::SUPERUSER, "-d", "postgres", "-c", "SELECT 1"])
        .env("PGPASSWORD", "not-the-password")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a wrong password was accepted");

    let url = pg.create_database("acct");
    assert!(url.ends_with("/acct"), "{url}");
    pg.psql("acct", "CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
        .unwrap();

    let port = pg.port;
    let pid = pg.pid().unwrap();
    pg.stop();
    assert!(!common::alive(u64::from(pid)), "postmaster {pid} still runs after stop");
    assert!(pg.psql("acct", "SELECT 1").is_err(), "answered while stopped");

    pg.start_again();
    assert_eq!(pg.port, port);
    assert_eq!(pg.psql("acct", "SELECT x FROM t").unwrap(), "7", "{}", pg.log());

    // A crash: committed rows survive (fsync on), recovery runs at the next start.
    pg.psql("acct", "INSERT INTO t VALUES (8)").unwrap();
    let pid = pg.pid().unwrap();
    pg.kill9();
    assert!(!common::alive(u64::from(pid)), "postmaster {pid} survived SIGKILL");
    pg.start_again();
    assert_eq!(pg.psql("acct", "SELECT sum(x) FROM t").unwrap(), "15", "{}", pg.log());

    let data = pg.data();
    let pid = pg.pid().unwrap();
    drop(pg);
    assert!(!common::alive(u64::from(pid)), "postmaster {pid} still runs after drop");
    // No process of this server is left: none in its process group (the postmaster
    // leads it), none with its data dir on the command line.
    for args in [
        vec!["-ag".to_string(), pid.to_string()],
        vec!["-af".to_string(), data.display().to_string()],
    ] {
        let left = std::process::Command::new("pgrep").args(&args).output().unwrap();
        assert!(
            left.stdout.is_empty(),
            "processes left: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}
