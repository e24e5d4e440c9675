# The miqps worker image: the core, the stream processor and the compiled per-URL path
# (miqps_native, native/). Two stages: the builder compiles native/ with Debian's Rust and a
# C++ compiler (the ada URL parser) and installs everything into the virtualenv /opt/miqps;
# the final image copies that virtualenv onto a clean base and carries no compiler.
#
#   docker build -t miqps:latest .
#   docker run --rm miqps:latest miqps --version    # canonicalizer path: compiled (...)
#
# PYTHON_IMAGE is any Debian-based Python 3.11+ image with `python` on PATH
# (scripts/test-containers builds one locally, from Debian packages).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CARGO_HOME=/tmp/cargo \
    CARGO_TERM_PROGRESS_WHEN=never
# native/ needs Rust 1.85 or later: Debian 12 ships it as rustc-web/cargo-web (its plain rustc
# is 1.63), Debian 13 as rustc/cargo.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && (apt-get install -y --no-install-recommends rustc-web cargo-web \
        || apt-get install -y --no-install-recommends rustc cargo) \
    && rm -rf /var/lib/apt/lists/* \
    && rustc --version && cargo --version
WORKDIR /src
COPY constraints.txt ./
RUN python -m venv /opt/miqps \
    && /opt/miqps/bin/pip install -c constraints.txt "maturin==1.16.0"
COPY native ./native
RUN /opt/miqps/bin/maturin build --release --locked -m native/Cargo.toml -o /tmp/wheels
COPY pyproject.toml README.md ./
COPY miqps ./miqps
COPY streams ./streams
RUN /opt/miqps/bin/pip install -c constraints.txt ".[streams]" /tmp/wheels/miqps_native-*.whl \
    && /opt/miqps/bin/pip uninstall --yes maturin \
    && /opt/miqps/bin/python -c "import miqps_native" \
    && find /opt/miqps -name __pycache__ -prune -exec rm -rf {} +

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/miqps/bin:$PATH \
    MIQPS_STATE_DIR=/var/lib/miqps
COPY --from=builder /opt/miqps /opt/miqps
# uid 10001: docker-compose.yml gives the state tmpfs to this uid.
RUN useradd --system --uid 10001 --user-group --create-home miqps \
    && mkdir -p /var/lib/miqps && chown miqps /var/lib/miqps \
    && miqps --version | grep -q "canonicalizer path: compiled"
WORKDIR /home/miqps
USER miqps
CMD ["miqps", "worker"]
