#!/bin/bash
# elastic-cache __ROLE__ bootstrap, rendered by elastic_cache.aws.userdata. It holds no
# secret: the bundle URL is a short-lived presigned GET of the package bundle, and the
# cluster token stays in SSM Parameter Store.
set -euo pipefail
exec >>/var/log/ecache-bootstrap.log 2>&1
echo "ecache bootstrap started $(date -u +%FT%TZ)"

BUNDLE_URL=__BUNDLE_URL__
PACKAGE=__PACKAGE__

# Python 3.11 from the distribution's repositories; the package and every dependency
# come from the bundle, so no Python package index is needed.
dnf install -y python3.11 python3.11-pip
install -d -m 0755 /opt/ecache /opt/ecache/wheels
curl --fail --silent --show-error --retry 10 --retry-delay 3 --retry-all-errors \
    -o /opt/ecache/bundle.tar.gz "$BUNDLE_URL"
tar -xzf /opt/ecache/bundle.tar.gz -C /opt/ecache/wheels
rm -f /opt/ecache/bundle.tar.gz
python3.11 -m venv /opt/ecache/venv
/opt/ecache/venv/bin/pip install --no-index --find-links /opt/ecache/wheels "$PACKAGE"
id ecache >/dev/null 2>&1 || useradd --system --no-create-home --shell /sbin/nologin ecache
