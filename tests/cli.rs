//! End-to-end tests of the `hyperplan` binary: `simulate` on the examples and on bad
//! input, and `cluster generate fat-tree`. They run the real binary.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn hyperplan(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .current_dir(dir)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run hyperplan: {e}"))
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

#[test]
fn simulate_examples_json_has_the_documented_fields() {
    let out = hyperplan(
        root(),
        &[
            "simulate",
            "--cluster",
            "examples/cluster.yaml",
            "--jobs",
            "examples/jobs.yaml",
            "--output",
            "json",
        ],
    );
    let v = json(&out);
    let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 6);
    let train = &jobs[0];
    assert_eq!(train["name"], "train-a");
    assert_eq!(train["status"], "placed");
    assert_eq!(train["reason"], Value::Null);
    assert_eq!(train["submitTime"], 0);
    assert_eq!(train["startTime"], 0);
    assert_eq!(train["endTime"], 3600);
    assert_eq!(train["allocatedHyperNode"], "spine-2");
    let t0 = &train["tasks"][0];
    assert_eq!(t0["name"], "worker-0");
    assert_eq!(t0["rank"], 0);
    assert_eq!(t0["subJob"], "train-a/worker-0");
    assert_eq!(t0["node"], "gpu017");
    assert_eq!(t0["hyperNodes"], serde_json::json!(["leaf-3", "spine-2"]));
    let rejected = jobs
        .iter()
        .find(|j| j["name"] == "too-wide-e")
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejected["status"], "rejected");
    assert!(
        rejected["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().all(|t| t["node"].is_null()))
    );
    assert_eq!(
        v["summary"],
        serde_json::json!({"placed": 5, "pending": 0, "rejected": 1, "makespan": 4800})
    );
    assert_eq!(v["warnings"], serde_json::json!([]));
}

#[test]
fn simulate_examples_table() {
    let out = hyperplan(
        root(),
        &[
            "simulate",
            "--cluster",
            "examples/cluster.yaml",
            "--jobs",
            "examples/jobs.yaml",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn yaml_output_is_the_same_report() {
    let args = [
        "simulate",
        "--cluster",
        "examples/cluster.yaml",
        "--jobs",
        "examples/jobs.yaml",
        "--output",
    ];
    let out = hyperplan(root(), &[&args[..], &["yaml"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let y = text(&out.stdout);
    assert!(y.contains("allocatedHyperNode: spine-2"), "{y}");
    assert!(y.contains("makespan: 4800"), "{y}");
}

/// Writes `files` into a fresh directory and runs `simulate` there with relative paths,
/// so error messages are the same on every machine.
fn simulate_in(files: &[(&str, &str)], extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut args = vec!["simulate", "--cluster", "cluster.yaml", "--jobs", "jobs.yaml"];
    args.extend_from_slice(extra);
    hyperplan(dir.path(), &args)
}

const CLUSTER: &str =
    "nodes:\n  - {name: n1, resources: {cpu: 8, memory: 16Gi}}\n  - {name: n2, resources: {cpu: 8, memory: 16Gi}}\n";
const JOBS: &str = "name: j\ntasks:\n  - name: w\n    replicas: 2\n    resources: {cpu: 4}\n";

fn failure(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure, got: {}", text(&out.stdout));
    assert!(
        out.stdout.is_empty(),
        "no partial result on error: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

#[test]
fn bad_input_errors_name_file_line_column_and_field() {
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "yaml_syntax",
            vec![
                ("cluster.yaml", "nodes:\n  - {name: n1, resources: {cpu: 8}\n"),
                ("jobs.yaml", JOBS),
            ],
        ),
        (
            "unknown_field",
            vec![
                ("cluster.yaml", "nodes:\n  - name: n1\n    resource: {cpu: 8}\n"),
                ("jobs.yaml", JOBS),
            ],
        ),
        (
            "negative_cpu",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: -2}\n",
                ),
            ],
        ),
        (
            "duplicate_node",
            vec![
                (
                    "cluster.yaml",
                    "nodes:\n  - {name: n1, resources: {cpu: 8}}\n  - {name: n1, resources: {cpu: 8}}\n",
                ),
                ("jobs.yaml", JOBS),
            ],
        ),
        (
            "partitions_mismatch",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\ntasks:\n  - name: w\n    replicas: 5\n    resources: {cpu: 1}\n    partitionPolicy: {totalPartitions: 2, partitionSize: 2}\n",
                ),
            ],
        ),
        (
            "min_available_too_big",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\nminAvailable: 3\ntasks:\n  - name: w\n    replicas: 2\n    resources: {cpu: 1}\n",
                ),
            ],
        ),
        (
            "both_tier_limits",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\nnetworkTopology: {mode: hard, highestTierAllowed: 1, highestTierName: leaf}\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n",
                ),
            ],
        ),
        (
            "missing_hypernode_file",
            vec![
                (
                    "cluster.yaml",
                    "nodes:\n  - {name: n1, resources: {cpu: 8}}\nhyperNodeFiles: [fabric.yaml]\n",
                ),
                ("jobs.yaml", JOBS),
            ],
        ),
        (
            "fractional_cpu_with_numa_policy",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\ntasks:\n  - name: w\n    replicas: 1\n    topologyPolicy: restricted\n    resources: {cpu: 1500m}\n",
                ),
            ],
        ),
        (
            "unknown_cpu_placement",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "name: j\ntasks:\n  - name: w\n    replicas: 1\n    cpuPlacement: scattered\n    resources: {cpu: 1}\n",
                ),
            ],
        ),
        (
            "duplicate_job",
            vec![
                ("cluster.yaml", CLUSTER),
                (
                    "jobs.yaml",
                    "- name: j\n  tasks: [{name: w, replicas: 1, resources: {cpu: 1}}]\n- name: j\n  tasks: [{name: w, replicas: 1, resources: {cpu: 1}}]\n",
                ),
            ],
        ),
    ];
    for (name, files) in cases {
        let err = failure(&simulate_in(&files, &[]));
        insta::assert_snapshot!(name, err);
    }
    let err = failure(&simulate_in(&[("jobs.yaml", JOBS)], &[]));
    assert!(err.contains("cluster.yaml"), "{err}");
}

#[test]
fn structural_hypernode_problems_are_warnings_not_errors() {
    let cluster = format!(
        "{CLUSTER}hyperNodes:\n  - {{name: a, tier: 2, members: [{{type: HyperNode, selector: {{exactMatch: {{name: b}}}}}}]}}\n  - {{name: b, tier: 1, members: [{{type: HyperNode, selector: {{exactMatch: {{name: a}}}}}}]}}\n  - {{name: leaf, tier: 1, members: [{{type: Node, selector: {{regexMatch: {{pattern: \"^n[12]$\"}}}}}}]}}\n  - {{name: bad, tier: 1, members: [{{type: Node, selector: {{regexMatch: {{pattern: \"n(\"}}}}}}]}}\n"
    );
    let out = simulate_in(
        &[("cluster.yaml", &cluster), ("jobs.yaml", JOBS)],
        &["--output", "json"],
    );
    let v = json(&out);
    let warnings: Vec<String> = v["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(String::from))
        .collect();
    insta::assert_snapshot!(warnings.join("\n"));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("warning: HyperNode a left out: cycle"), "{stderr}");
    assert_eq!(v["jobs"][0]["status"], "placed");
}

#[test]
fn generated_fat_tree_round_trips_through_simulate() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = hyperplan(
        dir.path(),
        &[
            "cluster", "generate", "fat-tree", "--nodes", "64", "--fanout", "4,4", "--busy", "0.25", "--seed", "7",
            "-o", "gen.yaml",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("gen.hypernodes.yaml").exists());
    std::fs::write(
        dir.path().join("jobs.yaml"),
        "name: j\nnetworkTopology: {mode: hard, highestTierAllowed: 1}\ntasks:\n  - name: w\n    replicas: 3\n    resources: {cpu: 128, nvidia.com/gpu: 8}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let v = json(&hyperplan(
        dir.path(),
        &[
            "simulate",
            "--cluster",
            "gen.yaml",
            "--jobs",
            "jobs.yaml",
            "--output",
            "json",
        ],
    ));
    assert_eq!(v["jobs"][0]["status"], "placed");
    let leaf = v["jobs"][0]["allocatedHyperNode"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(leaf.starts_with("leaf-"), "{leaf}");
    // Same seed, same file.
    let again = hyperplan(
        dir.path(),
        &[
            "cluster", "generate", "fat-tree", "--nodes", "64", "--fanout", "4,4", "--busy", "0.25", "--seed", "7",
        ],
    );
    assert!(again.status.success());
    let one = hyperplan(
        dir.path(),
        &[
            "cluster", "generate", "fat-tree", "--nodes", "64", "--fanout", "4,4", "--busy", "0.25", "--seed", "7",
        ],
    );
    assert_eq!(one.stdout, again.stdout);
}

#[test]
fn help_teaches() {
    let out = hyperplan(root(), &["simulate", "--help"]);
    let help = text(&out.stdout);
    for needle in ["--cluster", "--jobs", "--output", "--config", "virtual time", "Example"] {
        assert!(help.contains(needle), "missing {needle} in:\n{help}");
    }
}

#[test]
fn volcano_job_manifest_is_accepted() {
    let v = json(&hyperplan(
        root(),
        &[
            "simulate",
            "--cluster",
            "examples/cluster.yaml",
            "--jobs",
            "examples/volcano-job.yaml",
            "--output",
            "json",
        ],
    ));
    let j = &v["jobs"][0];
    assert_eq!(j["name"], "volcano-llm");
    assert_eq!(j["status"], "placed");
    assert_eq!(j["allocatedHyperNode"], "leaf-1");
    // 8 pods × (4 GPUs, 30.5 CPUs) on 8-GPU nodes: two per node.
    let nodes: std::collections::BTreeSet<&str> = j["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["node"].as_str())
        .collect();
    assert_eq!(nodes.len(), 4, "{nodes:?}");
}

#[test]
fn nodes_described_by_their_hardware_get_resources_from_it() {
    let data = root().join("testdata/hwloc-xml");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dgx = data.join("xml__nvidiaDGX2.xml");
    let cluster = format!(
        "nodes:\n  - {{name: dgx-1, topology: {{hwlocXml: {}}}}}\n  - {{name: dgx-2, topology: {{hwlocXml: {}}}}}\n  - {{name: cpu-1, topology: {{synthetic: \"pack:2 numa:2 core:8 pu:2\"}}}}\n",
        dgx.display(),
        dgx.display()
    );
    std::fs::write(dir.path().join("cluster.yaml"), cluster).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        dir.path().join("jobs.yaml"),
        "- name: gpus\n  tasks: [{name: w, replicas: 2, resources: {cpu: 1, nvidia.com/gpu: 16}}]\n- name: cpus\n  tasks: [{name: w, replicas: 1, resources: {cpu: 64}}]\n- name: too-many\n  tasks: [{name: w, replicas: 1, resources: {cpu: 1, nvidia.com/gpu: 17}}]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let v = json(&hyperplan(
        dir.path(),
        &[
            "simulate",
            "--cluster",
            "cluster.yaml",
            "--jobs",
            "jobs.yaml",
            "--output",
            "json",
        ],
    ));
    let job = |n: &str| {
        v["jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["name"] == n)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(job("gpus")["status"], "placed", "16 probed V100s per DGX-2");
    assert_eq!(
        job("cpus")["tasks"][0]["node"],
        "cpu-1",
        "64 PUs from the synthetic topology"
    );
    assert_eq!(job("too-many")["status"], "rejected");
}

/// The NUMA example: the task table people read, and the pinning fields of the JSON.
#[test]
fn numa_example_pins_tasks() {
    let args = [
        "simulate",
        "--cluster",
        "examples/numa-cluster.yaml",
        "--jobs",
        "examples/numa-jobs.yaml",
    ];
    let out = hyperplan(root(), &[&args[..], &["--output", "tasks"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout));
    let v = json(&hyperplan(root(), &[&args[..], &["--output", "json"]].concat()));
    let rank0 = &v["jobs"][0]["tasks"][0];
    assert_eq!(v["jobs"][0]["name"], "llm-train");
    assert_eq!(rank0["cpus"], "0-23,112-135");
    assert_eq!(rank0["numaNodes"], serde_json::json!([0]));
    assert_eq!(rank0["memoryNuma"], serde_json::json!({"0": 549755813888u64}));
    assert_eq!(
        rank0["gpus"],
        serde_json::json!(["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"])
    );
    assert_eq!(
        rank0["nics"],
        serde_json::json!(["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    );
}

/// Issue 12 item 5: `submit - < /dev/zero` used to read until memory ran out; now it stops
/// at the job-file limit, before connecting anywhere, and says the limit.
#[test]
fn submit_refuses_endless_stdin_and_huge_files() {
    let zero = std::fs::File::open("/dev/zero").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_hyperplan"))
        .args(["submit", "-", "--planner", "127.0.0.1:9"])
        .stdin(zero)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run hyperplan: {e}"));
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "hyperplan: cannot read a job file from standard input: standard input is larger than the limit of 8 MiB \
         for a job file (see Limits in README.md)\n"
    );

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(9 << 20)).unwrap_or_else(|e| panic!("{e}"));
    let out = hyperplan(dir.path(), &["submit", "big.yaml", "--planner", "127.0.0.1:9"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr),
        "hyperplan: the job file big.yaml is larger than the limit of 8 MiB for a job file \
         (see Limits in README.md)\n"
    );
}
