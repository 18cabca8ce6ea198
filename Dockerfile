# kube-prober container image: a Rust builder stage, then distroless/cc (glibc, libgcc, CA
# certificates, no shell) running as the numeric non-root user 65532.
#
#   docker build -t REGISTRY/kube-prober:TAG .
#
# Runtime contract (what the manifests rely on; tests/deploy_manifests.rs proves it by running
# the binary in a bubblewrap sandbox with exactly this: uid/gid 65532, no capabilities, a
# read-only root holding only /kube-prober, glibc and the CA bundle, the manifest's read-only
# hostPath mounts and env):
# - no writable path is needed: no /tmp, no home, no cache; logs go to stderr;
# - the CA bundle is needed: the Kubernetes client loads the system roots at start;
# - the node role reads the host's /proc at --procfs (mounted at /host/proc).

# Builder: Rust 1.91 or newer, the real minimum (the 2024 edition's let chains need 1.88;
# gcloud-sdk's google-cloud-auth 1.18 declares rust-version 1.91). aws-lc-sys needs only the C
# compiler this image has; no protoc, no OpenSSL. The release profile (Cargo.toml) and build.rs
# set every flag: build.rs links with packed relative relocations (DT_RELR), which bookworm's
# binutils 2.40 and the runtime's glibc 2.36 both support (issue #11: node-role RSS).
FROM rust:1.91-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    cargo build --release --locked --bin kube-prober \
    && strip target/release/kube-prober \
    && cp target/release/kube-prober /kube-prober

# Runtime: Debian 12 distroless with the C runtime (the binary links glibc dynamically).
FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kube-prober" \
      org.opencontainers.image.description="One prober for Kubernetes clusters: load-watcher compatible /watcher for Trimaran, gke-prober's node and addon health; Prometheus, OTLP and Cloud Monitoring outputs." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /kube-prober /kube-prober
USER 65532:65532
EXPOSE 2020
ENTRYPOINT ["/kube-prober"]
