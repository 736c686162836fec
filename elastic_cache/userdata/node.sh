# The node serves until the coordinator terminates the instance. It is not restarted
# when it dies: an empty node coming back would claim the whole ring; the coordinator
# notices the dead node and hands its ranges to their successors instead.
cat >/etc/systemd/system/ecache-node.service <<'UNIT'
[Unit]
Description=elastic-cache node
After=network-online.target
Wants=network-online.target

[Service]
User=ecache
ExecStart=__NODE_COMMAND__
Restart=no
LimitNOFILE=65536
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now ecache-node.service
echo "ecache node started $(date -u +%FT%TZ)"
