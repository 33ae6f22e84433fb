#!/bin/sh
# prerm of the gantry package: stop the units before the binary goes away.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop 'gantry-serve@*.service' gantry-worker.service || true
fi
exit 0
