//! Rendered error messages for broken user files: `FILE:LINE:COLUMN: FIELD: message`.

use std::path::Path;

use hyperplan_shared::hypernode::{parse_hypernode_files, parse_hypernode_manifests};
use hyperplan_shared::{parse_cluster, parse_jobs};

fn cluster_error(text: &str) -> String {
    match parse_cluster(text, Path::new("cluster.yaml")) {
        Ok(c) => format!("unexpectedly parsed: {c:?}"),
        Err(e) => e.to_string(),
    }
}

fn job_error(text: &str) -> String {
    match parse_jobs(text, Path::new("jobs.yaml")) {
        Ok(j) => format!("unexpectedly parsed: {j:?}"),
        Err(e) => e.to_string(),
    }
}

fn manifest_error(text: &str) -> String {
    match parse_hypernode_manifests(text, Path::new("fabric.yaml")) {
        Ok(h) => format!("unexpectedly parsed: {h:?}"),
        Err(e) => e.to_string(),
    }
}

const NODE: &str = "nodes:\n  - name: gpu001\n    resources: {cpu: 128, memory: 1Ti}\n";

#[test]
fn yaml_syntax_error() {
    insta::assert_snapshot!(cluster_error("nodes:\n  - name: gpu001\n    resources: {cpu: 128\n"));
}

#[test]
fn unknown_field_in_cluster_file() {
    insta::assert_snapshot!(cluster_error(
        "nodes:\n  - name: gpu001\n    resources: {cpu: 1}\n    rack: leaf-1\n"
    ));
}

#[test]
fn negative_cpu_quantity() {
    insta::assert_snapshot!(cluster_error(
        "nodes:\n  - name: gpu001\n    resources:\n      cpu: -2\n"
    ));
}

#[test]
fn bad_memory_unit() {
    insta::assert_snapshot!(cluster_error(
        "nodes:\n  - name: gpu001\n    resources: {cpu: 1, memory: 16GB}\n"
    ));
}

#[test]
fn duplicate_node_name() {
    insta::assert_snapshot!(cluster_error(&format!(
        "{NODE}  - name: gpu001\n    resources: {{cpu: 1}}\n"
    )));
}

#[test]
fn used_exceeds_resources() {
    insta::assert_snapshot!(cluster_error(&format!("{NODE}    used: {{cpu: 100, memory: 2Ti}}\n")));
}

#[test]
fn missing_hypernode_file() {
    insta::assert_snapshot!(cluster_error(&format!(
        "{NODE}hyperNodeFiles:\n  - no-such-fabric.yaml\n"
    )));
}

#[test]
fn duplicate_hypernode_name() {
    let h = "  - {name: leaf-1, tier: 1, members: [{type: Node, selector: {exactMatch: {name: gpu001}}}]}\n";
    insta::assert_snapshot!(cluster_error(&format!("{NODE}hyperNodes:\n{h}{h}")));
}

#[test]
fn two_selectors_in_a_member() {
    insta::assert_snapshot!(cluster_error(&format!(
        "{NODE}hyperNodes:\n  - name: leaf-1\n    tier: 1\n    members:\n      - type: Node\n        selector:\n          exactMatch: {{name: gpu001}}\n          regexMatch: {{pattern: gpu}}\n"
    )));
}

#[test]
fn wrong_kind_in_manifest() {
    insta::assert_snapshot!(manifest_error(
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: a}\nspec: {tier: 1, members: [{type: Node, selector: {exactMatch: {name: n}}}]}\n---\napiVersion: topology.volcano.sh/v1alpha1\nkind: Hypernode\nmetadata: {name: b}\n"
    ));
}

const JOB_HEAD: &str = "name: train-a\ntasks:\n  - name: worker\n";
/// Every task asks for CPU (item 7); written last so the lines of the errors stay put.
const CPU: &str = "    resources: {cpu: 1}\n";

#[test]
fn replicas_not_partitions_times_size() {
    insta::assert_snapshot!(job_error(&format!(
        "{JOB_HEAD}    replicas: 16\n    partitionPolicy: {{totalPartitions: 2, partitionSize: 4}}\n{CPU}"
    )));
}

#[test]
fn min_partitions_above_total() {
    insta::assert_snapshot!(job_error(&format!(
        "{JOB_HEAD}    replicas: 8\n    partitionPolicy: {{totalPartitions: 2, partitionSize: 4, minPartitions: 3}}\n{CPU}"
    )));
}

#[test]
fn min_available_above_replicas() {
    insta::assert_snapshot!(job_error(
        "name: train-a\nminAvailable: 17\ntasks:\n  - {name: worker, replicas: 16, resources: {cpu: 1}}\n"
    ));
}

#[test]
fn both_tier_limits() {
    insta::assert_snapshot!(job_error(&format!(
        "{JOB_HEAD}    replicas: 8\n    partitionPolicy:\n      totalPartitions: 2\n      partitionSize: 4\n      networkTopology: {{mode: hard, highestTierAllowed: 1, highestTierName: leaf}}\n{CPU}"
    )));
}

#[test]
fn zero_replicas() {
    insta::assert_snapshot!(job_error(&format!("{JOB_HEAD}    replicas: 0\n{CPU}")));
}

#[test]
fn duplicate_job_names_across_documents() {
    insta::assert_snapshot!(job_error(
        "name: a\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n---\n- name: b\n  tasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n- name: a\n  tasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n"
    ));
}

#[test]
fn duplicate_task_names() {
    insta::assert_snapshot!(job_error(
        "name: a\ntasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}}\n  - {name: t, replicas: 2, resources: {cpu: 1}}\n"
    ));
}

#[test]
fn unknown_topology_policy() {
    insta::assert_snapshot!(job_error(&format!(
        "{JOB_HEAD}    replicas: 1\n    topologyPolicy: numa\n{CPU}"
    )));
}

#[test]
fn unknown_topology_mode() {
    insta::assert_snapshot!(job_error(
        "name: a\nnetworkTopology: {mode: strict}\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n"
    ));
}

#[test]
fn negative_runtime() {
    insta::assert_snapshot!(job_error(&format!("{JOB_HEAD}    replicas: 1\n    runtime: -5\n{CPU}")));
}

#[test]
fn volcano_job_bad_request() {
    insta::assert_snapshot!(job_error(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n    - replicas: 2\n      template:\n        spec:\n          containers:\n            - resources:\n                requests: {memory: 1.5}\n"
    ));
}

#[test]
fn missing_task_field() {
    insta::assert_snapshot!(job_error("name: a\ntasks:\n  - {name: t}\n"));
}

#[test]
fn a_hypernode_defined_in_two_files_names_both_and_the_line() {
    let manifest = |name: &str| {
        format!(
            "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata:\n  name: {name}\nspec:\n  tier: 1\n  \
             members:\n    - {{type: Node, selector: {{exactMatch: {{name: n1}}}}}}\n"
        )
    };
    let (a, b) = (
        manifest("leaf-1"),
        format!("{}---\n{}", manifest("leaf-2"), manifest("\"leaf-1\"")),
    );
    let files = [(Path::new("a.yaml"), a.as_str()), (Path::new("b.yaml"), b.as_str())];
    let got = match parse_hypernode_files(files) {
        Ok(h) => format!("unexpectedly parsed: {h:?}"),
        Err(e) => e.to_string(),
    };
    insta::assert_snapshot!(got, @r#"b.yaml:13:3: metadata.name: HyperNode "leaf-1" is also defined in a.yaml; names must be unique"#);
    let ok = parse_hypernode_files([(Path::new("a.yaml"), a.as_str())]).map(|h| h.len());
    assert_eq!(ok, Ok(1));
}

// Issue 12 item 7: every task asks for cpu > 0.

#[test]
fn task_without_cpu() {
    // A job file cut in the middle of a task.
    insta::assert_snapshot!(job_error("name: a\ntasks:\n  - name: t\n    replicas: 100000\n"));
}

#[test]
fn task_with_zero_cpu() {
    insta::assert_snapshot!(job_error(
        "name: a\ntasks:\n  - name: t\n    replicas: 1\n    resources: {cpu: 0, memory: 1Gi}\n"
    ));
}

#[test]
fn volcano_task_without_cpu() {
    insta::assert_snapshot!(job_error(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n    - name: w\n      replicas: 2\n"
    ));
}

// Issue 12 item 8: names are 1-253 (jobs and tasks 1-63) of [A-Za-z0-9._-], starting
// with a letter or digit.

#[test]
fn job_name_with_terminal_escape() {
    insta::assert_snapshot!(job_error(
        "name: \"evil\\e[2J\"\ntasks: [{name: t, replicas: 1, resources: {cpu: 1}}]\n"
    ));
}

#[test]
fn task_name_too_long() {
    insta::assert_snapshot!(job_error(&format!(
        "name: a\ntasks:\n  - {{name: {}, replicas: 1, resources: {{cpu: 1}}}}\n",
        "t".repeat(64)
    )));
}

#[test]
fn volcano_job_name_with_a_newline() {
    insta::assert_snapshot!(job_error(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: \"a\\nb\"}\nspec:\n  tasks: [{replicas: 1}]\n"
    ));
}

#[test]
fn node_name_walks_out_of_a_directory() {
    insta::assert_snapshot!(cluster_error(
        "nodes:\n  - name: ../../etc/passwd\n    resources: {cpu: 1}\n"
    ));
}

#[test]
fn hypernode_name_with_a_bidi_override() {
    insta::assert_snapshot!(cluster_error(&format!(
        "{NODE}hyperNodes:\n  - {{name: \"leaf\\u202e1\", tier: 1, members: [{{type: Node, selector: {{exactMatch: {{name: gpu001}}}}}}]}}\n"
    )));
}

#[test]
fn exact_member_name_must_be_a_name() {
    insta::assert_snapshot!(manifest_error(
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: s1}\nspec:\n  tier: 2\n  members:\n    - {type: HyperNode, selector: {exactMatch: {name: \"-leaf\"}}}\n"
    ));
}

#[test]
fn manifest_name_with_nul() {
    insta::assert_snapshot!(manifest_error(
        "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\nmetadata: {name: \"s\\0\"}\nspec:\n  tier: 1\n  members: [{type: Node, selector: {exactMatch: {name: n1}}}]\n"
    ));
}

// Issue 12 item 5: file sizes are limited, and the error says the limit and the file.

#[test]
fn job_text_over_the_limit() {
    let text = format!("# {}\n", "x".repeat(hyperplan_shared::limits::MAX_JOB_FILE as usize));
    insta::assert_snapshot!(job_error(&text));
}

#[test]
fn endless_files_are_cut_at_the_limit() {
    // /dev/zero never ends: reading it whole used to grow memory until the machine gave up.
    let job = match hyperplan_shared::load_job_file(Path::new("/dev/zero")) {
        Ok(jobs) => format!("unexpectedly parsed {} jobs", jobs.len()),
        Err(e) => e.to_string(),
    };
    insta::assert_snapshot!(job);
    let cluster = match hyperplan_shared::load_cluster_file(Path::new("/dev/zero")) {
        Ok(c) => format!("unexpectedly parsed {} nodes", c.nodes.len()),
        Err(e) => e.to_string(),
    };
    insta::assert_snapshot!(cluster);
}

// Job fields for running tasks: env, workingDir, output, error, timeLimit, masterPort,
// onTaskFailure, requeue.

fn task_field(field: &str) -> String {
    job_error(&format!("{JOB_HEAD}    replicas: 1\n{field}\n{CPU}"))
}

fn job_field(field: &str) -> String {
    job_error(&format!(
        "name: train-a\n{field}\ntasks: [{{name: worker, replicas: 1, resources: {{cpu: 1}}}}]\n"
    ))
}

#[test]
fn env_name_with_a_dash() {
    insta::assert_snapshot!(task_field("    env: {PATH: /bin, \"MY-VAR\": x}"));
}

#[test]
fn env_name_starting_with_a_digit() {
    insta::assert_snapshot!(task_field("    env:\n      1ST: x"));
}

#[test]
fn env_value_with_nul() {
    insta::assert_snapshot!(task_field("    env: {A: \"x\\0y\"}"));
}

#[test]
fn env_value_not_a_string() {
    insta::assert_snapshot!(task_field("    env: {A: [1, 2]}"));
}

#[test]
fn env_not_a_map() {
    insta::assert_snapshot!(task_field("    env: [A=1]"));
}

#[test]
fn working_dir_empty() {
    insta::assert_snapshot!(task_field("    workingDir: \"\""));
}

#[test]
fn working_dir_with_nul() {
    insta::assert_snapshot!(task_field("    workingDir: \"/tmp/a\\0b\""));
}

#[test]
fn output_with_unknown_placeholder() {
    insta::assert_snapshot!(task_field("    output: \"logs/%j-%q.out\""));
}

#[test]
fn error_with_a_lone_percent() {
    insta::assert_snapshot!(task_field("    error: \"100%\""));
}

#[test]
fn output_empty() {
    insta::assert_snapshot!(task_field("    output: \"\""));
}

#[test]
fn time_limit_missing_unit() {
    insta::assert_snapshot!(job_field("timeLimit: 1h30"));
}

#[test]
fn time_limit_units_out_of_order() {
    insta::assert_snapshot!(job_field("timeLimit: 30m1h"));
}

#[test]
fn time_limit_zero() {
    insta::assert_snapshot!(job_field("timeLimit: 0"));
}

#[test]
fn time_limit_negative() {
    insta::assert_snapshot!(job_field("timeLimit: -5"));
}

#[test]
fn master_port_below_1024() {
    insta::assert_snapshot!(job_field("masterPort: 80"));
}

#[test]
fn master_port_above_65535() {
    insta::assert_snapshot!(job_field("masterPort: 70000"));
}

#[test]
fn master_port_not_a_number() {
    insta::assert_snapshot!(job_field("masterPort: auto"));
}

#[test]
fn on_task_failure_unknown() {
    insta::assert_snapshot!(job_field("onTaskFailure: ignore"));
}

#[test]
fn requeue_not_a_bool() {
    insta::assert_snapshot!(job_field("requeue: sometimes"));
}

#[test]
fn mpi_unknown() {
    insta::assert_snapshot!(job_field("mpi: pmix"), @r#"jobs.yaml:2:6: mpi: expected pmi (a PMI-1 server for MPICH, Intel MPI, MVAPICH) or none, got "pmix""#);
}

#[test]
fn compat_unknown() {
    insta::assert_snapshot!(job_field("compat: pbs"), @r#"jobs.yaml:2:9: compat: expected none or slurm (the tasks also get the SLURM_* variables), got "pbs""#);
}

#[test]
fn launch_unknown() {
    insta::assert_snapshot!(job_field("launch: interactive"), @r#"jobs.yaml:2:9: launch: expected tasks (one process per rank) or batch (the command once, on rank 0's node, with the allocation), got "interactive""#);
}

#[test]
fn preempt_signal_uncatchable() {
    insta::assert_snapshot!(job_field("preemptSignal: KILL"), @r#"jobs.yaml:2:16: preemptSignal: expected a signal a task can catch (USR1, USR2, TERM, INT, HUP, … or its number), got "KILL""#);
}

#[test]
fn preempt_grace_not_a_duration() {
    insta::assert_snapshot!(job_field("preemptGrace: soon"), @r#"jobs.yaml:2:15: preemptGrace: expected seconds (e.g. 3600) or a duration like 90m, 1h30m, 2h, 45s, 1d, got "soon""#);
}

#[test]
fn priority_class_name_bad() {
    insta::assert_snapshot!(job_field("priorityClassName: \"a b\""), @r#"jobs.yaml:2:20: priorityClassName: expected a priority class name of 1-63 letters, digits, `.`, `_` or `-` starting with a letter or digit, got "a b": a space is not allowed"#);
}

#[test]
fn account_bad() {
    insta::assert_snapshot!(job_field("account: \"phys ics\""), @r#"jobs.yaml:2:10: account: expected an account name of 1-63 letters, digits, `.`, `_` or `-` starting with a letter or digit, got "phys ics": a space is not allowed"#);
}

#[test]
fn on_node_lost_unknown() {
    insta::assert_snapshot!(job_field("onNodeLost: retry"), @r#"jobs.yaml:2:13: onNodeLost: expected fail, requeue or replace (the lost tasks again on spare nodes of the job's HyperNode), got "retry""#);
}

/// `segments` (issue 27): a leader and 63 workers, two layers.
const SEGMENT_JOB: &str = "name: train\nsegments:\n";
const SEGMENT_TASKS: &str = "tasks:\n  - {name: leader, replicas: 1, resources: {cpu: 1}}\n  - {name: worker, replicas: 63, resources: {cpu: 1}}\n";

#[test]
fn segment_sizes_must_nest() {
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 16, tierName: nvlink}}\n  - {{size: 6, tierName: tray}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:4:12: segments[1].size: expected a size that divides the outer layer's 16, got 6");
}

#[test]
fn segment_ranks_not_a_multiple_say_allow_partial() {
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 24, tierName: nvlink}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:3:12: segments[0].size: the job's 64 ranks are not a multiple of 24; give allowPartial: true to let the last segment be smaller");
    // Allowed at the outer layer, the tail of 16 still splits into 4s; not into 6s.
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 24, tierName: nvlink, allowPartial: true}}\n  - {{size: 12, tierName: tray}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:4:12: segments[1].size: the last outer segment's 16 ranks are not a multiple of 12; give allowPartial: true to let the last segment be smaller");
}

#[test]
fn segments_need_a_tier_and_no_partitions_beside_them() {
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 16}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:3:5: segments[0].tierName: expected the tier each segment stays inside, e.g. tierName: nvlink");
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 16, tierName: nvlink, tier: 1}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:3:26: segments[0].tierName: expected tierName or tier, not both");
    insta::assert_snapshot!(job_error(&format!(
        "{SEGMENT_JOB}  - {{size: 4, tierName: nvlink}}\ntasks:\n  - name: w\n    replicas: 8\n    partitionPolicy: {{totalPartitions: 2, partitionSize: 4}}\n    resources: {{cpu: 1}}\n"
    )), @"jobs.yaml:3:3: segments: expected segments or a task's partitionPolicy, not both (segments generalise partitions)");
    insta::assert_snapshot!(job_error(&format!(
        "name: train\nminAvailable: 32\nsegments:\n  - {{size: 16, tierName: nvlink}}\n{SEGMENT_TASKS}"
    )), @"jobs.yaml:2:15: minAvailable: expected no minAvailable or all 64 ranks with segments (each segment is whole), got 32");
}

#[test]
fn a_nul_byte_in_a_command_is_refused_at_submit() {
    let said = job_error(
        "name: j\ntasks:\n  - name: w\n    replicas: 1\n    resources: {cpu: 1}\n    command: [sh, \"-c\\0x\"]\n",
    );
    assert!(
        said.contains("command: expected arguments without NUL bytes, argument 1 has one"),
        "{said}"
    );
}

/// The agent reads a task's output for `hyperplan logs`: `/proc/self/fd/1` would be its own.
#[test]
fn an_output_in_the_kernels_trees_is_refused_at_submit() {
    let job = |exec: &str| {
        job_error(&format!(
            "name: j\ntasks:\n  - name: w\n    replicas: 1\n    resources: {{cpu: 1}}\n    command: [true]\n{exec}"
        ))
    };
    insta::assert_snapshot!(job("    output: /proc/self/fd/1\n"), @"jobs.yaml:7:13: tasks[0].output: expected a file outside /proc, /sys and /dev (/dev/null aside), got /proc/self/fd/1: the kernel's files are no task's output");
    insta::assert_snapshot!(job("    workingDir: /tmp\n    error: ../sys/x\n"), @"jobs.yaml:8:12: tasks[0].error: expected a file outside /proc, /sys and /dev (/dev/null aside), got /tmp/../sys/x: the kernel's files are no task's output");
    insta::assert_snapshot!(job("    workingDir: /proc/self/fd\n"), @"jobs.yaml:7:17: tasks[0].workingDir: expected a file outside /proc, /sys and /dev (/dev/null aside), got /proc/self/fd/hyperplan-j-t.out: the kernel's files are no task's output");
    assert!(job("    output: /dev/null\n").starts_with("unexpectedly parsed"));
}
