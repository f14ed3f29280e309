//! The agent's `/metrics` endpoint served in-process on 127.0.0.1: what a scrape over TCP
//! reads (names, labels, the content type), that it follows what the agent publishes,
//! that other paths and methods are refused, that an address already taken gives no
//! server (the agent runs on), and that dropping the server stops it. The real agent
//! serving it is in `run_tasks.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use hyperplan_agent::metrics::{CONTENT_TYPE, Listen, Metrics, TaskUse, TasksNow, serve};

const WAIT: Duration = Duration::from_secs(30);

fn listen(addr: &str) -> Listen {
    Listen {
        addr: addr.into(),
        origin: "the test".into(),
    }
}

#[tokio::test]
async fn serves_the_metrics_over_http_until_dropped() {
    let metrics = Metrics::new();
    metrics.set_link_up(true);
    metrics.set_probe_duration(Duration::from_millis(40));
    metrics.set_tasks(TasksNow {
        running: vec![TaskUse {
            job_id: 42.into(),
            index: 3,
            cpu_cores: 0.5,
            memory_bytes: 1 << 20,
        }],
        unacknowledged_ends: 1,
    });
    let server = serve(&listen("127.0.0.1:0"), metrics.clone()).await.expect("bound");
    let addr = server.addr();
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let got = common::http(addr, "GET", "/metrics").await.unwrap();
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.header("content-type"), Some(CONTENT_TYPE));
    let lines: Vec<&str> = got.body.lines().collect();
    for line in [
        "# TYPE hyperplan_agent_tasks_running gauge",
        "hyperplan_agent_tasks_running 1",
        "# TYPE hyperplan_agent_task_cpu_cores gauge",
        "hyperplan_agent_task_cpu_cores{job_id=\"42\",index=\"3\"} 0.5",
        "hyperplan_agent_task_memory_bytes{job_id=\"42\",index=\"3\"} 1048576",
        "hyperplan_agent_probe_duration_seconds 0.04",
        "hyperplan_agent_link_up 1",
        "hyperplan_agent_unacknowledged_task_ends 1",
    ] {
        assert!(lines.contains(&line), "no {line:?} in\n{}", got.body);
    }
    assert_eq!(lines.last(), Some(&"# EOF"), "{}", got.body);

    // The next scrape shows what was published since: the task ended, the link went down.
    metrics.set_tasks(TasksNow {
        running: vec![],
        unacknowledged_ends: 2,
    });
    metrics.set_link_up(false);
    let got = common::http(addr, "GET", "/metrics").await.unwrap();
    assert!(!got.body.contains("job_id="), "{}", got.body);
    for line in [
        "hyperplan_agent_tasks_running 0",
        "hyperplan_agent_link_up 0",
        "hyperplan_agent_unacknowledged_task_ends 2",
    ] {
        assert!(got.body.lines().any(|l| l == line), "no {line:?} in\n{}", got.body);
    }

    // Only GET /metrics.
    assert_eq!(common::http(addr, "GET", "/").await.unwrap().status, 404);
    assert_eq!(common::http(addr, "GET", "/metricsx").await.unwrap().status, 404);
    let post = common::http(addr, "POST", "/metrics").await.unwrap();
    assert_eq!((post.status, post.header("allow")), (405, Some("GET")), "{post:?}");

    // Dropped: no longer served.
    drop(server);
    let deadline = Instant::now() + WAIT;
    while common::http(addr, "GET", "/metrics")
        .await
        .is_ok_and(|a| a.status == 200)
    {
        assert!(Instant::now() < deadline, "still served after the server was dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_address_in_use_gives_no_server() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    assert!(serve(&listen(&addr), Metrics::new()).await.is_none());
}
