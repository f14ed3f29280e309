//! Happy-path parsing of the fixture files: cluster with manifest files, jobs in both formats.

use std::path::{Path, PathBuf};

use hyperplan_shared::hypernode::parse_hypernode_manifests;
use hyperplan_shared::*;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

#[test]
fn cluster_with_manifest_files() -> TestResult {
    let c = load_cluster_file(&fixture("cluster.yaml"))?;
    let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["gpu001", "gpu002", "gpu003"]);
    let n = &c.nodes[0];
    assert_eq!(n.resources.get(CPU), 128_000);
    assert_eq!(n.resources.get(MEMORY), 1 << 40);
    assert_eq!(n.resources.get("nvidia.com/gpu"), 8);
    assert_eq!(n.used.get(CPU), 64_000);
    assert_eq!(n.used.get("nvidia.com/gpu"), 4);
    assert_eq!(n.labels.get("leaf").map(String::as_str), Some("l1"));
    assert_eq!(c.nodes[1].resources, c.nodes[0].resources);
    assert!(c.nodes[1].used.is_empty());
    assert_eq!(c.nodes[2].resources.get(CPU), 1500);
    assert_eq!(c.nodes[2].resources.get(MEMORY), 1_500_000_000);

    let hn: Vec<(&str, u32)> = c.hyper_nodes.iter().map(|h| (h.name.as_str(), h.tier)).collect();
    assert_eq!(hn, [("leaf-1", 1), ("leaf-2", 1), ("spine-1", 2)]);
    assert_eq!(c.hyper_nodes[0].tier_name.as_deref(), Some("leaf"));
    assert_eq!(
        c.hyper_nodes[0].members,
        [Member {
            kind: MemberType::Node,
            selector: Selector::Regex {
                pattern: "^gpu00[1-2]$".into()
            }
        }]
    );
    assert_eq!(
        c.hyper_nodes[1].members,
        [Member {
            kind: MemberType::Node,
            selector: Selector::Exact { name: "gpu003".into() }
        }]
    );
    let spine = &c.hyper_nodes[2];
    assert_eq!(spine.tier_name, None);
    assert_eq!(spine.members.len(), 3);
    assert_eq!(spine.members[1].kind, MemberType::HyperNode);
    let Selector::Label {
        match_labels,
        match_expressions,
    } = &spine.members[2].selector
    else {
        return Err("expected a label selector".into());
    };
    assert_eq!(match_labels.get("spine").map(String::as_str), Some("s1"));
    assert_eq!(match_expressions.len(), 2);
    assert_eq!(match_expressions[0].values, ["l1", "l2"]);
    assert!(spine.members[2].selector.matches_labels(&c.nodes[0].labels));

    assert_eq!(
        c.label_discovery.get("fabric"),
        Some(&vec![
            "spine".to_string(),
            "leaf".to_string(),
            "kubernetes.io/hostname".to_string()
        ])
    );
    Ok(())
}

#[test]
fn multi_document_manifests_skip_empty_documents() -> TestResult {
    let text = std::fs::read_to_string(fixture("fabric.yaml"))?;
    let specs = parse_hypernode_manifests(&text, Path::new("fabric.yaml"))?;
    let names: Vec<&str> = specs.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["leaf-2", "spine-1"]);
    // Writing them back gives manifests that read back the same.
    let again = parse_hypernode_manifests(
        &hyperplan_shared::hypernode::to_hypernode_manifests(&specs),
        Path::new("x.yaml"),
    )?;
    assert_eq!(again, specs);
    Ok(())
}

#[test]
fn jobs_in_both_formats() -> TestResult {
    let jobs = load_job_file(&fixture("jobs.yaml"))?;
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["train-a", "small-1", "small-2", "network-topology-job"]);

    let a = &jobs[0];
    assert_eq!((a.priority, a.min_available, a.submit_time), (5, Some(16), 30));
    assert_eq!(
        a.network_topology,
        Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: Some(2),
            highest_tier_name: None
        })
    );
    let w = &a.tasks[0];
    assert_eq!((w.name.as_str(), w.replicas, w.runtime), ("worker", 16, Some(3600)));
    assert_eq!(w.resources.get("nvidia.com/gpu"), 8);
    assert_eq!(w.resources.get(MEMORY), 128 << 30);
    assert_eq!(w.topology_policy.as_deref(), Some("single-numa-node"));
    assert_eq!(w.command, ["/usr/bin/env"]);
    let p = w.partition_policy.as_ref().ok_or("partition policy")?;
    assert_eq!((p.total_partitions, p.partition_size, p.min_partitions), (2, 8, 2));
    assert_eq!(
        p.network_topology.as_ref().and_then(|t| t.highest_tier_allowed),
        Some(1)
    );

    let s1 = &jobs[1];
    assert_eq!(s1.min_available, None);
    assert_eq!(s1.gang_minimum(), 1);
    let t = s1.network_topology.as_ref().ok_or("topology")?;
    assert_eq!(
        (t.mode, t.highest_tier_name.as_deref()),
        (TopologyMode::Soft, Some("spine"))
    );
    assert_eq!(s1.tasks[0].resources.get(CPU), 500);
    assert_eq!(jobs[2].replicas(), 3);

    let v = &jobs[3];
    assert_eq!((v.priority, v.min_available, v.submit_time), (0, Some(4), 0));
    assert_eq!(
        v.network_topology.as_ref().and_then(|t| t.highest_tier_allowed),
        Some(2)
    );
    let t0 = &v.tasks[0];
    assert_eq!((t0.name.as_str(), t0.replicas, t0.runtime), ("t0", 8, None));
    // 4 + 0.5 CPU requested; the 8-CPU init container is larger and wins. Memory: the
    // first container's limit stands in for its missing request.
    assert_eq!(t0.resources.get(CPU), 8000);
    assert_eq!(t0.resources.get(MEMORY), (8 << 30) + (1 << 30));
    assert_eq!(t0.command, ["nginx", "-g", "daemon off;"]);
    assert_eq!(
        t0.partition_policy
            .as_ref()
            .map(|p| (p.total_partitions, p.partition_size)),
        Some((2, 4))
    );
    assert_eq!(v.tasks[1].name, "default1");
    assert_eq!(
        v.tasks[1].resources.get(CPU),
        1000,
        "a limit without a request is the request"
    );
    Ok(())
}

#[test]
fn unreadable_file_is_reported_at_line_zero() {
    let err = load_cluster_file(Path::new("does/not/exist.yaml"))
        .err()
        .map(|e| (e.line, e.column, e.field));
    assert_eq!(err, Some((0, 0, "-".to_string())));
}

#[test]
fn scalars_keep_their_source_text() -> TestResult {
    let text = "nodes:\n  - name: &n 007\n    labels: {a: &v 010, b: *v, c: yes, d: 1.50}\n    resources: {cpu: &c 1.50, nvidia.com/gpu: 0x10}\n  - name: n2\n    resources: {cpu: *c}\n";
    let c = parse_cluster(text, Path::new("c.yaml"))?;
    let n = &c.nodes[0];
    assert_eq!(n.name, "007");
    let labels: Vec<(&str, &str)> = n.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(labels, [("a", "010"), ("b", "010"), ("c", "yes"), ("d", "1.50")]);
    assert_eq!(n.resources.get(CPU), 1500);
    assert_eq!(n.resources.get("nvidia.com/gpu"), 16);
    assert_eq!(c.nodes[1].resources.get(CPU), 1500);
    Ok(())
}

#[test]
fn node_topology_sources_resolve_against_the_cluster_file() -> TestResult {
    let c = load_cluster_file(&fixture("topology-cluster.yaml"))?;
    match &c.nodes[0].topology {
        Some(TopologyRef::HwlocXml(p)) => assert!(p.is_file(), "{}", p.display()),
        other => panic!("expected an hwloc XML source, got {other:?}"),
    }
    assert!(c.nodes[0].resources.is_empty(), "derived later from the topology");
    assert_eq!(
        c.nodes[1].topology,
        Some(TopologyRef::Synthetic("pack:2 numa:2 core:8 pu:2".into()))
    );
    assert_eq!(c.nodes[1].resources.get(CPU), 32_000);
    // The writer keeps the source.
    let again = parse_cluster(&fattree::to_cluster_yaml(&c), &fixture("topology-cluster.yaml"))?;
    assert_eq!(again.nodes, c.nodes);
    Ok(())
}

#[test]
fn node_topology_errors() {
    let p = fixture("x.yaml");
    let err = |text: &str| parse_cluster(text, &p).err().map(|e| e.to_string()).unwrap_or_default();
    let e = err("nodes:\n  - name: a\n    topology: {hwlocXml: nope.xml}\n");
    assert!(
        e.contains("x.yaml:3:26: nodes[0].topology.hwlocXml: hwloc XML file") && e.contains("does not exist"),
        "{e}"
    );
    let e = err("nodes:\n  - name: a\n    topology: {synthetic: \"pu:2\", probe: p.json}\n");
    assert!(
        e.contains("nodes[0].topology: expected exactly one of hwlocXml, synthetic or probe"),
        "{e}"
    );
    let e = err("nodes:\n  - name: a\n");
    assert!(
        e.contains("expected `resources:` (or a `topology:` to derive them from)"),
        "{e}"
    );
}

#[test]
fn task_run_fields() -> TestResult {
    let text = r#"
name: train
timeLimit: 1h30m
masterPort: 29999
onTaskFailure: continue
requeue: true
priorityClassName: urgent
account: physics
preemptGrace: 2m
preemptSignal: SIGUSR1
onNodeLost: replace
tasks:
  - name: worker
    replicas: 2
    resources: {cpu: 1}
    command: [torchrun, train.py]
    env: {NCCL_DEBUG: INFO, OMP_NUM_THREADS: 4, _X: "", FLAG: true}
    workingDir: runs/a
    output: "../logs/%j-%t-%r.out"
    error: "%u/%n.err"
    maxProcesses: 512
  - name: server
    replicas: 1
    resources: {cpu: 1}
---
name: seconds
timeLimit: 3600
onTaskFailure: killJob
tasks: [{name: t, replicas: 1, resources: {cpu: 1}, workingDir: /scratch/alice}]
"#;
    let jobs = parse_jobs(text, Path::new("jobs.yaml"))?;
    let run = &jobs[0].run;
    assert_eq!(run.time_limit, Some(5400));
    assert_eq!(run.master_port, Some(29999));
    assert_eq!(run.on_task_failure, OnTaskFailure::Continue);
    assert!(run.requeue);
    assert_eq!(jobs[0].priority_class.as_deref(), Some("urgent"));
    assert_eq!(jobs[0].account.as_deref(), Some("physics"));
    assert_eq!(jobs[1].account, None);
    assert_eq!((run.preempt_grace, run.preempt_signal), (Some(120), Some(10)));
    assert_eq!((jobs[1].run.preempt_grace, jobs[1].run.preempt_signal), (None, None));
    assert_eq!(run.node_lost(), hyperplan_shared::job::OnNodeLost::Replace);
    assert_eq!(jobs[1].run.node_lost(), hyperplan_shared::job::OnNodeLost::Fail);
    let worker = &jobs[0].tasks[0];
    assert_eq!(worker.command, ["torchrun", "train.py"]);
    let env: Vec<(&str, &str)> = worker.exec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        env,
        [
            ("FLAG", "true"),
            ("NCCL_DEBUG", "INFO"),
            ("OMP_NUM_THREADS", "4"),
            ("_X", "")
        ]
    );
    assert_eq!(worker.exec.working_dir.as_deref(), Some("runs/a"));
    assert_eq!(worker.exec.output_pattern(), "../logs/%j-%t-%r.out");
    assert_eq!(worker.exec.error_pattern(), "%u/%n.err");
    assert_eq!(worker.exec.max_processes, Some(512));

    // Defaults: output to hyperplan-%j-%t.out, errors into the same file.
    let server = &jobs[0].tasks[1];
    assert_eq!(server.exec, TaskExec::default());
    assert_eq!(server.exec.output_pattern(), "hyperplan-%j-%t.out");
    assert_eq!(server.exec.error_pattern(), "hyperplan-%j-%t.out");

    assert_eq!(jobs[1].run.time_limit, Some(3600));
    assert_eq!(jobs[1].run.on_task_failure, OnTaskFailure::KillJob);
    assert!(!jobs[1].run.requeue);
    assert_eq!(jobs[1].run.master_port, None);
    assert_eq!(jobs[1].tasks[0].exec.working_dir.as_deref(), Some("/scratch/alice"));

    // Working directories: a file never sets the submit directory; the planner does, and
    // relative paths (and tasks without one) start there; absolute ones stand.
    assert!(jobs.iter().all(|j| j.submit_dir.is_none()));
    // A command and env past 1 MiB are refused here, not when a node gets the task.
    let big = format!(
        "name: j\ntasks: [{{name: t, replicas: 1, resources: {{cpu: 1}}, env: {{BIG: {}}}}}]\n",
        "x".repeat(2 << 20)
    );
    let e = parse_jobs(&big, Path::new("jobs.yaml"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("at most 1048576 bytes") && e.contains("env"),
        "{}",
        &e[..e.len().min(300)]
    );
    // No process at all is no task.
    let none = "name: j\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}, maxProcesses: 0}]\n";
    let e = parse_jobs(none, Path::new("jobs.yaml"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("jobs.yaml:2") && e.contains("maxProcesses") && e.contains("at least 1"),
        "{e}"
    );
    assert_eq!(jobs[0].working_dir(0), None, "relative, and nowhere to start from");
    let mut at_home = jobs.clone();
    for j in &mut at_home {
        j.submit_dir = Some("/home/alice/".into());
    }
    assert_eq!(at_home[0].working_dir(0).as_deref(), Some("/home/alice/runs/a"));
    assert_eq!(at_home[0].working_dir(1).as_deref(), Some("/home/alice/"));
    assert_eq!(at_home[1].working_dir(0).as_deref(), Some("/scratch/alice"));
    assert_eq!(at_home[0].working_dir(9), None, "no such task");
    Ok(())
}

#[test]
fn compat_slurm_none_and_default() -> TestResult {
    let text = "name: a\ncompat: slurm\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n---\nname: b\ncompat: none\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n---\nname: c\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n";
    let jobs = parse_jobs(text, Path::new("jobs.yaml"))?;
    let compat: Vec<_> = jobs.iter().map(|j| j.run.compat).collect();
    assert_eq!(compat, vec![job::Compat::Slurm, job::Compat::None, job::Compat::None]);
    Ok(())
}

#[test]
fn run_fields_default_when_absent() -> TestResult {
    for name in ["jobs.yaml", "volcano-job.yaml", "numa-jobs.yaml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name);
        for job in load_job_file(&path)? {
            assert_eq!(job.run, JobRun::default(), "{name}: {}", job.name);
            for t in &job.tasks {
                assert_eq!(t.exec, TaskExec::default(), "{name}: {}", job.name);
            }
        }
    }
    Ok(())
}

#[test]
fn segments_two_layers_and_a_partial_tail() -> TestResult {
    let text = "name: train\nsegments:\n  - {size: 16, tierName: nvlink, allowPartial: true}\n  - {size: 4, tier: 1, allowPartial: true}\ntasks:\n  - {name: leader, replicas: 1, resources: {cpu: 1}}\n  - {name: worker, replicas: 16, resources: {cpu: 1}}\n";
    let jobs = parse_jobs(text, Path::new("jobs.yaml"))?;
    let s = &jobs[0].segments;
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].size, s[0].tier_name.as_deref(), s[0].allow_partial),
        (16, Some("nvlink"), true)
    );
    assert_eq!((s[1].size, s[1].tier, s[1].tier_name.as_deref()), (4, Some(1), None));
    // Kept through the store's JSON, and absent from a job without.
    let json = serde_json::to_string(&jobs[0])?;
    let back: hyperplan_shared::JobSpec = serde_json::from_str(&json)?;
    assert_eq!(back.segments, *s);
    let plain = parse_jobs(
        "name: p\ntasks:\n  - {name: w, replicas: 1, resources: {cpu: 1}}\n",
        Path::new("j.yaml"),
    )?;
    assert!(!serde_json::to_string(&plain[0])?.contains("segments"));
    Ok(())
}
