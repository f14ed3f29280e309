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
