//! End-to-end: `hyperplan sbatch` with the real planner and agents on 127.0.0.1. A
//! script with `#SBATCH -J`, `-N`, `-c`, `-o` and `-D` lines runs once, with its
//! arguments, and its output lands where `-o` says; it sees Slurm's `SLURM_*` variables.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::live::{LONG, Live};
use common::{path_str, wait_for};

#[test]
fn a_batch_script_runs_with_its_sbatch_lines() {
    let live = Live::start(&["n1", "n2"]);
    let work = path_str(live.work.path()).to_string();
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH -J sbjob\n\
         #SBATCH -N 2\n\
         #SBATCH -c 1\n\
         #SBATCH -t 5\n\
         #SBATCH -o out-%x.txt   # the output, by the job's name\n\
         #SBATCH -D {work}\n\
         \n\
         echo \"args: $0 $1 $2\"\n\
         sleep 1  # the other node's task starts meanwhile, and must not truncate this file\n\
         echo \"world: $WORLD_SIZE\"\n\
         echo \"slurm: $SLURM_JOB_ID $SLURM_NNODES $SLURM_PROCID $SLURM_JOB_NODELIST\"\n\
         exit 0\n"
    );
    let path = live.c.write("job.sh", &script);
    let out = live.cli(&["sbatch", path_str(&path), "one", "two words"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("Submitted batch job "), "{stdout}");
    assert!(stdout.contains("(sbjob)"), "{stdout}");
    // Completed, and every task's end reported (the holder of the second node too).
    let j = wait_for(LONG, "sbjob completed with its exit code", || {
        let j = live.status("sbjob");
        (j["status"] == "completed" && j["exitCode"].is_number()).then_some(j)
    });
    assert_eq!(j["exitCode"], 0, "{j}");
    assert_eq!(j["tasks"].as_array().unwrap().len(), 2, "-N 2: two tasks: {j}");
    let text = std::fs::read_to_string(live.work.path().join("out-sbjob.txt")).unwrap_or_default();
    assert!(text.contains("args: job.sh one two words\n"), "{text:?}");
    assert!(text.contains("world: 2\n"), "{text:?}");
    // SLURM_JOB_ID is the id sbatch printed; the node list is the tasks' nodes, compressed.
    let id = stdout
        .trim_start_matches("Submitted batch job ")
        .split_whitespace()
        .next()
        .unwrap();
    let mut nodes: Vec<&str> = j["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["node"].as_str())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let list = if nodes.len() == 2 {
        "n[1-2]".to_string()
    } else {
        nodes.join(",")
    };
    let want = format!("slurm: {id} {} 0 {list}\n", nodes.len());
    assert!(text.contains(&want), "{want:?} in {text:?}");
    // The holder of the second node wrote nowhere.
    let files: Vec<String> = std::fs::read_dir(live.work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["out-sbjob.txt"]);
}

/// A script in the style of sites' documentation, twenty `#SBATCH` lines, an array
/// with a dependency, submitted as `hyperplan submit job.sh`: every element runs with
/// the resources, output names and `SLURM_*` variables its lines say.
#[test]
fn a_sites_array_script_with_twenty_lines_runs_as_written() {
    let live = Live::start(&["n1", "n2"]);
    let work = path_str(live.work.path()).to_string();
    // A first job the array waits for.
    let prep = live.job(
        "prep",
        "tasks:\n  - {name: t, replicas: 1, resources: {cpu: 1}, workingDir: WORKDIR, output: /dev/null, command: [sh, -c, 'touch prep.done']}\n",
    );
    let out = live.cli(&["submit", path_str(&prep)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script = format!(
        "#!/bin/bash\n\
         #SBATCH --job-name=cfd-sweep            # Job name\n\
         #SBATCH --array=1-4%2                   # Job array, at most 2 at once\n\
         #SBATCH --dependency=afterok:prep       # After the preprocessing\n\
         #SBATCH --kill-on-invalid-dep=yes\n\
         #SBATCH --nodes=1                       # One node per element\n\
         #SBATCH --ntasks=1                      # One task\n\
         #SBATCH --ntasks-per-node=1\n\
         #SBATCH --cpus-per-task=2               # Threads\n\
         #SBATCH --mem-per-cpu=64M               # Memory per CPU\n\
         #SBATCH --time=00:05:00                 # Wall time\n\
         #SBATCH --partition=default             # Partition\n\
         #SBATCH --output=%x-%A_%a.out           # Standard output\n\
         #SBATCH --error=%x-%A_%a.err            # Standard error\n\
         #SBATCH --chdir={work}\n\
         #SBATCH --export=NONE,CASE=lid\n\
         #SBATCH --requeue\n\
         #SBATCH --signal=B:USR1@30\n\
         #SBATCH --switches=1@5:00\n\
         #SBATCH --begin=now\n\
         #SBATCH --hint=nomultithread            # (unknown here: --ignore-unknown below)\n\
         \n\
         test -e prep.done || exit 3\n\
         echo \"$SLURM_JOB_NAME $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_CPUS_PER_TASK $SLURM_NTASKS $CASE\"\n\
         echo \"err $SLURM_ARRAY_TASK_ID\" >&2\n"
    );
    let path = live.c.write("sweep.sh", &script);
    // `submit SCRIPT` is sbatch; the unknown line stops it, named.
    let out = live.cli(&["submit", path_str(&path)]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("sweep.sh:21: unknown option --hint=nomultithread"), "{e}");
    let out = live.cli(&["sbatch", "--ignore-unknown", path_str(&path)]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let array_id: u64 = stdout
        .trim_start_matches("Submitted batch job ")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    wait_for(LONG, "every element completed", || {
        (1..=4)
            .all(|i| live.status(&format!("cfd-sweep[{i}]"))["status"] == "completed")
            .then_some(())
    });
    for i in 1..=4u64 {
        let out = std::fs::read_to_string(live.work.path().join(format!("cfd-sweep-{array_id}_{i}.out"))).unwrap();
        assert_eq!(out, format!("cfd-sweep[{i}] {array_id} {i} 4 2 1 lid\n"), "element {i}");
        let err = std::fs::read_to_string(live.work.path().join(format!("cfd-sweep-{array_id}_{i}.err"))).unwrap();
        assert_eq!(err, format!("err {i}\n"));
    }
}
