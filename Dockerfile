# The miqps worker image: the core and the stream processor.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    MIQPS_STATE_DIR=/var/lib/miqps

WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY miqps ./miqps
COPY streams ./streams
COPY schemas ./schemas
RUN pip install -c constraints.txt ".[streams]" \
    && useradd --system --create-home miqps \
    && mkdir -p /var/lib/miqps && chown miqps /var/lib/miqps

USER miqps
CMD ["miqps", "worker"]
