//! Batch scripts with `#SBATCH` lines: a script in the style of sites' documentation
//! mapped to its job, and the errors a mistyped script gets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use hyperplan_shared::job::{LaunchMode, NetworkTopology, TaskExec, TopologyMode};
use hyperplan_shared::sbatch::{Batch, BatchInput, Directives, build_job, read_command_line, read_script};
use hyperplan_shared::{CPU, JobSpec, MEMORY};

const SCRIPT: &str = r#"#!/bin/bash
#SBATCH --job-name=cfd-run          # Job name
#SBATCH --partition=gpu             # Partition (a hyperplan queue)
#SBATCH --nodes=2                   # Number of nodes
#SBATCH --ntasks-per-node=4         # MPI ranks per node
#SBATCH --cpus-per-task=4           # OpenMP threads per rank
#SBATCH --mem=256G                  # Memory per node
#SBATCH --gres=gpu:4                # GPUs per node
#SBATCH --time=1-12:00:00           # Time limit days-hrs:min:sec
#SBATCH --output=logs/%x-%j.out     # Standard output
#SBATCH --error=logs/%x-%j.err      # Standard error
#SBATCH --chdir=/scratch/alice/cfd
#SBATCH --export=NONE,OMP_NUM_THREADS=8,OMP_PLACES=cores,PROJECT
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --switches=1

## Overrides from an older template the user kept
#SBATCH -t 12:00:00
#SBATCH -o "logs/%x.%N.%u.out"
#SBATCH --no-requeue
#HP -c 8

module purge
module load openmpi
echo "$SLURM_JOB_ID"
#SBATCH --nodes=99
mpirun ./cfd "$1"
"#;

fn env(name: &str) -> Option<String> {
    (name == "PROJECT").then(|| "climate".to_string())
}

fn batch(script: &str, command_line: &[&str], ignore_unknown: bool) -> Result<Batch, String> {
    let directives = read_script("cfd.sh", script).map_err(|e| e.to_string())?;
    let args: Vec<String> = command_line.iter().map(|s| s.to_string()).collect();
    let (cli, _) = if args.is_empty() {
        (Directives::default(), Vec::new())
    } else {
        read_command_line(&args).map_err(|e| e.to_string())?
    };
    let input = BatchInput {
        file: "cfd.sh",
        script: Some(script),
        args: &["input.nml".to_string()],
        env: &env,
        ignore_unknown,
        now: 1_798_761_600,
    };
    build_job(&directives, &cli, &input).map_err(|e| e.to_string())
}

fn spec(b: &Batch) -> JobSpec {
    b.job_spec(b.name.as_deref().unwrap_or("x"), Path::new("cfd.sh"))
        .unwrap()
}

#[test]
fn a_sites_script_becomes_its_job() {
    let b = batch(SCRIPT, &[], false).unwrap();
    assert_eq!(b.name.as_deref(), Some("cfd-run"));
    let job = spec(&b);
    assert_eq!(job.name, "cfd-run");
    assert_eq!(job.queue.as_deref(), Some("gpu"));
    assert_eq!(job.run.launch, LaunchMode::Batch);
    assert_eq!(job.run.compat, hyperplan_shared::job::Compat::Slurm);
    assert_eq!(job.run.time_limit, Some(12 * 3600));
    assert!(!job.run.requeue);
    assert_eq!(job.run.preempt_signal, Some(10));
    assert_eq!(job.run.preempt_grace, Some(120));
    assert_eq!(
        job.network_topology,
        Some(NetworkTopology {
            mode: TopologyMode::Hard,
            highest_tier_allowed: Some(1),
            highest_tier_name: None
        })
    );
    // Rank 0 runs the script; 7 more ranks hold their nodes, writing nowhere.
    let [task, hold] = job.tasks.as_slice() else {
        panic!("two tasks: {:?}", job.tasks)
    };
    assert_eq!((task.name.as_str(), task.replicas), ("batch", 1));
    assert_eq!((hold.name.as_str(), hold.replicas), ("hold", 7));
    assert_eq!(hold.resources, task.resources);
    assert_eq!(hold.exec.output.as_deref(), Some("/dev/null"));
    assert_eq!(hold.exec.error, None);
    assert_eq!(hold.exec.working_dir, task.exec.working_dir);
    assert_eq!(task.resources.get(CPU), 8000);
    assert_eq!(task.resources.get(MEMORY), 64 << 30);
    assert_eq!(task.resources.get("nvidia.com/gpu"), 1);
    assert_eq!(
        task.exec,
        TaskExec {
            env: BTreeMap::from([
                ("OMP_NUM_THREADS".into(), "8".into()),
                ("OMP_PLACES".into(), "cores".into()),
                ("PROJECT".into(), "climate".into()),
            ]),
            working_dir: Some("/scratch/alice/cfd".into()),
            output: Some("logs/%x.%n.%u.out".into()),
            error: Some("logs/%x-%i.err".into()),
            max_processes: None,
        }
    );
    assert_eq!(task.command, ["/bin/bash", "-c", SCRIPT, "cfd.sh", "input.nml"]);
    // -N 2 with 8 tasks: said, not silently dropped; and the preemption-only signal.
    assert_eq!(b.warnings.len(), 2, "{:?}", b.warnings);
    assert!(
        b.warnings[0].starts_with("cfd.sh:4: --nodes 2: hyperplan places"),
        "{:?}",
        b.warnings
    );
    assert!(b.warnings[1].starts_with("cfd.sh:15: --signal:"), "{:?}", b.warnings);
}

#[test]
fn the_command_line_overrides_the_script() {
    let b = batch(
        SCRIPT,
        &[
            "-J",
            "cfd-2",
            "--time=30",
            "-p",
            "debug",
            "--requeue",
            "--gpus-per-task=2",
            "--gres=gpu:8",
        ],
        false,
    );
    // Two GPU options in effect at once are refused.
    assert_eq!(
        b.unwrap_err(),
        "command line: --gpus-per-task: expected one of --gres=gpu:N, --gpus-per-node and --gpus-per-task, not several"
    );
    let b = batch(
        SCRIPT,
        &["-J", "cfd-2", "--time=30", "-p", "debug", "--requeue", "--gres=gpu:8"],
        false,
    )
    .unwrap();
    let job = spec(&b);
    assert_eq!(job.name, "cfd-2");
    assert_eq!(job.run.time_limit, Some(1800));
    assert_eq!(job.queue.as_deref(), Some("debug"));
    assert!(job.run.requeue);
    assert_eq!(job.tasks[0].resources.get("nvidia.com/gpu"), 2);
}

#[test]
fn unlimited_time_is_no_limit_and_mem_per_cpu_scales() {
    let b = batch(
        "#!/bin/sh\n#SBATCH -t UNLIMITED -n 3 -c 2 --mem-per-cpu=1500\nhostname\n",
        &[],
        false,
    )
    .unwrap();
    let job = spec(&b);
    assert_eq!(job.run.time_limit, None);
    assert_eq!(job.replicas(), 3);
    assert_eq!(job.tasks[0].resources.get(MEMORY), 3000 << 20);
    assert!(b.warnings.is_empty());
}

/// `-H/--hold` and `--begin` (relative to the submitting client's clock) become the job
/// file's `hold` and `begin`.
#[test]
fn hold_and_begin_become_the_jobs() {
    let b = batch(
        "#!/bin/sh\n#SBATCH -H\n#SBATCH --begin=now+1hour\nhostname\n",
        &[],
        false,
    )
    .unwrap();
    let job = spec(&b);
    assert!(job.hold);
    assert_eq!(job.begin, Some(1_798_761_600 + 3600));
    let b = batch("#!/bin/sh\nhostname\n", &["--begin", "2026-12-24T08:00"], false).unwrap();
    let job = spec(&b);
    assert!(!job.hold);
    assert_eq!(job.begin, Some(1_798_099_200));
    let e = batch("#!/bin/sh\n#SBATCH --begin soon\nhostname\n", &[], false).unwrap_err();
    assert!(e.starts_with("cfd.sh:2: --begin: expected a begin time like"), "{e}");
}

#[test]
fn wrap_runs_a_command() {
    let input = BatchInput {
        file: "",
        script: None,
        args: &[],
        env: &env,
        ignore_unknown: false,
        now: 1_798_761_600,
    };
    let (cli, rest) = read_command_line(&["--wrap".to_string(), "hostname -f".to_string()]).unwrap();
    assert!(rest.is_empty());
    let b = build_job(&Directives::default(), &cli, &input).unwrap();
    assert_eq!(spec(&b).tasks[0].command, ["/bin/sh", "-c", "hostname -f"]);
}

#[test]
fn unknown_options_warn_with_ignore_unknown() {
    let script = "#!/bin/bash\n#SBATCH --mail-type=END,FAIL\n#SBATCH --mail-user alice@example.org -N 1\nsrun true\n";
    let b = batch(script, &[], true).unwrap();
    assert_eq!(
        b.warnings,
        [
            "cfd.sh:2: unknown option --mail-type=END,FAIL: expected an sbatch option hyperplan knows (see hyperplan sbatch --help); ignored (--ignore-unknown)",
            "cfd.sh:3: unknown option --mail-user alice@example.org -N 1: expected an sbatch option hyperplan knows (see hyperplan sbatch --help); ignored (--ignore-unknown)",
        ]
    );
}

fn error(script: &str) -> String {
    match batch(script, &[], false) {
        Ok(b) => format!("unexpectedly taken: {:?}", b.job),
        Err(e) => e,
    }
}

#[test]
fn unknown_option() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -N 1\n#SBATCH --mail-type=END\nhostname\n"));
}

#[test]
fn bad_time() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH --time=2h\nhostname\n"));
}

#[test]
fn bad_array() {
    insta::assert_snapshot!(error("#!/bin/bash\n\n#SBATCH --array=1-10:0%4\nhostname\n"));
}

#[test]
fn bad_dependency() {
    insta::assert_snapshot!(error(
        "#!/bin/bash\n#SBATCH -d afterok:prep,afterany:1?afterok:2\nhostname\n"
    ));
}

/// `-a/--array`, `-d/--dependency` and `--kill-on-invalid-dep=no` become the job file's
/// `array`, `dependsOn` and `keepOnFailedDependency`; Slurm's `%A_%a` and `%j` (the id)
/// name the elements' files apart.
#[test]
fn array_and_dependency_become_the_jobs() {
    let b = batch(
        "#!/bin/bash\n#SBATCH -J sweep\n#SBATCH -a 1-100%8\n#SBATCH -d afterok:prep:12\n#SBATCH --kill-on-invalid-dep=no\n#SBATCH -o slurm-%A_%a.out -e err-%x-%j.txt\nhostname\n",
        &[],
        false,
    )
    .unwrap();
    assert_eq!(b.job["array"], "1-100%8");
    assert_eq!(b.job["dependsOn"], "afterok:prep:12");
    assert_eq!(b.job["keepOnFailedDependency"], true);
    let job = spec(&b);
    assert_eq!(job.array.as_ref().map(ToString::to_string).as_deref(), Some("1-100%8"));
    assert_eq!(
        job.depends_on.as_ref().map(ToString::to_string).as_deref(),
        Some("afterok:prep:12")
    );
    assert!(job.keep_on_failed_dependency);
    assert_eq!(job.tasks[0].exec.output.as_deref(), Some("slurm-%A_%a.out"));
    assert_eq!(job.tasks[0].exec.error.as_deref(), Some("err-%x-%i.txt"));
    // The command line overrides the script; `yes` (Slurm's default) keeps nothing.
    let b = batch(
        "#!/bin/bash\n#SBATCH --array=0-30:10\n#SBATCH --kill-on-invalid-dep=no\nhostname\n",
        &[
            "--array",
            "1,3,7-9",
            "--dependency=afterany:1?afternotok:2",
            "--kill-on-invalid-dep=yes",
        ],
        false,
    )
    .unwrap();
    let job = spec(&b);
    assert_eq!(job.array.map(|a| a.indices()), Some(vec![1, 3, 7, 8, 9]));
    assert_eq!(
        job.depends_on.map(|d| d.to_string()).as_deref(),
        Some("afterany:1?afternotok:2")
    );
    assert!(!job.keep_on_failed_dependency);
    assert!(b.job.get("keepOnFailedDependency").is_none());
    // Neither: the job file has neither key.
    let b = batch("#!/bin/bash\nhostname\n", &[], false).unwrap();
    assert!(b.job.get("array").is_none() && b.job.get("dependsOn").is_none());
}

#[test]
fn bad_kill_on_invalid_dep() {
    insta::assert_snapshot!(error(
        "#!/bin/bash\n#SBATCH -d singleton\n#SBATCH --kill-on-invalid-dep=maybe\nhostname\n"
    ));
}

#[test]
fn exclusive_not_supported_yet() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH --exclusive\nhostname\n"));
}

#[test]
fn account_is_the_jobs_account() {
    let job = spec(&batch("#!/bin/bash\n#SBATCH --account=physics\nhostname\n", &[], false).unwrap());
    assert_eq!(job.account.as_deref(), Some("physics"));
    // The command line's -A wins; without one the job has none.
    let job = spec(&batch("#!/bin/bash\n#SBATCH -A physics\nhostname\n", &["-A", "chem"], false).unwrap());
    assert_eq!(job.account.as_deref(), Some("chem"));
    assert_eq!(
        spec(&batch("#!/bin/bash\nhostname\n", &[], false).unwrap()).account,
        None
    );
}

#[test]
fn bad_account() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -A 'phys ics'\nhostname\n"));
}

#[test]
fn qos_is_the_priority_class_and_segment_the_segments() {
    let script = "#!/bin/sh\n#SBATCH -q urgent -N 4 --ntasks-per-node=2 --segment=2\nhostname\n";
    let job = spec(&batch(script, &[], false).unwrap());
    assert_eq!(job.priority_class.as_deref(), Some("urgent"));
    assert_eq!(job.segments.len(), 1);
    assert_eq!((job.segments[0].size, job.segments[0].tier), (4, Some(1)));
    let e = batch("#!/bin/sh\n#SBATCH -n 3 --segment=2\nhostname\n", &[], false).unwrap_err();
    assert!(e.contains("--segment: expected --ntasks-per-node"), "{e}");
}

#[test]
fn missing_value() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH --job-name\nhostname\n"));
}

#[test]
fn unclosed_quote() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -J 'my job\nhostname\n"));
}

#[test]
fn bad_output_pattern() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -o slurm-%A_%a.%s.out\nhostname\n"));
}

#[test]
fn mem_per_node_without_tasks_per_node() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -n 4\n#SBATCH --mem=8G\nhostname\n"));
}

#[test]
fn no_shebang() {
    insta::assert_snapshot!(error("#SBATCH -N 1\nhostname\n"));
}

#[test]
fn bad_job_name() {
    insta::assert_snapshot!(error("#!/bin/bash\n#SBATCH -J 'my job'\nhostname\n"));
}

proptest::proptest! {
    /// Whatever a script's directives say, they are read or refused: no panic.
    #[test]
    fn any_directives_are_taken_or_refused(lines in proptest::collection::vec("(#SBATCH|#HP)? ?-{0,2}[a-zA-Z=: '\"%,@0-9-]{0,30}", 0..8)) {
        let script = format!("#!/bin/sh\n{}\n", lines.join("\n"));
        if let Ok(d) = read_script("x.sh", &script) {
            let input = BatchInput { file: "x.sh", script: Some(&script), args: &[], env: &env, ignore_unknown: true, now: 0 };
            let _ = build_job(&d, &Directives::default(), &input);
        }
    }
}

#[test]
fn switches_at_a_time_waits_that_long_then_goes_soft() {
    let script = "#!/bin/sh\n#SBATCH -N 2 --switches=1@30:00\nhostname\n";
    let job = spec(&batch(script, &[], false).unwrap());
    let t = job.network_topology.clone().unwrap();
    assert_eq!((t.mode, t.highest_tier_allowed), (TopologyMode::Hard, Some(1)));
    assert_eq!(job.topology_soft_after, Some(1800));
    let plain = spec(&batch("#!/bin/sh\n#SBATCH -N 2 --switches=1\nhostname\n", &[], false).unwrap());
    assert_eq!(plain.topology_soft_after, None);
    let bad = batch("#!/bin/sh\n#SBATCH --switches=1@soon\nhostname\n", &[], false).unwrap_err();
    assert!(
        bad.starts_with("cfd.sh:2: --switches: @TIME: expected a Slurm time"),
        "{bad}"
    );
    // A job file says the same with softAfter; only with mode: hard.
    let file = "name: j\nnetworkTopology: {mode: hard, highestTierAllowed: 1, softAfter: 30m}\ntasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}}\n";
    let jobs = hyperplan_shared::parse_jobs(file, Path::new("j.yaml")).unwrap();
    assert_eq!(jobs[0].topology_soft_after, Some(1800));
    let soft = file.replace("mode: hard", "mode: soft");
    let e = hyperplan_shared::parse_jobs(&soft, Path::new("j.yaml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected mode: hard with softAfter"), "{e}");
}
