#!/bin/sh
# postinst of the gantry package: the gantry system user and its data
# directory. Idempotent (runs on every configure, also on upgrades).
set -e
if [ "$1" = configure ]; then
  if ! getent passwd gantry >/dev/null; then
    adduser --system --group --home /var/lib/gantry --no-create-home \
      --shell /usr/sbin/nologin --gecos "Gantry remote execution" gantry
  fi
  install -d -o gantry -g gantry -m 0750 /var/lib/gantry
  # The configuration may hold a database DSN or S3 settings: readable by
  # the service's group only.
  chown root:gantry /etc/gantry/gantry.yaml
  chmod 0640 /etc/gantry/gantry.yaml
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    echo "gantry: start it with: systemctl enable --now gantry-serve@all (settings: /etc/gantry/gantry.yaml)"
  fi
fi
exit 0
