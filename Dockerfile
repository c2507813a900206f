# syntax=docker/dockerfile:1
# Sluice: a multi-stage build. The builder compiles RocksDB and librdkafka from source (they
# need clang/libclang and cmake); the runtime image holds the binary, the topic definitions
# and nothing else.
FROM rust:1.94-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang libclang-dev cmake pkg-config libssl-dev libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# BuildKit cache mounts keep the crates downloaded and the dependencies built (RocksDB and
# librdkafka take most of the build) from one image build to the next: a change to Sluice's
# own code rebuilds Sluice only.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sluice \
 && cp target/release/sluice /usr/local/bin/sluice

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 libcurl4 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --home-dir /var/lib/sluice --create-home sluice
COPY --from=builder /usr/local/bin/sluice /usr/local/bin/sluice
COPY topics/topics.yaml /etc/sluice/topics/topics.yaml
USER 10001
VOLUME /var/lib/sluice
ENV SLUICE_STATE_DIR=/var/lib/sluice \
    SLUICE_HTTP=0.0.0.0:9464
EXPOSE 9464
ENTRYPOINT ["sluice"]
CMD ["run"]
