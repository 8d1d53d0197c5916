#!/usr/bin/env bash
# Installs the real peers the service's end-to-end tests talk to (Debian packages
# prometheus-alertmanager, prometheus, postgresql; podman, runc and mmdebstrap for the container
# image test; chromium and chromium-driver for the browser test of the incident pages) when
# running as root with apt-get and they are missing. Elsewhere it does nothing: those tests then
# skip and name the missing package.
set -uo pipefail
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null; then
  exit 0
fi
need=()
command -v alertmanager >/dev/null || command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
command -v prometheus >/dev/null || need+=(prometheus)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
[ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)  # podman run --init
[ -x /usr/lib/cni/portmap ] || need+=(containernetworking-plugins)  # podman run -p (CNI backend)
command -v iptables >/dev/null || need+=(iptables)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}") \
    || echo "warning: could not install ${need[*]}; the tests that need them will be skipped"
fi
exit 0
