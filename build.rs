//! Link flags of the kube-prober binary only (no effect on dependencies or test executables).
//!
//! On Linux/glibc the binary is linked with packed relative relocations (`DT_RELR`, glibc 2.36+,
//! binutils 2.38+; the Dockerfile's builder and runtime are Debian 12 with glibc 2.36): the
//! dynamic loader reads every relocation of this position-independent binary at start, and as
//! `.rela.dyn` they are about 1 MB that stays resident for the life of the process (issue #11,
//! node-role RSS). Packed, they are a few KiB. Set `KUBE_PROBER_NO_RELR=1` to link without it
//! (an older toolchain or glibc).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KUBE_PROBER_NO_RELR");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" && std::env::var_os("KUBE_PROBER_NO_RELR").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
