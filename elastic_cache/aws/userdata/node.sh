# Each node serves until the coordinator stops its slot or terminates the instance. It
# is not restarted when it dies: an empty node coming back would claim the whole ring;
# the coordinator notices the dead node and hands its ranges to their successors
# instead. With warm re-integration (--state-dir) the coordinator may stop the instance
# instead: systemd stops the node, which saves its records on this root volume, and the
# unit, enabled, starts it again at the next boot (StartInstances), when this script
# does not run.
#
# An instance runs one node per slot (ec2.nodes_per_instance, docs/aws.md): slot I is
# the unit ecache-node@I, whose node id and port are in /etc/ecache/slot-I.env. This
# script starts slot 0 for the node the instance was launched for; the coordinator
# starts the others through SSM Run Command.

# ProtectSystem=strict leaves the nodes one writable directory: their disk tier's when
# they have one (a disk: cold tier, docs/tiers.md; each node has its own directory in
# it), else their state directory.
install -d -o ecache -g ecache -m 0750 __WRITABLE_DIR__
install -d -m 0755 /etc/ecache
printf 'NODE_ID=%s\nNODE_PORT=%s\n' __NODE_ID__ __NODE_PORT__ >/etc/ecache/slot-0.env
cat >/etc/systemd/system/ecache-node@.service <<'UNIT'
[Unit]
Description=elastic-cache node, slot %i
After=network-online.target
Wants=network-online.target

[Service]
User=ecache
EnvironmentFile=/etc/ecache/slot-%i.env
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
systemctl enable --now ecache-node@0.service
echo "ecache node started $(date -u +%FT%TZ)"
