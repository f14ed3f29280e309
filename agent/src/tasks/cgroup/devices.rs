//! GPUs confined to their tasks: beyond `CUDA_VISIBLE_DEVICES`, which a task may change,
//! the kernel refuses a task's opening of the node's other GPUs (`/dev/nvidia<N>`,
//! character major 195), and leaves the rest of `/dev` as it was (`nvidiactl`, 255;
//! `nvidia-modeset`, 254; `nvidia-uvm`, its own major; everything else).
//!
//! - cgroup v2 (and the hybrid layout's unified mount): an eBPF program of type
//!   `BPF_PROG_TYPE_CGROUP_DEVICE` attached to the task's cgroup with
//!   `BPF_F_ALLOW_MULTI`, as Slurm's cgroup/v2 plugin does: it allows every access except
//!   to GPU minors 0–253 other than the task's, so programs systemd attached above
//!   (`DeviceAllow=`) still apply on top. [`program`] builds it; [`run`] interprets it
//!   for the tests.
//! - cgroup v1: `devices.deny` lines for the node's other GPUs ([`deny_lines`]).
//!
//! A GPU's minor is what the driver says in `/proc/driver/nvidia/gpus/<bus id>/information`
//! (`Device Minor: 3`) ([`minor_of`]).
//!
//! `unsafe` is allowed here only for the `bpf(2)` system calls; each block says why it
//! holds.

#![allow(unsafe_code)]

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The NVIDIA GPUs' character major.
pub const NVIDIA_MAJOR: u32 = 195;
/// The highest minor a GPU has: 254 is `nvidia-modeset`, 255 `nvidiactl`, which every
/// CUDA process opens.
pub const MAX_GPU_MINOR: u32 = 253;

/// Most bytes of a driver `information` file read.
const MAX_INFO: u64 = 16 * 1024;

/// Which GPU device minors a task may open, and which of the node's it may not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuFence {
    /// The task's GPUs' minors.
    pub allowed: Vec<u32>,
    /// The node's other GPUs' minors (`devices.deny` on v1; v2 denies every GPU minor
    /// but the allowed ones).
    pub hidden: Vec<u32>,
}

impl GpuFence {
    /// The fence for a task with GPUs `task` (PCI bus ids) on a node with `node`, minors
    /// read under `proc_root` (`/proc`). `None` when the node has no NVIDIA GPU minor to
    /// read (no driver: no `/dev/nvidia*` to keep anyone from either), or the task's
    /// GPUs' minors cannot all be read (then it is not confined, rather than cut off
    /// from its own GPU).
    pub fn for_task(proc_root: &Path, task: &[String], node: &[String]) -> Option<GpuFence> {
        let node_minors: Vec<(String, u32)> = node
            .iter()
            .filter_map(|b| minor_of(proc_root, b).map(|m| (b.to_ascii_lowercase(), m)))
            .collect();
        if node_minors.is_empty() {
            return None;
        }
        let mut allowed = Vec::new();
        for bus in task {
            let bus = bus.to_ascii_lowercase();
            allowed.push(node_minors.iter().find(|(b, _)| *b == bus).map(|(_, m)| *m)?);
        }
        allowed.sort_unstable();
        allowed.dedup();
        let mut hidden: Vec<u32> = node_minors
            .iter()
            .map(|(_, m)| *m)
            .filter(|m| !allowed.contains(m))
            .collect();
        hidden.sort_unstable();
        hidden.dedup();
        Some(GpuFence { allowed, hidden })
    }
}

/// The device minor of the GPU at PCI bus id `bus` (`0000:b1:00.0`), from the driver's
/// `information` file; `None` without one (no driver, not an NVIDIA GPU, unreadable).
pub fn minor_of(proc_root: &Path, bus: &str) -> Option<u32> {
    let bus = bus.to_ascii_lowercase();
    // A bus id from a probe is `dddd:bb:dd.f`; anything else (a path) is not looked up.
    if bus.is_empty() || bus.len() > 16 || !bus.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
        return None;
    }
    let path: PathBuf = proc_root.join("driver/nvidia/gpus").join(&bus).join("information");
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_INFO)
        .read_to_string(&mut text)
        .ok()?;
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "Device Minor")
            .then(|| value.trim().parse::<u32>().ok())
            .flatten()
            .filter(|m| *m <= MAX_GPU_MINOR)
    })
}

/// Says, at most once a minute, that tasks are not fenced from the node's other GPUs and
/// why, with what the agent needs (the shipped unit's drop-in for GPU nodes).
pub fn unfenced(why: &str) {
    static SAID: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60)) {
        *said = Some(std::time::Instant::now());
        tracing::warn!(
            "tasks see every GPU of this node (CUDA_VISIBLE_DEVICES only): {why}; the agent needs \
             CAP_SYS_ADMIN and CAP_BPF (systemd/hyperplan-agent-gpu.conf as a drop-in)"
        );
    }
}

/// `devices.deny` lines (cgroup v1) for the hidden GPUs: `c 195:3 rwm`.
pub fn deny_lines(fence: &GpuFence) -> Vec<String> {
    fence
        .hidden
        .iter()
        .map(|m| format!("c {NVIDIA_MAJOR}:{m} rwm"))
        .collect()
}

/// One eBPF instruction, as `struct bpf_insn` lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    /// `dst_reg` in the low four bits, `src_reg` in the high four.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// The opcodes the program uses (linux/bpf.h, linux/bpf_common.h).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU64_AND_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JGT_K: u8 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// `BPF_DEVCG_DEV_CHAR`: the device type in the low 16 bits of `access_type`.
pub const DEV_CHAR: u32 = 2;
/// `BPF_DEVCG_ACC_READ`, `_WRITE`, `_MKNOD`: the access in the high 16 bits.
pub const ACC_READ: u32 = 2;
pub const ACC_WRITE: u32 = 4;
pub const ACC_MKNOD: u32 = 1;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

/// The program for a task allowed GPU minors `allowed`: reading `struct
/// bpf_cgroup_dev_ctx { u32 access_type, major, minor; }` from r1, it returns 1 (allow)
/// for every device that is not a character device 195 with a minor up to 253, and for
/// those in `allowed`; 0 (deny) for the other GPUs.
pub fn program(allowed: &[u32]) -> Vec<Insn> {
    let mut allowed: Vec<u32> = allowed.iter().copied().filter(|m| *m <= MAX_GPU_MINOR).collect();
    allowed.sort_unstable();
    allowed.dedup();
    let mut p = vec![
        insn(LDX_MEM_W, 2, 1, 0, 0), // r2 = access_type
        insn(ALU64_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_MEM_W, 3, 1, 4, 0), // r3 = major
        insn(LDX_MEM_W, 4, 1, 8, 0), // r4 = minor
    ];
    // The jumps to `allow` are filled in once its place is known.
    let mut to_allow = Vec::new();
    to_allow.push(p.len());
    p.push(insn(JNE_K, 2, 0, 0, DEV_CHAR as i32));
    to_allow.push(p.len());
    p.push(insn(JNE_K, 3, 0, 0, NVIDIA_MAJOR as i32));
    to_allow.push(p.len());
    p.push(insn(JGT_K, 4, 0, 0, MAX_GPU_MINOR as i32));
    for m in allowed {
        to_allow.push(p.len());
        p.push(insn(JEQ_K, 4, 0, 0, m as i32));
    }
    p.push(insn(MOV64_K, 0, 0, 0, 0)); // deny
    p.push(insn(EXIT, 0, 0, 0, 0));
    let allow = p.len();
    p.push(insn(MOV64_K, 0, 0, 0, 1));
    p.push(insn(EXIT, 0, 0, 0, 0));
    for at in to_allow {
        p[at].off = (allow - at - 1) as i16;
    }
    p
}

/// Runs `prog` on one access as the kernel would, for the tests: only the instructions
/// [`program`] emits are known; anything else, a jump out of the program or a missing
/// exit is an error. Returns r0.
pub fn run(prog: &[Insn], access_type: u32, major: u32, minor: u32) -> Result<u64, RunError> {
    let ctx = [access_type, major, minor];
    let mut r = [0u64; 11];
    let mut pc = 0usize;
    // A program of n instructions that only jumps forward runs at most n of them.
    for _ in 0..=prog.len() {
        let Some(i) = prog.get(pc) else {
            return Err(RunError::PastEnd { pc });
        };
        let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
        if dst > 10 || src > 10 {
            return Err(RunError::BadRegister { pc });
        }
        let jump = |taken: bool| {
            if taken {
                pc as i64 + 1 + i64::from(i.off)
            } else {
                pc as i64 + 1
            }
        };
        let next = match i.code {
            LDX_MEM_W => {
                if src != 1 || i.off < 0 || i.off % 4 != 0 || i.off > 8 {
                    return Err(RunError::LoadOutside { pc });
                }
                r[dst] = u64::from(ctx[(i.off / 4) as usize]);
                pc as i64 + 1
            }
            ALU64_AND_K => {
                r[dst] &= i.imm as i64 as u64;
                pc as i64 + 1
            }
            MOV64_K => {
                r[dst] = i.imm as i64 as u64;
                pc as i64 + 1
            }
            JEQ_K => jump(r[dst] == i.imm as i64 as u64),
            JNE_K => jump(r[dst] != i.imm as i64 as u64),
            JGT_K => jump(r[dst] > i.imm as i64 as u64),
            EXIT => return Ok(r[0]),
            other => return Err(RunError::Opcode { pc, code: other }),
        };
        pc = usize::try_from(next).map_err(|_| RunError::BeforeStart { pc })?;
    }
    Err(RunError::NoExit)
}

/// Why [`run`] could not run a program to its exit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RunError {
    #[error("pc {pc} is past the program's end")]
    PastEnd { pc: usize },
    #[error("pc {pc}: bad register")]
    BadRegister { pc: usize },
    #[error("pc {pc}: load outside the context")]
    LoadOutside { pc: usize },
    #[error("pc {pc}: opcode {code:#04x} is not one this program uses")]
    Opcode { pc: usize, code: u8 },
    #[error("pc {pc}: jump before the start")]
    BeforeStart { pc: usize },
    #[error("no exit")]
    NoExit,
}

/// Why the device program could not be put on a task's cgroup.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("the kernel refused the GPU device program (bpf BPF_PROG_LOAD): {0}")]
    Load(std::io::Error),
    #[error("cannot attach the GPU device program to {path} (bpf BPF_PROG_ATTACH): {source}")]
    Attach { path: PathBuf, source: std::io::Error },
}

// linux/bpf.h
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The leading fields of `union bpf_attr` for `BPF_PROG_LOAD`, zero-padded to the size
/// every kernel since 5.x accepts (the kernel checks that bytes it does not know are 0).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    pad: [u8; 64],
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
    pad: [u8; 44],
}

/// Loads `prog` and attaches it to the cgroup directory `cgroup` with
/// `BPF_F_ALLOW_MULTI`. The attachment holds the program: it goes with the cgroup.
pub fn attach(cgroup: &Path, prog: &[Insn]) -> Result<(), DeviceError> {
    let dir = std::fs::File::open(cgroup).map_err(|source| DeviceError::Open {
        path: cgroup.to_path_buf(),
        source,
    })?;
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..10].copy_from_slice(b"hyperplan\0");
    let load = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: prog.len() as u32,
        insns: prog.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        pad: [0; 64],
    };
    // SAFETY: `load` is a fully initialised `bpf_attr` prefix, zero-padded, whose
    // pointers (`prog`, `license`) outlive the call; the kernel copies what it reads and
    // returns a new file descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &load as *const ProgLoad,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        return Err(DeviceError::Load(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is a new descriptor the kernel just returned to us and nothing else
    // owns; `OwnedFd` closes it once the program is attached (or not).
    let prog_fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let at = ProgAttach {
        target_fd: dir.as_raw_fd() as u32,
        attach_bpf_fd: prog_fd.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
        pad: [0; 44],
    };
    // SAFETY: `at` is a fully initialised, zero-padded `bpf_attr` for BPF_PROG_ATTACH
    // naming two descriptors that stay open for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_ATTACH,
            &at as *const ProgAttach,
            std::mem::size_of::<ProgAttach>(),
        )
    };
    if rc < 0 {
        return Err(DeviceError::Attach {
            path: cgroup.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const OPEN: u32 = (ACC_READ | ACC_WRITE) << 16 | DEV_CHAR;

    #[test]
    fn the_program_denies_only_the_other_gpus() {
        let p = program(&[1, 3]);
        let allow = |major, minor| run(&p, OPEN, major, minor).unwrap() == 1;
        assert!(allow(195, 1) && allow(195, 3), "its own GPUs");
        assert!(!allow(195, 0) && !allow(195, 2) && !allow(195, 7) && !allow(195, 253));
        assert!(allow(195, 255) && allow(195, 254), "nvidiactl and nvidia-modeset");
        assert!(
            allow(508, 0) && allow(1, 3) && allow(136, 2),
            "nvidia-uvm, /dev/null, a pty"
        );
        // A block device 195:0 is not a GPU.
        assert_eq!(run(&p, (ACC_READ << 16) | 1, 195, 0).unwrap(), 1);
        // mknod of another GPU's node is refused too.
        assert_eq!(run(&p, (ACC_MKNOD << 16) | DEV_CHAR, 195, 0).unwrap(), 0);
        // No GPU of its own: none of them.
        let none = program(&[]);
        assert_eq!(run(&none, OPEN, 195, 0).unwrap(), 0);
        assert_eq!(run(&none, OPEN, 195, 255).unwrap(), 1);
    }

    #[test]
    fn every_jump_lands_inside_and_every_path_exits() {
        for allowed in [vec![], vec![0], (0..=MAX_GPU_MINOR).collect::<Vec<_>>(), vec![300]] {
            let p = program(&allowed);
            for minor in [0, 1, 100, 253, 254, 255, 300, u32::MAX] {
                for major in [0, 195, u32::MAX] {
                    let got = run(&p, OPEN, major, minor).unwrap();
                    let want = u64::from(major != 195 || minor > MAX_GPU_MINOR || allowed.contains(&minor));
                    assert_eq!(got, want, "{allowed:?} {major}:{minor}");
                }
            }
        }
    }

    #[test]
    fn the_interpreter_refuses_what_the_kernel_would() {
        let bad = [insn(LDX_MEM_W, 2, 1, 12, 0), insn(EXIT, 0, 0, 0, 0)];
        assert!(run(&bad, OPEN, 0, 0).is_err());
        let no_exit = [insn(MOV64_K, 0, 0, 0, 1)];
        assert!(run(&no_exit, OPEN, 0, 0).is_err());
        let wild = [insn(JEQ_K, 0, 0, 5, 0), insn(EXIT, 0, 0, 0, 0)];
        assert!(run(&wild, OPEN, 0, 0).is_err());
    }

    fn fake_proc(gpus: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (bus, info) in gpus {
            let d = dir.path().join("driver/nvidia/gpus").join(bus);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("information"), info).unwrap();
        }
        dir
    }

    fn info(minor: &str) -> String {
        format!(
            "Model: \t\t NVIDIA B200\nIRQ:   \t\t 114\nGPU UUID: \t GPU-9f3c\nVideo BIOS: \t 97.00.4a.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:b1:00.0\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n"
        )
    }

    #[test]
    fn minors_come_from_the_driver_and_a_task_sees_only_its_own() {
        let proc = fake_proc(&[
            ("0000:1b:00.0", &info("0")),
            ("0000:43:00.0", &info("1")),
            ("0000:52:00.0", &info("2")),
            ("0000:61:00.0", &info("not a number")),
        ]);
        let node: Vec<String> = ["0000:1B:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"]
            .map(String::from)
            .into();
        assert_eq!(minor_of(proc.path(), "0000:43:00.0"), Some(1));
        assert_eq!(minor_of(proc.path(), "0000:61:00.0"), None, "unreadable minor");
        assert_eq!(minor_of(proc.path(), "../../etc"), None, "not a bus id");
        let fence = GpuFence::for_task(proc.path(), &node[1..2], &node).unwrap();
        assert_eq!(
            fence,
            GpuFence {
                allowed: vec![1],
                hidden: vec![0, 2]
            }
        );
        assert_eq!(deny_lines(&fence), ["c 195:0 rwm", "c 195:2 rwm"]);
        // A task whose GPU has no readable minor is not confined (not cut off from it).
        assert_eq!(GpuFence::for_task(proc.path(), &node[3..], &node), None);
        // A CPU-only task on a GPU node sees none of them.
        let cpu = GpuFence::for_task(proc.path(), &[], &node).unwrap();
        assert_eq!(cpu.hidden, vec![0, 1, 2]);
        // No driver: nothing to fence.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(GpuFence::for_task(empty.path(), &node[..1], &node), None);
    }
}
