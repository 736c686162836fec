# The coordinator reads the cluster token from SSM itself when it starts (its role may
# read that one parameter); this script never sees it.
install -d -m 0755 /etc/ecache
echo __CONFIG_B64__ | base64 -d >/etc/ecache/config.toml
chmod 0644 /etc/ecache/config.toml
cat >/etc/systemd/system/ecache-coordinator.service <<'UNIT'
[Unit]
Description=elastic-cache coordinator
After=network-online.target
Wants=network-online.target

[Service]
User=ecache
# One coordinator process per vCPU (at most 64: `--workers`); "$$" is systemd's "$".
ExecStart=/bin/sh -c 'n=$$(nproc); [ "$$n" -le 64 ] || n=64; exec /opt/ecache/venv/bin/ecache coordinator --config /etc/ecache/config.toml --workers "$$n"'
Restart=on-failure
RestartSec=5
StateDirectory=ecache
LimitNOFILE=65536
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
UNIT
# `ecache deploy --update` rewrites the user data while the instance is stopped; at each
# later boot this takes the configuration from it (IMDSv2) before the coordinator runs.
install -d -m 0755 /var/lib/cloud/scripts/per-boot
cat >/var/lib/cloud/scripts/per-boot/ecache-config.sh <<'PERBOOT'
#!/bin/bash
set -euo pipefail
imds=http://169.254.169.254/latest
token=$(curl -sf -X PUT "$imds/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')
config=$(curl -sf -H "X-aws-ec2-metadata-token: $token" "$imds/user-data" |
    sed -n 's#^echo \([A-Za-z0-9+/=]*\) [|] base64 -d >/etc/ecache/config.toml$#\1#p')
[ -n "$config" ] || exit 0
printf '%s' "$config" | base64 --decode >/etc/ecache/config.toml.new
if ! cmp -s /etc/ecache/config.toml.new /etc/ecache/config.toml; then
    chmod 0644 /etc/ecache/config.toml.new
    mv /etc/ecache/config.toml.new /etc/ecache/config.toml
    systemctl restart ecache-coordinator.service
fi
rm -f /etc/ecache/config.toml.new
PERBOOT
chmod 0755 /var/lib/cloud/scripts/per-boot/ecache-config.sh
systemctl daemon-reload
systemctl enable --now ecache-coordinator.service
echo "ecache coordinator started $(date -u +%FT%TZ)"
