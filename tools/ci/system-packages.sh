#!/usr/bin/env bash
# Debian packages the tests use: OpenIPMI's simulator and ipmitool (IPMI emulator), sshd (the
# WoL + SSH driver's peer), dnsmasq (PXE/TFTP), openssl (test certificates), iproute2, and
# Network UPS Tools' upsd, dummy-ups driver and upsc (nut-server, nut-client: the lab's UPS,
# lab/src/lightsout_lab/nut.py; run from a work dir, no service is set up).
# With arguments, other groups instead: `images` (mmdebstrap, buildah: tools/images/build.sh),
# `node` (containerd, runc, the CNI plugins, iptables and gcc for the lab's real node,
# realnode.py), `prometheus` (Debian's Prometheus server: tests/e2e/test_metrics.py and
# `lightsout-lab dashboard-check` query the Grafana dashboard's expressions through it).
# Skips apt entirely when everything is already there.
set -euo pipefail
need=()
for group in "${@:-tests}"; do
  case "$group" in
    tests)
      command -v ipmi_sim >/dev/null || need+=(openipmi)
      command -v ipmitool >/dev/null || need+=(ipmitool)
      command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
      command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
      command -v openssl >/dev/null || need+=(openssl)
      command -v ip >/dev/null || need+=(iproute2)
      # The daemons live outside PATH: /lib/nut, /usr/lib/nut from trixie on.
      [ -x /lib/nut/upsd ] || [ -x /usr/lib/nut/upsd ] || need+=(nut-server)
      command -v upsc >/dev/null || need+=(nut-client)
      ;;
    images)
      command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
      command -v buildah >/dev/null || need+=(buildah)
      ;;
    node)
      command -v containerd >/dev/null || need+=(containerd)
      command -v runc >/dev/null || need+=(runc)
      [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
      # One DNAT rule stands in for kube-proxy's `kubernetes` Service.
      command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need+=(iptables)
      # The pause image is a C program linked statically (gcc -static needs libc.a).
      command -v gcc >/dev/null || need+=(gcc)
      [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
      ;;
    prometheus)
      command -v prometheus >/dev/null || need+=(prometheus)
      ;;
    *) echo "unknown package group: $group (tests, images, node, prometheus)" >&2; exit 2 ;;
  esac
done
if [ ${#need[@]} -eq 0 ]; then echo "system packages present"; exit 0; fi
echo "installing: ${need[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
