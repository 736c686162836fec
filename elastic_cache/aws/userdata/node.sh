# The node serves until the coordinator terminates the instance. It is not restarted
# when it dies: an empty node coming back would claim the whole ring; the coordinator
# notices the dead node and hands its ranges to their successors instead. With warm
# re-integration (--state-dir) the coordinator may stop the instance instead: systemd
# stops the node, which saves its records on this root volume, and the unit, enabled,
# starts it again at the next boot (StartInstances), when this script does not run.

# ProtectSystem=strict leaves the node one writable directory: its disk tier's when it
# has one (a disk: cold tier, docs/tiers.md), else its state directory.
install -d -o ecache -g ecache -m 0750 __WRITABLE_DIR__
cat >/etc/systemd/system/ecache-node.service <<'UNIT'
[Unit]
Description=elastic-cache node
After=network-online.target
Wants=network-online.target

[Service]
User=ecache
ExecStart=__NODE_COMMAND__
Restart=no
# How long a stop waits for the node to exit before SIGKILL: with --state-dir it saves
# every record first, which for gigabytes takes longer than systemd's default 90 s.
TimeoutStopSec=__STOP_SECONDS__
WorkingDirectory=/var/lib/ecache
StateDirectory=ecache
ReadWritePaths=__WRITABLE_DIR__
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
