# Local stand-ins for Flower's official images flwr/superlink, flwr/supernode and
# flwr/superexec, for machines that cannot pull from Docker Hub (tests/e2e/test_docker_demo.py
# builds them under the official names, so that docker/compose.yml and docker/Dockerfile run
# unchanged). One target per image:
#
#   docker build -f docker/standins.Dockerfile --target superlink -t flwr/superlink:1.41.0 .
#
# As Flower's own framework/docker/base/ubuntu/Dockerfile: flwr from PyPI in a virtual
# environment at /python/venv (on PATH, owned by `app`), user `app` (uid 49999) with home and
# working directory /app, the same environment variables, and each image's entry point.
# Different: the base is Debian (DEBIAN_IMAGE, made with debootstrap and `docker import`) with
# its Python 3.11; Flower's superexec image is Ubuntu 24.04 with Python 3.13 (built by pyenv),
# its superlink and supernode images are Alpine.
ARG DEBIAN_IMAGE=flowerbed-test/debian:bookworm
FROM ${DEBIAN_IMAGE} AS base
ARG FLWR_VERSION=1.41.0
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get -y --no-install-recommends install python3 python3-venv libsqlite3-0 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --no-create-home --home-dir /app -c "" --uid 49999 app \
    && mkdir -p /app \
    && chown -R app:app /app
# docker/build-ca/: the CA certificates pip trusts behind a TLS-inspecting proxy (its README)
COPY docker/build-ca/ /tmp/build-ca/
RUN . /tmp/build-ca/pip-cert.sh \
    && python3 -m venv /python/venv \
    && /python/venv/bin/pip install --no-cache-dir "flwr==${FLWR_VERSION}" \
    && chown -R app:app /python/venv \
    && rm -rf /tmp/build-ca
ENV PATH=/python/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONIOENCODING=UTF-8 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8
WORKDIR /app
USER app
ENV HOME=/app

FROM base AS superlink
ENTRYPOINT ["flower-superlink"]

FROM base AS supernode
ENTRYPOINT ["flower-supernode"]

FROM base AS superexec
ENTRYPOINT ["flower-superexec"]
