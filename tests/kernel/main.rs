//! The task source on this machine's real cgroups and perf counters (needs root; skips, and
//! says so, where cgroups cannot be made). Index: tests/README.md.

mod task;
mod task_perf;
