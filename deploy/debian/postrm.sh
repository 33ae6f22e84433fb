#!/bin/sh
# postrm of the gantry package: purge removes the data directory (the CAS,
# action cache and scheduler state); the gantry user stays, as Debian
# leaves system users, so that files it owns elsewhere keep a name.
set -e
if [ "$1" = purge ]; then
  rm -rf /var/lib/gantry
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
exit 0
