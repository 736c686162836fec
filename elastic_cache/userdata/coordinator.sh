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
systemctl daemon-reload
systemctl enable --now ecache-coordinator.service
echo "ecache coordinator started $(date -u +%FT%TZ)"
