# shellcheck shell=sh
# Sourced by the RUN steps of docker/Dockerfile (and docker/standins.Dockerfile) that call pip:
# when PEM files *.crt were put into docker/build-ca/ (copied to /tmp/build-ca/), pip trusts
# exactly those certificates (PIP_CERT). That is what a build behind a TLS-inspecting proxy
# needs: the proxy's CA, or the host's whole CA bundle (the file the host's PIP_CERT names).
# Without *.crt files pip keeps its own CA bundle.
if ls /tmp/build-ca/*.crt >/dev/null 2>&1; then
  cat /tmp/build-ca/*.crt >/tmp/build-ca/bundle.pem
  export PIP_CERT=/tmp/build-ca/bundle.pem
fi
