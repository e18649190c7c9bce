# One image for every gradguard role: api (`gradguard serve`), workers (`gradguard worker`),
# the migrate step (`gradguard migrate`). Build the GPU worker with --build-arg JAX_EXTRA=cuda12.
FROM python:3.11-slim

ARG JAX_EXTRA=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# bubblewrap gives submitted rules the strongest sandbox level (see /readyz).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gradguard ./gradguard
COPY engines ./engines
COPY checker ./checker
COPY service ./service
COPY web ./web
COPY examples ./examples
RUN pip install . \
    && if [ -n "$JAX_EXTRA" ]; then pip install "jax[$JAX_EXTRA]"; fi

RUN useradd --create-home --uid 10001 gradguard
USER gradguard
WORKDIR /home/gradguard

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz').status != 200)" || exit 1
ENTRYPOINT ["gradguard"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
